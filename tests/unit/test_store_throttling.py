"""`store_throttling`, asked when a mount misses its timeout: does the store answer 503 SlowDown now?

A real store throttles a share of requests at random, so whether a given request is refused cannot be
arranged on demand; the store here is a stand-in client whose n-th LIST is answered SlowDown.
"""

from __future__ import annotations

import itertools

import pytest
from botocore.exceptions import ClientError

import mountctl.s3.objects
from mountctl.s3 import S3Settings
from mountctl.s3.objects import store_throttling

SLOW_DOWN = ClientError({"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}},
                        "ListObjectsV2")


class StandIn:
    def __init__(self, refuse_at: int | None) -> None:
        self.refuse_at, self.calls = refuse_at, 0

    def list_objects_v2(self, **_kwargs):
        self.calls += 1
        if self.calls == self.refuse_at:
            raise SLOW_DOWN
        return {"KeyCount": 1}


@pytest.fixture
def store(monkeypatch):
    def make(refuse_at: int | None) -> StandIn:
        stand_in = StandIn(refuse_at)
        monkeypatch.setattr(mountctl.s3.objects, "_new_client", lambda *_args: stand_in)
        mountctl.s3.objects._clients.clear()
        return stand_in
    yield make
    mountctl.s3.objects._clients.clear()


SETTINGS = S3Settings(endpoint_url="http://127.0.0.1:1", region="us-east-1", access_key_id="AK",
                      secret_access_key="SK")


def test_a_store_that_refuses_one_list_in_ten_is_seen_throttling(store):
    """At 30 % SlowDown, 6 LISTs all went through one time in 8; the check now asks up to 20."""
    stand_in = store(refuse_at=10)
    assert store_throttling(SETTINGS, "bucket", "prefix/")
    assert stand_in.calls == 10


def test_a_store_that_answers_every_list_is_not_throttling(store):
    stand_in = store(refuse_at=None)
    assert not store_throttling(SETTINGS, "bucket", "prefix/")
    assert stand_in.calls == 20


def test_the_check_stops_at_its_time_bound(store, monkeypatch):
    """A slow store: the LISTs stop once ``within_s`` has passed, whatever is left of the 20."""
    stand_in = store(refuse_at=None)
    clock = itertools.count(0, 4)  # each look at the clock 4 s later
    monkeypatch.setattr(mountctl.s3.objects.time, "monotonic", lambda: next(clock))
    assert not store_throttling(SETTINGS, "bucket", "prefix/", within_s=10.0)
    assert stand_in.calls == 2  # at 4 s and 8 s; at 12 s the bound has passed
