"""Tests of coalesce_client against a running daemon (started by
cmd/coalesce's TestPythonClient with real Redis and NATS):

COALESCE_URL    the daemon's base URL (required)
COALESCE_BIN    the built coalesce binary (for the push-worker test)
COALESCE_REDIS, COALESCE_NATS  the servers the daemon uses
"""
import hashlib
import hmac
import json
import os
import subprocess
import threading
import time
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from coalesce_client import Client, CoalesceError, PushAuthError, RetryPolicy, parse_job, push_server, verify_push

URL = os.environ.get("COALESCE_URL", "")


def unique() -> str:
    return uuid.uuid4().hex[:12]


@unittest.skipUnless(URL, "COALESCE_URL is not set (cmd/coalesce's TestPythonClient sets it)")
class DaemonTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = Client(URL, timeout=10)

    def test_submit_explain_round_cancel(self) -> None:
        tenant = unique()
        d1 = self.c.submit("recompute", {"tenant_id": tenant, "order": 1})
        self.assertEqual(d1.outcome, "scheduled")
        self.assertEqual(d1.events, 1)
        self.assertFalse(d1.replayed)
        d2 = self.c.submit("recompute", {"tenant_id": tenant, "order": 2})
        self.assertEqual((d2.outcome, d2.events, d2.round), ("coalesced", 2, d1.round))
        ex = self.c.explain("recompute", {"order": 3, "tenant_id": tenant})
        self.assertEqual(ex["key"], d1.key)
        self.assertEqual(ex["would"], "coalesced")
        self.assertEqual(ex["pending"]["events"], 2)
        r = self.c.round("recompute", d1.key)
        self.assertEqual((r["round"], r["events"]), (d1.round, 2))
        cancelled = self.c.cancel("recompute", d1.key, d1.round)
        self.assertEqual(cancelled["cancelled"]["round"], d1.round)
        self.assertIsNone(self.c.round("recompute", d1.key))
        with self.assertRaises(CoalesceError) as again:  # a retried cancel
            self.c.cancel("recompute", d1.key, d1.round)
        self.assertEqual((again.exception.status, again.exception.code), (409, "already_cancelled"))

    def test_retry_with_the_same_key_is_replayed(self) -> None:
        tenant, key = unique(), str(uuid.uuid4())
        d1 = self.c.submit("digest", {"user": tenant, "n": 1}, idempotency_key=key)
        d2 = self.c.submit("digest", {"n": 1.0, "user": tenant}, idempotency_key=key)
        self.assertTrue(d2.replayed)
        self.assertEqual((d2.round, d2.events, d2.outcome), (d1.round, 1, d1.outcome))
        with self.assertRaises(CoalesceError) as cm:
            self.c.submit("digest", {"user": tenant, "n": 2}, idempotency_key=key)
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "idempotency_key_reused"))
        self.assertEqual(self.c.round("digest", d1.key)["events"], 1)

    def test_errors_carry_code_and_field(self) -> None:
        with self.assertRaises(CoalesceError) as cm:
            self.c.submit("recompute", {"tenant_id": 9007199254740993})
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (400, "unsafe_integer", "args.tenant_id"))
        self.assertIn("string", e.message)
        with self.assertRaises(CoalesceError) as cm:
            self.c.submit("no_such_type", {})
        self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.field), (404, "no_policy", "type"))

    def test_batch_streams_answers_in_order(self) -> None:
        user = unique()
        events = [{"type": "digest", "args": {"user": user, "n": i}} for i in range(500)]
        events.insert(7, {"type": "digest", "args": {"user": user, "n": 9007199254740993}})
        answers = list(self.c.submit_batch(iter(events)))
        self.assertEqual(len(answers), 501)
        self.assertIsInstance(answers[7], CoalesceError)
        self.assertEqual(answers[7].code, "unsafe_integer")
        decisions = [a for a in answers if not isinstance(a, CoalesceError)]
        self.assertEqual(decisions[0].outcome, "scheduled")
        self.assertEqual([d.events for d in decisions], list(range(1, 501)))
        # Sent again with the same keys: every line replayed, nothing counted.
        again = [dict(e, idempotency_key=f"{user}-{i}") for i, e in enumerate(events)]
        first = list(self.c.submit_batch(again))
        second = list(self.c.submit_batch(again))
        self.assertTrue(all(d.replayed for d in second if not isinstance(d, CoalesceError)))
        self.assertEqual([getattr(d, "events", None) for d in first], [getattr(d, "events", None) for d in second])

    def test_policies(self) -> None:
        self.assertIn("digest", [p["type"] for p in self.c.policies()])

    @unittest.skipUnless(os.environ.get("COALESCE_BIN"), "COALESCE_BIN is not set")
    def test_push_worker_gets_verified_jobs(self) -> None:
        user, jobs, got = unique(), [], threading.Event()

        def handle(job):
            if job.args.get("user") == user:
                jobs.append(job)
                got.set()

        srv = push_server(handle, token="tok-1", secret="s3cret")
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        port = srv.server_address[1]
        env = dict(os.environ, COALESCE_POST_TOKEN="tok-1", COALESCE_POST_SECRET="s3cret")
        work = subprocess.Popen([os.environ["COALESCE_BIN"], "work", "--redis", os.environ["COALESCE_REDIS"],
                                 "--nats", os.environ["COALESCE_NATS"], "--type", "digest",
                                 "--post", f"http://127.0.0.1:{port}/jobs"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.addCleanup(work.wait)
        self.addCleanup(work.terminate)
        for n in (1, 2, 3):
            self.c.submit("digest", {"user": user, "n": n})
        self.assertTrue(got.wait(30), "no job pushed within 30 s")
        job = jobs[0]
        self.assertEqual((job.v, job.type, job.summary.events, len(job.summary.items)), (1, "digest", 3, 3))
        self.assertEqual(job.effect_key, f"digest:{job.key}.{job.round}")


class PushHelperTest(unittest.TestCase):
    """verify_push against signatures made as worker/push.go makes them."""

    doc = {"v": 1, "type": "t", "args": {"a": 1}, "key": "k" * 64, "fingerprint": "f" * 64, "round": "0123456789abcdef",
           "opened_at": "2026-12-01T00:00:00Z", "attempt": 1, "release": "released",
           "summary": {"events": 2, "first_seen": "2026-12-01T00:00:00Z", "last_seen": "2026-12-01T00:00:01Z"}}

    def sign(self, body: bytes, t: int, secret: bytes = b"s3cret") -> str:
        return f"t={t},v1=" + hmac.new(secret, str(t).encode() + b"." + body, hashlib.sha256).hexdigest()

    def test_verify(self) -> None:
        body, now = json.dumps(self.doc).encode(), int(time.time())
        ok = {"Authorization": "Bearer tok", "Coalesce-Signature": self.sign(body, now)}
        job = verify_push(ok, body, token="tok", secret="s3cret")
        self.assertEqual((job.summary.events, job.args), (2, {"a": 1}))
        for headers, field in [
            ({**ok, "Authorization": "Bearer nope"}, "Authorization"),
            ({"Coalesce-Signature": ok["Coalesce-Signature"]}, "Authorization"),
            ({**ok, "Coalesce-Signature": self.sign(body, now, b"other")}, "Coalesce-Signature"),
            ({**ok, "Coalesce-Signature": self.sign(body, now - 3600)}, "Coalesce-Signature"),
            ({**ok, "Coalesce-Signature": "v1=abc"}, "Coalesce-Signature"),
        ]:
            with self.assertRaises(PushAuthError) as cm:
                verify_push(headers, body, token="tok", secret="s3cret")
            self.assertEqual(cm.exception.field, field)
        with self.assertRaises(PushAuthError):
            verify_push(ok, body + b" ", token="tok", secret="s3cret")  # the body changed

    def test_parse_refuses_other_versions(self) -> None:
        with self.assertRaises(ValueError):
            parse_job(json.dumps(dict(self.doc, v=2)))
        with self.assertRaises(ValueError):
            parse_job(json.dumps({"v": 1}))


class RetryAfterTest(unittest.TestCase):
    """The client's waits, against a local server answering as the daemon
    does when it sheds load (the daemon's own 429/503 are tested in Go)."""

    def test_honours_retry_after_and_keeps_the_key(self) -> None:
        seen = []

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                seen.append(self.headers.get("Idempotency-Key"))
                if len(seen) < 3:
                    body = b'{"error":{"code":"busy","message":"later"}}'
                    self.send_response(429 if len(seen) == 1 else 503)
                    self.send_header("Retry-After", "2")
                else:
                    body = json.dumps({"outcome": "coalesced", "type": "t", "key": "k", "fingerprint": "f",
                                       "round": "r", "events": 2, "replayed": True}).encode()
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        slept = []
        c = Client(f"http://127.0.0.1:{srv.server_address[1]}", sleep=slept.append)
        d = c.submit("t", {})
        self.assertTrue(d.replayed)
        self.assertEqual(slept, [2.0, 2.0])
        self.assertEqual(len(set(seen)), 1, "every attempt must carry the same Idempotency-Key")
        c = Client(f"http://127.0.0.1:{srv.server_address[1]}", sleep=slept.append, retry=RetryPolicy(attempts=1))
        seen.clear()
        with self.assertRaises(CoalesceError) as cm:
            c.submit("t", {})
        self.assertEqual((cm.exception.status, cm.exception.retry_after), (429, 2.0))


if __name__ == "__main__":
    unittest.main()
