"""Tests of flexgate_throughput.py against a loopback HTTP server standing in for the agent
(the real agent is in tests/job_throughput.rs): what is posted, phases, the Trainer callback,
and that a missing or failing agent never breaks training. Run: python3 -m unittest -v
deploy/test_flexgate_throughput.py"""

import http.server
import json
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flexgate_throughput as ft  # noqa: E402


class Agent(http.server.BaseHTTPRequestHandler):
    posts = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Agent.posts.append((self.path, self.headers["Authorization"], json.loads(body)))
        self.send_response(Agent.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"job_id":"7","tokens_per_s":1.0}')

    def log_message(self, *args):
        pass


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class ReporterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Agent)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.server.server_address[1]}"

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()

    def setUp(self):
        Agent.posts.clear()
        Agent.status = 200

    def reporter(self, clock):
        # A long interval: the test posts with flush(), the thread never fires.
        return ft.ThroughputReporter("7", "tok-7", self.url, interval_s=3600, clock=clock)

    def test_rate_over_the_interval_with_its_step_and_token(self):
        clock = Clock()
        r = self.reporter(clock)
        for _ in range(4):
            clock.t += 0.5
            r.step(tokens=1000, samples=2)
        r.flush()
        self.assertEqual(len(Agent.posts), 1)
        path, auth, body = Agent.posts[0]
        self.assertEqual(path, "/v1/jobs/7/throughput")
        self.assertEqual(auth, "Bearer tok-7")
        self.assertEqual(body, {"tokens_per_s": 2000.0, "samples_per_s": 4.0, "phase": "train", "step": 4})
        r.close()

    def test_eval_and_checkpoint_time_is_reported_under_its_phase(self):
        clock = Clock()
        r = self.reporter(clock)
        clock.t += 1
        r.step(tokens=500)
        r.phase("eval")
        clock.t += 10
        r.phase("train")
        phases = [(b["phase"], b["tokens_per_s"]) for _, _, b in Agent.posts]
        self.assertEqual(phases, [("train", 500.0), ("eval", 0.0)])
        with self.assertRaises(ValueError):
            r.phase("lunch")
        r.close()

    def test_the_trainer_callback_counts_tokens_seen_and_ignores_other_events(self):
        clock = Clock()
        cb = ft.FlexgateCallback(tokens_per_step=64, reporter=self.reporter(clock))

        class State:
            num_input_tokens_seen = 0
            global_step = 0

        state = State()
        for step in (1, 2):
            clock.t += 1
            state.num_input_tokens_seen += 4096
            state.global_step = step
            cb.on_step_end(None, state, None)
        cb.on_init_end(None, state, None)  # any event it does not handle does nothing
        cb.on_save(None, state, None)
        self.assertEqual(Agent.posts[0][2], {"tokens_per_s": 4096.0, "phase": "train", "step": 2})
        cb.on_train_end(None, state, None)
        with self.assertRaises(AttributeError):
            cb.not_an_event  # noqa: B018

    def test_without_a_token_or_on_another_rank_nothing_is_sent(self):
        quiet = ft.ThroughputReporter.from_env(environ={"SLURM_JOB_ID": "7"})
        self.assertFalse(quiet.enabled)
        other_rank = ft.ThroughputReporter.from_env(
            environ={"SLURM_JOB_ID": "7", "FLEXGATE_JOB_TOKEN": "t", "RANK": "3"})
        self.assertFalse(other_rank.enabled)
        ok = ft.ThroughputReporter.from_env(
            environ={"SLURM_JOB_ID": "7", "FLEXGATE_JOB_TOKEN": "t", "FLEXGATE_AGENT_URL": self.url})
        self.assertTrue(ok.enabled)
        self.assertEqual(ok.agent_url, self.url)
        quiet.step(tokens=1)
        quiet.close()
        self.assertEqual(Agent.posts, [])

    def test_a_refusing_or_absent_agent_never_raises(self):
        clock = Clock()
        Agent.status = 422
        r = self.reporter(clock)
        clock.t += 1
        r.step(tokens=1)
        r.flush()
        self.assertEqual((r.sent, r.refused), (0, 1))
        gone = ft.ThroughputReporter("7", "t", "http://127.0.0.1:9", interval_s=3600, clock=clock)
        clock.t += 1
        gone.step(tokens=1)
        gone.flush()
        self.assertEqual(gone.sent, 0)
        r.close()
        gone.close()


if __name__ == "__main__":
    unittest.main()
