"""Client for coalesce serve's HTTP API v1, and a helper for push workers.

Standard library only (Python 3.9+). Every submit carries an Idempotency-Key
(a fresh UUID unless you give one), so the client retries safely: a retry of
an event the daemon already decided gets that decision back (``replayed``)
and is not counted again. 429 and 503 answers are retried after their
Retry-After; connection errors and time-outs after a backoff.

    from coalesce_client import Client
    c = Client("http://127.0.0.1:8080", token=None)
    d = c.submit("recompute_financials", {"tenant_id": 42, "order_id": 1001})
    d.outcome, d.round, d.events
"""
from .client import Client, CoalesceError, Decision, RetryPolicy
from .push import Job, PushAuthError, Reject, Retry, Summary, parse_job, push_server, verify_push

__all__ = [
    "Client",
    "CoalesceError",
    "Decision",
    "RetryPolicy",
    "Job",
    "Summary",
    "PushAuthError",
    "Reject",
    "Retry",
    "parse_job",
    "push_server",
    "verify_push",
]
