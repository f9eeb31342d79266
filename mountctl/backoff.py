"""How long the store may be away, and how every boto3 request waits while it throttles.

S3 answers ``503 SlowDown`` when a prefix is over its request rate, which is what many nodes
starting one job at once produce.  That is never a reason to fail: a throttled request is
retried with exponential backoff and full jitter (S3's guidance) until the outage bound runs
out, however few retries the client allows for other errors.  Clients built for quick
answers (``short_client``, the bucket check with one retry) keep failing fast on a store
that is down, and still wait out a store that is only busy.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from typing import Any

__all__ = ["OUTAGE_BOUND_ENV", "DEFAULT_OUTAGE_BOUND_S", "outage_bound_s", "THROTTLE_CODES", "is_throttled",
           "throttle_delay", "install_throttle_backoff"]

log = logging.getLogger("mountctl")

OUTAGE_BOUND_ENV = "MOUNTCTL_OUTAGE_BOUND_S"
DEFAULT_OUTAGE_BOUND_S = 120.0

# The codes S3 and S3-compatible stores use for "slow down"; a bare 503 counts too.
THROTTLE_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                            "TooManyRequests", "RequestThrottled", "ServiceUnavailable", "503"})
_BASE_S = 0.05
_CAP_S = 5.0
_NOTICE_EVERY_S = 60.0
_noticed = [-_NOTICE_EVERY_S]
_notice_lock = threading.Lock()


def outage_bound_s() -> float:
    """How long reads wait for an unreachable store before failing: $MOUNTCTL_OUTAGE_BOUND_S, else 120 s."""
    value = os.environ.get(OUTAGE_BOUND_ENV, "")
    try:
        bound = float(value) if value else DEFAULT_OUTAGE_BOUND_S
    except ValueError:
        raise ValueError(f"{OUTAGE_BOUND_ENV}={value!r} is not a number of seconds; set it to e.g. 300") from None
    if bound <= 0:
        raise ValueError(f"{OUTAGE_BOUND_ENV}={value!r} must be a positive number of seconds")
    return bound


def is_throttled(code: str, status: int | None) -> bool:
    return code in THROTTLE_CODES or status == 503


def throttle_delay(attempt: int, rand: Any = random.random) -> float:
    """Full jitter: a random wait up to ``base * 2**attempt``, capped (attempt counts from 1)."""
    return rand() * min(_CAP_S, _BASE_S * 2 ** min(attempt, 16))


def _notice(where: str, code: str, bound: float) -> None:
    with _notice_lock:
        now = time.monotonic()
        if now - _noticed[0] < _NOTICE_EVERY_S:
            return
        _noticed[0] = now
    log.warning("S3 at %s is throttling (%s): backing off and retrying for up to %.0f s (the outage bound, "
                "$%s); many nodes starting at once cause this", where, code, bound, OUTAGE_BOUND_ENV)


def _throttled_answer(response: Any) -> tuple[str, int | None] | None:
    if not response:
        return None
    http, parsed = response
    status = getattr(http, "status_code", None)
    code = str((parsed or {}).get("Error", {}).get("Code", "")) if isinstance(parsed, dict) else ""
    return (code or str(status), status) if is_throttled(code, status) else None


def install_throttle_backoff(client: Any, where: str) -> Any:
    """Make ``client`` retry throttled requests until the outage bound, before its own retry policy is asked."""

    def needs_retry(response: Any = None, attempts: int = 1, request_dict: Any = None, **_: Any) -> float | None:
        answer = _throttled_answer(response)
        if answer is None:
            return None  # anything else: the client's own policy decides
        context = request_dict.setdefault("context", {}) if isinstance(request_dict, dict) else {}
        since = context.setdefault("mountctl_throttled_since", time.monotonic())
        bound = outage_bound_s()
        if time.monotonic() - since >= bound:
            return None
        _notice(where, answer[0], bound)
        return throttle_delay(attempts)

    client.meta.events.register_first("needs-retry.s3", needs_retry, unique_id="mountctl-throttle-backoff")
    return client
