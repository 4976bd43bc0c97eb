#!/usr/bin/env python3
"""A job handler for `coalesce work --post`, in Python's standard library only.

It is what a Python service would write: check the bearer token and the
HMAC signature, run the job, answer. For the test it behaves as each job's
args say ("behave": "ok", "fail_once" (500, then 200), "reject" (422),
"slow" (sleeps "sleep" seconds)) and appends one JSON line per request to
the log file: when it started and ended, the status it answered, the
coalesce headers and the job document.

usage: push_handler.py LOGFILE   (prints "listening PORT" once bound)
env:   PUSH_TOKEN, PUSH_SECRET   (what coalesce work gets as
       COALESCE_POST_TOKEN and COALESCE_POST_SECRET)
"""
import hashlib
import hmac
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = os.environ.get("PUSH_TOKEN", "")
SECRET = os.environ.get("PUSH_SECRET", "").encode()
LOG = sys.argv[1]
lock = threading.Lock()
attempts = {}  # Idempotency-Key -> requests seen


def signature_ok(header, body):
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t, v1 = parts.get("t", ""), parts.get("v1", "")
    if not t.isdigit() or abs(time.time() - int(t)) > 300:
        return False
    want = hmac.new(SECRET, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, v1)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        started = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        status, problem, doc = 200, "", None
        # Compared in constant time (as the signature): != stops at the first
        # differing byte, and its timing tells an attacker how much is right.
        if TOKEN and not hmac.compare_digest(
                self.headers.get("Authorization", "").encode(), ("Bearer " + TOKEN).encode()):
            status, problem = 401, "bad token"
        elif SECRET and not signature_ok(self.headers.get("Coalesce-Signature", ""), body):
            status, problem = 401, "bad signature"
        else:
            doc = json.loads(body)
            key = self.headers.get("Idempotency-Key", "")
            with lock:
                n = attempts[key] = attempts.get(key, 0) + 1
            behave = doc["args"].get("behave", "ok")
            if behave == "fail_once" and n == 1:
                status, problem = 500, "failing once on purpose"
            elif behave == "reject":
                status, problem = 422, "rejected on purpose"
            elif behave == "slow":
                time.sleep(float(doc["args"].get("sleep", 4)))
        record = {
            "start": started, "end": time.time(), "status": status, "problem": problem,
            "headers": {k: v for k, v in self.headers.items()
                        if k.lower().startswith("coalesce-") or k.lower() == "idempotency-key"},
            "doc": doc,
        }
        with lock, open(LOG, "a") as f:
            f.write(json.dumps(record) + "\n")
        out = problem.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("listening", server.server_address[1], flush=True)
server.serve_forever()
