"""Throttled requests wait with full jitter until the outage bound; other failures keep the client's own policy."""

from __future__ import annotations

import time

import pytest

from mountctl import backoff

pytestmark = pytest.mark.unit


class _Http:
    def __init__(self, status: int) -> None:
        self.status_code = status


class _Events:
    def __init__(self) -> None:
        self.handlers: list = []

    def register_first(self, event: str, handler, unique_id: str) -> None:
        self.handlers.append((event, handler))


class _Client:
    """Stands in for a boto3 client's event hooks: a store that throttles on demand is tested in test_throttling."""

    def __init__(self) -> None:
        self.meta = type("Meta", (), {"events": _Events()})()


def _handler():
    client = backoff.install_throttle_backoff(_Client(), "http://store")
    [(event, handler)] = client.meta.events.handlers
    assert event == "needs-retry.s3"
    return handler


def test_slowdown_and_bare_503_count_as_throttling_and_others_do_not():
    assert backoff.is_throttled("SlowDown", 503) and backoff.is_throttled("", 503)
    assert backoff.is_throttled("ThrottlingException", 400)
    assert not backoff.is_throttled("AccessDenied", 403) and not backoff.is_throttled("InternalError", 500)


def test_the_wait_grows_with_the_attempt_and_is_capped():
    assert backoff.throttle_delay(1, rand=lambda: 1.0) < backoff.throttle_delay(4, rand=lambda: 1.0)
    assert backoff.throttle_delay(40, rand=lambda: 1.0) == backoff._CAP_S
    assert backoff.throttle_delay(3, rand=lambda: 0.0) == 0.0


def test_a_throttled_answer_is_retried_until_the_outage_bound(monkeypatch):
    monkeypatch.setenv(backoff.OUTAGE_BOUND_ENV, "30")
    handler = _handler()
    request: dict = {}
    slow = (_Http(503), {"Error": {"Code": "SlowDown"}})
    assert handler(response=slow, attempts=1, request_dict=request) is not None
    request["context"]["mountctl_throttled_since"] = time.monotonic() - 31
    assert handler(response=slow, attempts=9, request_dict=request) is None


def test_other_answers_are_left_to_the_clients_own_policy():
    handler = _handler()
    assert handler(response=(_Http(403), {"Error": {"Code": "AccessDenied"}}), attempts=1, request_dict={}) is None
    assert handler(response=None, attempts=1, request_dict={}) is None


def test_the_far_proxy_answers_slowdown_only_when_asked():
    from mountctl.local_s3.far_proxy import FarProfile, render_config

    def config(**profile) -> str:
        return render_config(FarProfile(**profile), upstream="127.0.0.1:1", port=2, workdir="/w", modules_dir="/m")

    assert "SlowDown" not in config() and "ngx.sleep(0.020000)" in config()
    throttling = config(latency_ms=0, slowdown_pct=30)
    assert "<Code>SlowDown</Code>" in throttling and "< 30.000000" in throttling and "ngx.sleep" not in throttling
    assert "ngx_http_lua_module.so" in throttling
    with pytest.raises(Exception, match="slowdown_pct"):
        FarProfile(slowdown_pct=101)
