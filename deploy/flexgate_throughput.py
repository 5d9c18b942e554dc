"""Report a training job's throughput to the flexgate agent on its node.

flexgate caps GPU power during grid events. To cut the jobs that lose least, and to back off a
job that is slowed beyond its QoS tier, the gateway needs each job's real throughput. This
module sends it, in one line, with nothing beyond Python's standard library:

    from flexgate_throughput import ThroughputReporter
    reporter = ThroughputReporter.from_env()
    for batch in loader:
        loss = train_step(batch)
        reporter.step(tokens=global_batch_tokens)     # tokens the whole job processed this step

or, with Hugging Face Transformers:

    from flexgate_throughput import FlexgateCallback
    trainer = Trainer(..., callbacks=[FlexgateCallback(tokens_per_step=global_batch_tokens)])

What it does: `step()` counts tokens and time; a background thread posts the rate over the last
`interval_s` (2 s) to ``POST {agent}/v1/jobs/{job_id}/throughput``. Evaluation and checkpoint
time is reported as such (``reporter.phase("eval")`` / ``"checkpoint"``, the callback does it),
so the agent leaves it out of the job's figure. Only rank 0 reports (``RANK`` unset or 0): the
figure is the whole job's.

Configuration, from the environment (a Slurm TaskProlog sets them; see deploy/README.md):

- ``FLEXGATE_JOB_TOKEN``: this job's token (``flexgate-agent job-token $SLURM_JOB_ID``). Good
  for this job's reports only.
- ``FLEXGATE_JOB_ID``: the job id the gateway knows, default ``SLURM_JOB_ID``.
- ``FLEXGATE_AGENT_URL``: the node's agent, default ``http://127.0.0.1:9450``.

Reporting never breaks training: without a token or job id the reporter does nothing (and says
so once on stderr); an agent that does not answer within 1 s, or refuses a reading, is logged
once per kind of failure and the loop goes on.
"""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

__all__ = ["ThroughputReporter", "FlexgateCallback"]

DEFAULT_AGENT_URL = "http://127.0.0.1:9450"
PHASES = ("train", "eval", "checkpoint", "warmup")


def _warn(message):
    print(f"flexgate_throughput: {message}", file=sys.stderr, flush=True)


