"""Revoking a key in the embedded S3 returns only once the server refuses that key with its real secret.

SeaweedFS applies a revocation a moment after `s3.configure ... -apply` returns; on this machine the moment is
too short for a real server to show (the end-to-end key rotation test passes either way).  So the server here
is a stand-in that goes on accepting the revoked key for a few probes, the way a slower filer would, and the
test checks what the wait probes with and how long it keeps probing.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from botocore.exceptions import ClientError

import mountctl.local_s3.identities as identities
import mountctl.s3.objects
from mountctl.errors import LocalS3Error

REFUSED = ClientError({"Error": {"Code": "InvalidAccessKeyId"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                      "ListBuckets")


class LaggingServer:
    """Accepts the revoked key with its real secret for ``lag`` probes, then refuses it; any other secret never."""

    def __init__(self, directory: str, lag: int) -> None:
        self.dir, self.lag, self.probes, self.commands = directory, lag, [], []

    def status(self) -> SimpleNamespace:
        return SimpleNamespace(endpoint_url="http://127.0.0.1:1")

    def settings(self) -> SimpleNamespace:
        return SimpleNamespace(region="us-east-1")

    def client(self, settings, *_bounds):
        server = self

        class Client:
            def list_buckets(self):
                server.probes.append(settings.secret_access_key)
                if settings.secret_access_key != "real-secret" or len(server.probes) > server.lag:
                    raise REFUSED
                return {"Buckets": []}

        return Client()


@pytest.fixture
def lagging(tmp_path, monkeypatch):
    def make(lag: int) -> LaggingServer:
        server = LaggingServer(str(tmp_path), lag)
        monkeypatch.setattr(identities, "_shell", lambda _server, line, _timeout: server.commands.append(line))
        monkeypatch.setattr(mountctl.s3.objects, "_new_client", server.client)
        monkeypatch.setattr(identities.time, "sleep", lambda _s: None)
        return server
    return make


def test_the_wait_probes_with_the_real_secret_until_the_key_is_refused(lagging):
    server = lagging(lag=3)
    identities.revoke_identity(server, "user1", "AKREVOKE1", secret_key="real-secret", timeout_s=30)
    assert server.commands == ["s3.configure -access_key=AKREVOKE1 -user=user1 -delete -apply"]
    assert server.probes == ["real-secret"] * 4  # three still accepted, the fourth refused


def test_a_key_still_accepted_at_the_deadline_is_an_error_naming_it(lagging, monkeypatch):
    server = lagging(lag=10**9)
    clock = iter(range(0, 10**6, 10))
    monkeypatch.setattr(identities.time, "monotonic", lambda: next(clock))
    with pytest.raises(LocalS3Error, match="still accepts key AKREVOKE2 30s after it was revoked"):
        identities.revoke_identity(server, "user1", "AKREVOKE2", secret_key="real-secret", timeout_s=30)
