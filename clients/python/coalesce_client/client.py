"""The HTTP API client (api/openapi.yaml is the contract)."""
from __future__ import annotations

import http.client
import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Union
from urllib.parse import quote, urlsplit


class CoalesceError(Exception):
    """An error answer: ``status`` (HTTP), ``code`` (``unsafe_integer``,
    ``no_policy``, ``store_unavailable``, …), ``message`` and ``field`` (the
    part of the request at fault, e.g. ``args.tenant_id``), and the
    ``retry_after`` seconds of a 429 or 503."""

    def __init__(self, status: int, code: str, message: str, field: str = "", retry_after: Optional[float] = None):
        super().__init__(f"{code}: {message}" if code else message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    @classmethod
    def from_body(cls, status: int, body: Union[bytes, Mapping[str, Any]], retry_after: Optional[float] = None) -> "CoalesceError":
        try:
            doc = json.loads(body) if isinstance(body, (bytes, str)) else body
            e = doc["error"]
            return cls(status, e.get("code", ""), e.get("message", ""), e.get("field", ""), retry_after)
        except (ValueError, KeyError, TypeError):
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            return cls(status, "", f"HTTP {status}: {text[:200]}", "", retry_after)


@dataclass(frozen=True)
class Decision:
    """What the daemon decided for one event."""

    outcome: str  # scheduled, coalesced, extended, published, throttled, duplicate, bypassed
    type: str
    key: str  # the round key, 64 hex digits
    fingerprint: str
    round: str  # the round token, 16 hex digits ("" when bypassed)
    events: int  # events in the round so far, this one included
    due_at: Optional[str] = None  # RFC 3339; None for immediate jobs
    replayed: bool = False  # an earlier request's decision (same idempotency key)
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "Decision":
        return cls(
            outcome=doc["outcome"], type=doc["type"], key=doc["key"], fingerprint=doc["fingerprint"],
            round=doc.get("round", ""), events=int(doc["events"]), due_at=doc.get("due_at"),
            replayed=bool(doc.get("replayed", False)), raw=dict(doc),
        )


@dataclass(frozen=True)
class RetryPolicy:
    """How requests are retried: up to ``attempts`` in all, waiting
    Retry-After for 429/503 (at most ``max_wait``), else ``backoff`` doubling
    with jitter, for connection errors and time-outs."""

    attempts: int = 5
    backoff: float = 0.2
    max_wait: float = 30.0


_RETRY_STATUSES = (429, 503)


class Client:
    """A client of one daemon. Thread-safe (a connection per request)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", token: Optional[str] = None,
                 timeout: float = 10.0, retry: Optional[RetryPolicy] = None, sleep=time.sleep):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url {base_url!r}: want http://host:port or https://host:port")
        self._scheme, self._host, self._port = u.scheme, u.hostname, u.port
        self._base = u.path.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._retry = retry or RetryPolicy()
        self._sleep = sleep

    # -- the API -------------------------------------------------------------

    def submit(self, type: str, args: Any, key: Optional[str] = None, traceparent: Optional[str] = None,
               idempotency_key: Optional[str] = None) -> Decision:
        """Decide one event (POST /v1/events). Retried safely: the request
        carries ``idempotency_key`` (a fresh UUID by default), so a retry
        of an event already decided gets that decision (``replayed``)."""
        body = _event(type, args, key, traceparent)
        headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        status, hdrs, data = self._request("POST", "/v1/events", json.dumps(body).encode(), headers)
        return Decision.from_json(json.loads(data))

    def submit_batch(self, events: Iterable[Mapping[str, Any]]) -> Iterator[Union[Decision, CoalesceError]]:
        """Decide many events (POST /v1/events:batch): NDJSON streamed in,
        one answer per event yielded as it arrives, in order: a Decision,
        or a CoalesceError for that event. Each event without an
        ``idempotency_key`` gets one, so a batch cut off (or refused 429/503)
        is sent again, its answered lines excluded, without counting any
        event twice."""
        lines: List[bytes] = []
        for ev in events:
            doc = dict(ev)
            doc.setdefault("idempotency_key", str(uuid.uuid4()))
            lines.append(json.dumps(doc, separators=(",", ":")).encode() + b"\n")
        done = 0
        attempt = 0
        while done < len(lines):
            attempt += 1
            pending = lines[done:]
            try:
                resp, conn = self._open("POST", "/v1/events:batch", (l for l in pending),
                                        {"Content-Type": "application/x-ndjson"}, chunked=True)
            except (OSError, http.client.HTTPException) as e:
                self._wait(attempt, None, e)
                continue
            try:
                if resp.status != 200:
                    data = resp.read()
                    err = CoalesceError.from_body(resp.status, data, _retry_after(resp))
                    if resp.status in _RETRY_STATUSES:
                        self._wait(attempt, err.retry_after, err)
                        continue
                    raise err
                try:
                    for raw in resp:
                        raw = raw.strip()
                        if not raw:
                            continue
                        doc = json.loads(raw)
                        done += 1
                        if "error" in doc:
                            yield CoalesceError.from_body(200, doc)
                        else:
                            yield Decision.from_json(doc)
                except (OSError, http.client.HTTPException) as e:
                    self._wait(attempt, None, e)  # cut off: send the rest again
                    continue
                if done < len(lines):
                    raise CoalesceError(200, "short_batch", f"{len(lines) - done} lines of the batch were not answered")
            finally:
                conn.close()

    def explain(self, type: str, args: Any, key: Optional[str] = None) -> Dict[str, Any]:
        """What would happen to an event, changing nothing (POST /v1/explain)."""
        _, _, data = self._request("POST", "/v1/explain", json.dumps(_event(type, args, key, None)).encode(),
                                   {"Content-Type": "application/json"})
        return json.loads(data)

    def round(self, type: str, key: str) -> Optional[Dict[str, Any]]:
        """The pending round of a key (GET /v1/rounds/{type}/{key}); None
        when none is pending."""
        try:
            _, _, data = self._request("GET", f"/v1/rounds/{quote(type, safe='')}/{quote(key, safe='')}", None, {})
        except CoalesceError as e:
            if e.status == 404 and e.code == "not_found":
                return None
            raise
        return json.loads(data)

    def cancel(self, type: str, key: str, round: str) -> Dict[str, Any]:
        """Cancel round ``round`` of a key (DELETE /v1/rounds/{type}/{key}).
        Safe to retry: a repeat changes nothing and raises CoalesceError
        ``already_cancelled`` (409), and it never cancels the key's next
        round (CoalesceError ``other_round``)."""
        _, _, data = self._request("DELETE", f"/v1/rounds/{quote(type, safe='')}/{quote(key, safe='')}?round={quote(round, safe='')}", None, {})
        return json.loads(data)

    def policies(self) -> List[Dict[str, Any]]:
        """The daemon's policies (GET /v1/policies)."""
        _, _, data = self._request("GET", "/v1/policies", None, {})
        return json.loads(data)["policies"]

    # -- plumbing ------------------------------------------------------------

    def _open(self, method: str, path: str, body, headers: Dict[str, str], chunked: bool = False):
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self._timeout)
        h = dict(headers)
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        try:
            conn.request(method, self._base + path, body=body, headers=h, encode_chunked=chunked)
            return conn.getresponse(), conn
        except BaseException:
            conn.close()
            raise

    def _request(self, method: str, path: str, body: Optional[bytes], headers: Dict[str, str]):
        attempt = 0
        while True:
            attempt += 1
            try:
                resp, conn = self._open(method, path, body, headers)
                try:
                    data = resp.read()
                finally:
                    conn.close()
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out
                self._wait(attempt, None, e)
                continue
            if 200 <= resp.status < 300:
                return resp.status, resp.headers, data
            err = CoalesceError.from_body(resp.status, data, _retry_after(resp))
            if resp.status in _RETRY_STATUSES:
                self._wait(attempt, err.retry_after, err)
                continue
            raise err

    def _wait(self, attempt: int, retry_after: Optional[float], cause: BaseException) -> None:
        if attempt >= self._retry.attempts:
            if isinstance(cause, CoalesceError):
                raise cause
            raise CoalesceError(0, "unavailable", f"after {attempt} attempts: {cause}") from cause
        if retry_after is not None:
            delay = retry_after
        else:
            delay = self._retry.backoff * (2 ** (attempt - 1))
            delay += random.uniform(0, delay / 2)
        self._sleep(min(delay, self._retry.max_wait))


def _event(type: str, args: Any, key: Optional[str], traceparent: Optional[str]) -> Dict[str, Any]:
    ev: Dict[str, Any] = {"type": type, "args": args}
    if key is not None:
        ev["key"] = key
    if traceparent is not None:
        ev["traceparent"] = traceparent
    return ev


def _retry_after(resp) -> Optional[float]:
    v = resp.getheader("Retry-After")
    if v is None:
        return None
    try:
        return max(0.0, float(v))
    except ValueError:
        return None


__all__ = ["Client", "CoalesceError", "Decision", "RetryPolicy"]
