"""A stand-in training loop whose speed follows its GPUs' power limit, for the tests.

    capped_training.py MINORS TOKENS_PER_STEP STEP_S SECONDS

Every step makes TOKENS_PER_STEP tokens and takes STEP_S x (700 / limit) seconds, where limit is
the power limit the node's agent reports for the first of MINORS (comma-separated device minors):
its throughput is proportional to its cap, a curve steeper than any family member. It reads the
limit with the agent's read-only token (FLEXGATE_TEST_READ_TOKEN; a real job does not need it) and
reports its throughput through deploy/flexgate_throughput.py (FLEXGATE_JOB_ID, FLEXGATE_JOB_TOKEN,
FLEXGATE_AGENT_URL), so it is seen exactly as a real job would be.
"""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "deploy"))
import flexgate_throughput  # noqa: E402


def limit_w(agent_url, read_token, minor):
    request = urllib.request.Request(
        agent_url.rstrip("/") + "/v1/gpus", headers={"Authorization": "Bearer " + read_token}
    )
    with urllib.request.urlopen(request, timeout=1.0) as answer:
        gpus = json.load(answer)
    for gpu in gpus:
        if gpu.get("minor") == minor and gpu.get("limit_w"):
            return float(gpu["limit_w"])
    return 700.0


def main():
    minors = [int(m) for m in sys.argv[1].split(",")]
    tokens_per_step, step_s, seconds = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    agent_url = os.environ["FLEXGATE_AGENT_URL"]
    read_token = os.environ["FLEXGATE_TEST_READ_TOKEN"]
    reporter = flexgate_throughput.ThroughputReporter.from_env(interval_s=0.5)
    limit, read_at = 700.0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if time.monotonic() - read_at > 0.5:
            try:
                limit = limit_w(agent_url, read_token, minors[0])
            except OSError as e:
                print(f"capped_training: agent unreadable: {e}", file=sys.stderr)
            read_at = time.monotonic()
        time.sleep(step_s * 700.0 / max(limit, 100.0))
        reporter.step(tokens=tokens_per_step)
    reporter.close()


if __name__ == "__main__":
    main()