class ThroughputReporter:
    """Counts tokens per step and posts the job's rate to its node's agent."""

    def __init__(self, job_id, token, agent_url=DEFAULT_AGENT_URL, interval_s=2.0, timeout_s=1.0,
                 enabled=True, clock=time.monotonic):
        self.job_id = job_id
        self.agent_url = agent_url.rstrip("/")
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.enabled = bool(enabled and job_id and token)
        self._token = token
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._samples = 0.0
        self._counted_samples = False
        self._step = None
        self._phase = "train"
        self._since = clock()
        self._last_step = None
        self._warned = set()
        self._stop = threading.Event()
        self._thread = None
        self.sent = 0
        self.refused = 0

    @classmethod
    def from_env(cls, interval_s=2.0, environ=None):
        """A reporter configured from the environment; a no-op one when it lacks a token or id,
        or on a rank other than 0."""
        env = os.environ if environ is None else environ
        job_id = env.get("FLEXGATE_JOB_ID") or env.get("SLURM_JOB_ID")
        token = env.get("FLEXGATE_JOB_TOKEN")
        rank = env.get("RANK", "0")
        enabled = rank in ("", "0")
        if enabled and not (job_id and token):
            _warn("FLEXGATE_JOB_TOKEN and FLEXGATE_JOB_ID (or SLURM_JOB_ID) are not both set; "
                  "throughput is not reported, and the gateway treats this job's throughput as unknown")
        return cls(job_id, token, env.get("FLEXGATE_AGENT_URL", DEFAULT_AGENT_URL), interval_s,
                   enabled=enabled)

    # -- what a training loop calls --------------------------------------------------------

    def step(self, tokens, samples=None, step=None):
        """Count one optimizer step of `tokens` (the whole job's) and, optionally, `samples`."""
        if not self.enabled:
            return
        with self._lock:
            self._tokens += float(tokens)
            if samples is not None:
                self._samples += float(samples)
                self._counted_samples = True
            self._step = step if step is not None else (self._step or 0) + 1
            self._last_step = self._clock()
        self._start()

    def phase(self, name):
        """Mark what the job does from now on: 'train', 'eval', 'checkpoint' or 'warmup'. The
        time counted so far is reported under the phase it was spent in."""
        if name not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {name!r}")
        if not self.enabled:
            return
        self.flush()
        with self._lock:
            self._phase = name

    def flush(self):
        """Post what was counted since the last post, now (also called by the thread)."""
        report = self._take()
        if report is not None:
            self._post(report)

    def close(self):
        """Post what is left and stop the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + self.interval_s)
        if self.enabled:
            self.flush()

    # -- inside ----------------------------------------------------------------------------

    def _start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="flexgate-throughput", daemon=True)
            self._thread.start()

    def _run(self):
        while not self._stop.wait(self.interval_s):
            self.flush()

    def _take(self):
        with self._lock:
            # Training time ends at the last step counted, not now: a report taken halfway
            # through a step would otherwise count that step's tokens against part of its time
            # (up to one step too fast per report, which the agent's top decile would pick).
            training = self._phase == "train" and self._tokens > 0 and self._last_step is not None
            end = self._last_step if training else self._clock()
            elapsed = end - self._since
            if elapsed <= 0 or (self._tokens == 0 and self._phase == "train"):
                return None
            report = {"tokens_per_s": self._tokens / elapsed, "phase": self._phase}
            if self._counted_samples:
                report["samples_per_s"] = self._samples / elapsed
            if self._step is not None:
                report["step"] = int(self._step)
            self._tokens, self._samples, self._counted_samples, self._since = 0.0, 0.0, False, end
            return report

    def _post(self, report):
        url = f"{self.agent_url}/v1/jobs/{self.job_id}/throughput"
        request = urllib.request.Request(
            url, data=json.dumps(report).encode(), method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                answer.read()
            self.sent += 1
        except urllib.error.HTTPError as e:
            self.refused += 1
            detail = e.read().decode(errors="replace")[:300]
            self._warn_once(f"http{e.code}", f"the agent refused a reading ({e.code}): {detail}")
        except (OSError, ValueError) as e:
            self._warn_once(type(e).__name__, f"the agent at {self.agent_url} did not take a reading: {e}")

    def _warn_once(self, kind, message):
        if kind not in self._warned:
            self._warned.add(kind)
            _warn(message + " (said once; training goes on)")


class FlexgateCallback:
    """A Hugging Face ``Trainer`` callback reporting through a :class:`ThroughputReporter`.

    Tokens per step come from ``state.num_input_tokens_seen`` when the Trainer counts them
    (``include_num_input_tokens_seen=True``), else from ``tokens_per_step`` (the global batch's
    tokens). Evaluation and checkpoint saving are reported as their phases. It needs no import
    of ``transformers``: the Trainer calls any ``on_*`` event by name, and events this class does
    not handle do nothing.
    """

    def __init__(self, tokens_per_step=None, reporter=None):
        self.tokens_per_step = tokens_per_step
        self.reporter = reporter if reporter is not None else ThroughputReporter.from_env()
        self._seen = None

    def on_step_end(self, args, state, control, **kwargs):
        seen = getattr(state, "num_input_tokens_seen", None)
        if seen:
            tokens = seen - (self._seen if self._seen is not None else 0)
            self._seen = seen
        else:
            tokens = self.tokens_per_step
        if tokens:
            self.reporter.step(tokens=tokens, step=getattr(state, "global_step", None))

    def on_evaluate(self, args, state, control, **kwargs):
        self.reporter.phase("train")

    def on_prediction_step(self, args, state, control, **kwargs):
        if self.reporter._phase != "eval":
            self.reporter.phase("eval")

    def on_save(self, args, state, control, **kwargs):
        # Called after the checkpoint is written: the time since the last report was spent on it.
        self.reporter.phase("checkpoint")
        self.reporter.phase("train")

    def on_train_end(self, args, state, control, **kwargs):
        self.reporter.close()

    def __getattr__(self, name):
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def _demo(argv):
    """`python3 flexgate_throughput.py TOKENS_PER_STEP STEP_S SECONDS`: a stand-in training loop
    (sleeps STEP_S per step) reporting TOKENS_PER_STEP per step, for trying a node's set-up."""
    tokens, step_s, seconds = float(argv[0]), float(argv[1]), float(argv[2])
    reporter = ThroughputReporter.from_env(interval_s=float(os.environ.get("FLEXGATE_REPORT_S", "2")))
    if not reporter.enabled:
        return 2
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(step_s)
        reporter.step(tokens=tokens)
    reporter.close()
    print(f"sent {reporter.sent} readings, {reporter.refused} refused", flush=True)
    return 0 if reporter.sent > 0 else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(_demo.__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(_demo(sys.argv[1:]))
