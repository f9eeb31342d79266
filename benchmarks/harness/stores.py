"""The stores a benchmark reads through: the endpoint itself (local), a far-store proxy before it (far), or a real one.

Loopback SeaweedFS answers in microseconds at GB/s; S3 takes tens of ms to the
first byte and gives 50-100 MB/s per connection.  ``far`` puts a ``FarProxy``
(``mountctl/local_s3/far_proxy.py``) in front of the same endpoint, so the same bucket
and bytes are read as a user on S3 would read them.  An endpoint that is not on
this machine (AWS, or any non-loopback address) is far by nature: it is
recorded as ``remote`` and no proxy is started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass

from mountctl import FarProfile, FarProxy, InvalidSpec, LocalS3, S3Settings

__all__ = ["STORES", "STORE_CHOICES", "REMOTE", "check_store_choice", "stores_for", "is_loopback_endpoint", "far_profile", "StorePlan",
           "plan_stores"]

STORES = ("local", "far")
STORE_CHOICES = ("local", "far", "both")
REMOTE = "remote"


def is_loopback_endpoint(settings: S3Settings) -> bool:
    """True when the endpoint is on this machine (127.0.0.0/8, ::1, localhost): only such a store can be "local"."""
    if not settings.endpoint_url:
        return False  # AWS S3 itself
    host = urllib.parse.urlsplit(settings.endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: some other machine's store


def check_store_choice(choice: str) -> None:
    """Where a config is built (every suite's), not when the run reaches its stores, after servers have started."""
    if choice not in STORE_CHOICES:
        raise InvalidSpec(f"--store must be one of {', '.join(STORE_CHOICES)}, not {choice!r}")


def stores_for(choice: str, settings: S3Settings) -> tuple[str, ...]:
    """The stores one run measures for ``--store CHOICE``: ``("remote",)`` whatever the choice on a real store."""
    check_store_choice(choice)
    if not is_loopback_endpoint(settings):
        return (REMOTE,)
    return STORES if choice == "both" else (choice,)


def far_profile(latency_ms: float | None = None, rate_mb_s: float | None = None) -> FarProfile:
    """The far store's profile: the proxy's defaults, with the caller's latency and rate where given."""
    chosen = {k: v for k, v in (("latency_ms", latency_ms), ("rate_mb_s", rate_mb_s)) if v is not None}
    return FarProfile(**chosen)


@dataclass(frozen=True)
class StorePlan:
    """The stores of one run and how to reach each: ``origin`` is the endpoint itself (datasets are made there)."""

    stores: tuple[str, ...]
    origin: S3Settings
    profile: FarProfile
    running_far: str | None = None  # the endpoint of a far proxy that already runs with ``profile``

    @contextlib.contextmanager
    def settings(self, store: str, workdir: str) -> Iterator[S3Settings]:
        """Settings that read through ``store``; for ``far`` a proxy of ours runs for the block, stopped after it."""
        if store != "far":
            yield self.origin
            return
        if self.running_far:
            yield dataclasses.replace(self.origin, endpoint_url=self.running_far)
            return
        assert self.origin.endpoint_url is not None  # "far" is planned only for a loopback endpoint
        proxy = FarProxy(self.origin.endpoint_url, workdir, self.profile)
        endpoint = proxy.start()
        try:
            yield dataclasses.replace(self.origin, endpoint_url=endpoint)
        finally:
            proxy.stop()


def plan_stores(choice: str, settings: S3Settings, latency_ms: float | None = None,
                rate_mb_s: float | None = None) -> StorePlan:
    """The stores for ``--store CHOICE`` against ``settings``.

    Settings that already point at the embedded server's far proxy (``mountctl local-s3
    start --profile far``, ``MOUNTCTL_STORE=far benchmarks/bench.sh``) are not taken for the
    local store: the server behind it is, and that proxy is the far store, unless the
    caller asked for another latency or rate.
    """
    stores, profile = stores_for(choice, settings), far_profile(latency_ms, rate_mb_s)
    if stores == (REMOTE,):
        return StorePlan(stores, settings, profile)
    status = LocalS3().status()
    if not (status.running and status.far and status.server_endpoint_url
            and status.endpoint_url == settings.endpoint_url):
        return StorePlan(stores, settings, profile)
    origin = dataclasses.replace(settings, endpoint_url=status.server_endpoint_url)
    if latency_ms is None and rate_mb_s is None or profile == status.far:
        return StorePlan(stores, origin, status.far, running_far=settings.endpoint_url)
    return StorePlan(stores, origin, profile)
