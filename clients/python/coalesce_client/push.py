"""A helper for handlers of ``coalesce work --post URL`` (docs/workers.md,
"Workers in any language"): check the bearer token and the HMAC signature in constant
time, and parse the job document."""
from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

DOCUMENT_VERSION = 1


class PushAuthError(Exception):
    """The request is not from coalesce: answer 401 (``field`` names the header)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Summary:
    events: int
    first_seen: str
    last_seen: str
    payload: Any = None  # the latest args (payload last)
    items: List[Any] = field(default_factory=list)  # distinct items (payload accumulate)


@dataclass(frozen=True)
class Job:
    """The job document (version 1), as --exec gets it on stdin."""

    v: int
    type: str
    args: Any
    key: str
    fingerprint: str
    round: str
    mode: str
    payload: str
    opened_at: str
    due_at: Optional[str]
    traceparent: Optional[str]
    attempt: int
    release: str
    summary: Summary
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def effect_key(self) -> str:
        """``type:key.round``: the same for every attempt of one job and for
        its replay (docs/outbox.md, "the effect record")."""
        return f"{self.type}:{self.key}.{self.round}"


def parse_job(body: Union[bytes, str, Mapping[str, Any]]) -> Job:
    """Parse a job document; ValueError names what is wrong."""
    doc = json.loads(body) if isinstance(body, (bytes, str)) else dict(body)
    if not isinstance(doc, dict):
        raise ValueError("job document: not a JSON object")
    if doc.get("v") != DOCUMENT_VERSION:
        raise ValueError(f"job document: v {doc.get('v')!r}, this helper reads version {DOCUMENT_VERSION}")
    try:
        s = doc["summary"]
        return Job(
            v=doc["v"], type=doc["type"], args=doc.get("args"), key=doc["key"], fingerprint=doc["fingerprint"],
            round=doc.get("round", ""), mode=doc.get("mode", ""), payload=doc.get("payload", ""),
            opened_at=doc["opened_at"], due_at=doc.get("due_at"), traceparent=doc.get("traceparent"),
            attempt=int(doc["attempt"]), release=doc["release"],
            summary=Summary(events=int(s["events"]), first_seen=s["first_seen"], last_seen=s["last_seen"],
                            payload=s.get("payload"), items=list(s.get("items") or [])),
            raw=doc,
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"job document: missing or wrong member {e}") from e


def _header(headers: Mapping[str, str], name: str) -> str:
    get = getattr(headers, "get", None)
    v = get(name) if get else None
    if v is None:
        for k, val in headers.items():
            if k.lower() == name.lower():
                return val
    return v or ""


def verify_push(headers: Mapping[str, str], body: bytes, token: Optional[str] = None,
                secret: Union[bytes, str, None] = None, tolerance: float = 300.0,
                now: Optional[float] = None) -> Job:
    """Check a push request and return its job. ``token``:
    ``COALESCE_POST_TOKEN`` (Authorization: Bearer); ``secret``:
    ``COALESCE_POST_SECRET`` (Coalesce-Signature: t=<unix s>,v1=<hex
    HMAC-SHA256 of "<t>.<body>">), refused more than ``tolerance`` seconds
    away. Both compared in constant time. Raises PushAuthError."""
    if token:
        got = _header(headers, "Authorization").encode()
        if not hmac.compare_digest(got, ("Bearer " + token).encode()):
            raise PushAuthError("missing or wrong bearer token", "Authorization")
    if secret:
        key = secret.encode() if isinstance(secret, str) else secret
        parts = dict(p.strip().split("=", 1) for p in _header(headers, "Coalesce-Signature").split(",") if "=" in p)
        t, v1 = parts.get("t", ""), parts.get("v1", "")
        if not t.isdigit():
            raise PushAuthError("Coalesce-Signature: no t=<unix seconds>", "Coalesce-Signature")
        if abs((time.time() if now is None else now) - int(t)) > tolerance:
            raise PushAuthError(f"Coalesce-Signature: t={t} is more than {tolerance:.0f}s away", "Coalesce-Signature")
        want = hmac.new(key, t.encode() + b"." + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want.encode(), v1.encode()):
            raise PushAuthError("Coalesce-Signature: wrong signature", "Coalesce-Signature")
    return parse_job(body)


class Retry(Exception):
    """Raise from a handler to answer 503: coalesce retries the job with its backoff."""


class Reject(Exception):
    """Raise from a handler to answer 422: coalesce dead-letters the job at once."""


def push_server(handle: Callable[[Job], None], host: str = "127.0.0.1", port: int = 0,
                token: Optional[str] = None, secret: Union[bytes, str, None] = None) -> ThreadingHTTPServer:
    """An HTTP server for ``coalesce work --post``: each POST is verified
    (401 otherwise), parsed and given to ``handle``; returning answers 200
    (ack), Reject 422 (dead letter), Retry 503 and anything else raised
    500 (both retried with coalesce's backoff).
    Call ``serve_forever()``; ``server_address`` has the port."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            try:
                job = verify_push(self.headers, body, token=token, secret=secret)
                handle(job)
                status, out = 200, b""
            except PushAuthError as e:
                status, out = 401, str(e).encode()
            except ValueError as e:
                status, out = 400, str(e).encode()
            except Reject as e:
                status, out = 422, str(e).encode()
            except Retry as e:
                status, out = 503, str(e).encode()
            except Exception as e:  # noqa: BLE001 - any failure is retried
                status, out = 500, repr(e).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)
