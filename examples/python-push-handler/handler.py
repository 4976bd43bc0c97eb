#!/usr/bin/env python3
"""A job handler for `coalesce work --post URL`, in Python's standard library only.

It is what a Python service writes to run coalesce jobs over HTTP: check the
bearer token and the HMAC signature, run each job once per job id, answer.

    python3 examples/python-push-handler/handler.py            # listens on 127.0.0.1:8090
    coalesce work --config examples/coalesce.yaml --type recompute_financials \\
        --post http://127.0.0.1:8090/

With COALESCE_POST_TOKEN and/or COALESCE_POST_SECRET set in the environment
of both processes, the handler refuses requests without the same bearer token
or without a valid Coalesce-Signature (t=<unix>,v1=<hex HMAC-SHA256 of
"<t>.<body>">, at most 5 minutes old).

Answers: 200 acknowledges the job; 401 (a bad token or signature) and 422 (a
job it can never run) dead-letter it at once; 500 (raised by the job) makes
coalesce work retry it with backoff. The Idempotency-Key header is the job's
id, the same for every delivery of one job and for its replay from the dead
letters: a job already done is acknowledged without running it again (here
in memory; a real service keeps it with the effect, see docs/outbox.md).
"""
import argparse
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = os.environ.get("COALESCE_POST_TOKEN", "")
SECRET = os.environ.get("COALESCE_POST_SECRET", "").encode()
MAX_SKEW = 300  # seconds a signature's timestamp may be away from now

done = set()  # ids of the jobs run (Idempotency-Key)
done_lock = threading.Lock()


def signature_ok(header, body):
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = parts.get("t", ""), parts.get("v1", "")
    if not t.isdigit() or abs(time.time() - int(t)) > MAX_SKEW:
        return False
    want = hmac.new(SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, v1)


def run_job(job):
    """The job itself: here, say what it covers. Raise to have it retried."""
    summary = job.get("summary", {})
    line = "%s %s: %d events" % (job["type"], json.dumps(job["args"], sort_keys=True), summary.get("events", 0))
    if summary.get("items"):
        line += ", items %s" % json.dumps(summary["items"])
    print(line + " (job %s, attempt %d)" % (job["id"], job.get("attempt", 1)), flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, text):
        out = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        # Compared in constant time: != stops at the first differing byte,
        # and its timing tells an attacker how much of the token is right.
        if TOKEN and not hmac.compare_digest(
                self.headers.get("Authorization", "").encode(), ("Bearer " + TOKEN).encode()):
            return self.answer(401, "bad token")
        if SECRET and not signature_ok(self.headers.get("Coalesce-Signature", ""), body):
            return self.answer(401, "bad signature")
        try:
            job = json.loads(body)
            job_id = job["id"]
            job["type"], job["args"]
        except (ValueError, KeyError, TypeError) as e:
            return self.answer(422, "not a coalesce job: %s" % e)
        job_id = self.headers.get("Idempotency-Key", job_id)
        with done_lock:
            if job_id in done:
                return self.answer(200, "done before")
        try:
            run_job(job)
        except Exception as e:  # retried by coalesce work
            return self.answer(500, "failed: %s" % e)
        with done_lock:
            done.add(job_id)
        self.answer(200, "ok")

    def log_message(self, *args):
        pass


def main():
    p = argparse.ArgumentParser(description="A coalesce work --post handler (standard library only).")
    p.add_argument("--listen", default="127.0.0.1:8090", help="host:port to listen on (port 0: any free port)")
    a = p.parse_args()
    host, _, port = a.listen.rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    print("listening on http://%s:%d/" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
