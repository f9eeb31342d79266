"""The stores a benchmark reads through: the endpoint itself (local), a far-store proxy before it (far), or a real one.

Loopback SeaweedFS answers in microseconds at GB/s; S3 takes tens of ms to the
first byte and gives 50-100 MB/s per connection.  ``far`` puts a ``FarProxy``
(``mountctl/far_proxy.py``) in front of the same endpoint, so the same bucket
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

from mountctl import FarProfile, FarProxy, InvalidSpec, S3Settings

__all__ = ["STORES", "STORE_CHOICES", "stores_for", "is_loopback_endpoint", "far_profile", "store_settings"]

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


def stores_for(choice: str, settings: S3Settings) -> tuple[str, ...]:
    """The stores one run measures for ``--store CHOICE``: ``("remote",)`` whatever the choice on a real store."""
    if choice not in STORE_CHOICES:
        raise InvalidSpec(f"--store must be one of {', '.join(STORE_CHOICES)}, not {choice!r}")
    if not is_loopback_endpoint(settings):
        return (REMOTE,)
    return STORES if choice == "both" else (choice,)


def far_profile(latency_ms: float | None = None, rate_mb_s: float | None = None) -> FarProfile:
    """The far store's profile: the proxy's defaults, with the caller's latency and rate where given."""
    chosen = {k: v for k, v in (("latency_ms", latency_ms), ("rate_mb_s", rate_mb_s)) if v is not None}
    return FarProfile(**chosen)


@contextlib.contextmanager
def store_settings(store: str, settings: S3Settings, workdir: str, profile: FarProfile | None = None
                   ) -> Iterator[S3Settings]:
    """The settings that read through ``store``: for ``far`` a proxy runs for the block and is stopped after it."""
    if store != "far":
        yield settings
        return
    assert settings.endpoint_url is not None  # stores_for gives "far" only for a loopback endpoint
    proxy = FarProxy(settings.endpoint_url, workdir, profile if profile is not None else far_profile())
    endpoint = proxy.start()
    try:
        yield dataclasses.replace(settings, endpoint_url=endpoint)
    finally:
        proxy.stop()
