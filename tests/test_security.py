"""Another local user and the embedded S3 server: weed's own ports refuse them, S3 with the keys serves them.

The other user is real: a throwaway account made with ``useradd`` for the test (so the
test needs root) and removed afterwards; its requests are ``runuser -u USER -- curl ...``
and ``runuser -u USER -- weed shell ...``, against the session's real server.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest
from botocore.exceptions import ClientError

from mountctl.s3 import S3Settings
from mountctl.s3 import client as s3_client

from conftest import missing


@pytest.fixture
def other_user() -> Iterator[str]:
    if os.geteuid() != 0:
        missing("making a throwaway local user needs root")
    if not (shutil.which("useradd") and shutil.which("runuser") and shutil.which("curl")):
        missing("useradd, runuser and curl are needed to act as another local user")
    name = f"mctl{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True, timeout=30)
    uid = pwd.getpwnam(name).pw_uid
    try:
        yield name
    finally:
        # Nothing of the throwaway user may outlive the test (userdel refuses while it has processes).
        left = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid]
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(left, timeout=10)
        removed = subprocess.run(["userdel", name], capture_output=True, text=True, timeout=30)
        assert removed.returncode == 0, f"the throwaway user {name} was not removed: {removed.stderr}"


def _ports(server) -> dict[str, int]:
    with open(os.path.join(server.dir, "server.json")) as f:
        return json.load(f)["ports"]


def _curl_as(user: str, url: str, config: str = "") -> tuple[int, bytes]:
    """curl as ``user``; ``config`` (curl's config syntax) travels on its stdin, never on a command line."""
    done = subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}",
                           *(["-K", "-"] if config else []), url], input=config.encode(), capture_output=True,
                          timeout=30)
    body, _, code = done.stdout.rpartition(b"\n")
    return int(code or 0), body


@pytest.fixture
def secret_object(local_s3, bucket) -> tuple[str, bytes]:
    key = f"private/{uuid.uuid4().hex}.txt"
    content = b"only for holders of the keys " + secrets.token_hex(8).encode()
    s3_client(local_s3.settings(direct=True)).put_object(Bucket=bucket, Key=key, Body=content)
    return key, content


def test_another_user_cannot_read_an_object_through_the_filer_port(local_s3, bucket, secret_object, other_user):
    key, content = secret_object
    code, body = _curl_as(other_user, f"http://127.0.0.1:{_ports(local_s3)['filer']}/buckets/{bucket}/{key}")
    assert content not in body
    assert code in (401, 403), f"the filer answered {code} to another user"
    code, body = _curl_as(other_user, f"http://127.0.0.1:{_ports(local_s3)['filer']}/buckets/{bucket}/private/")
    assert code in (401, 403) and key.encode() not in body, "the filer listed the bucket for another user"


def test_another_user_gets_no_admin_interface(local_s3, other_user):
    for path in ("/", "/api/s3/users", "/object-store/users"):
        code, _ = _curl_as(other_user, f"http://127.0.0.1:{_ports(local_s3)['admin']}{path}")
        assert code in (0, 401, 403, 404), f"the admin port answered {code} for {path}"


def test_another_user_cannot_make_a_key_through_weed_shell(local_s3, other_user):
    """Over gRPC, without the server's client certificate: no key is made."""
    access_key = "INTRUDER" + secrets.token_hex(6).upper()
    line = f"s3.configure -access_key={access_key} -secret_key=intruder-secret-1 -user=intruder -actions=Admin -apply\n"
    shell = subprocess.Popen(["runuser", "-u", other_user, "--", local_s3.weed(), "shell",
                              f"-master=127.0.0.1:{_ports(local_s3)['master']}"], stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", start_new_session=True)
    try:
        # It cannot connect and retries: a bounded wait is the refusal.
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.communicate((line + "exit\n").encode(), timeout=8)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGKILL)  # runuser and the weed shell under it
        shell.wait(timeout=10)
    settings = local_s3.settings(direct=True)
    intruder = S3Settings(endpoint_url=settings.endpoint_url, region=settings.region, access_key_id=access_key,
                          secret_access_key="intruder-secret-1")
    with pytest.raises(ClientError):
        s3_client(intruder, retries=1).list_buckets()


def test_another_user_reads_through_s3_with_the_keys(local_s3, bucket, secret_object, other_user):
    key, content = secret_object
    settings = local_s3.settings(direct=True)
    config = (f'user = "{settings.access_key_id}:{settings.secret_access_key}"\n'
              f'aws-sigv4 = "aws:amz:{settings.region}:s3"\n')
    code, body = _curl_as(other_user, f"{settings.endpoint_url}/{bucket}/{key}", config)
    assert (code, body) == (200, content)
    code, body = _curl_as(other_user, f"{settings.endpoint_url}/{bucket}/{key}")
    assert code == 403 and content not in body, "S3 without the keys must refuse"


def test_security_config_is_private(local_s3):
    path = os.path.join(local_s3.dir, "security.toml")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(local_s3.dir).st_mode & 0o077 == 0
    with open(path) as f:
        text = f.read()
    assert "[jwt.filer_signing.read]" in text and "[jwt.signing.read]" in text and "[grpc.client]" in text


def test_revoked_key_is_refused_as_soon_as_revoke_returns(local_s3):
    settings = local_s3.settings(direct=True)
    user = f"rev-{uuid.uuid4().hex[:8]}"
    access_key, secret = "REV" + secrets.token_hex(8).upper(), secrets.token_hex(16)
    local_s3.add_identity(user, access_key, secret)
    revoked = S3Settings(endpoint_url=settings.endpoint_url, region=settings.region, access_key_id=access_key,
                         secret_access_key=secret)
    client = s3_client(revoked, retries=1)
    client.list_buckets()  # live before the revocation
    local_s3.revoke_identity(user, access_key)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:  # refused at once, and from then on
        with pytest.raises(ClientError) as refused:
            s3_client(revoked, retries=1, connect_timeout=2, read_timeout=5).list_objects_v2(Bucket="mountctl")
        assert refused.value.response["Error"]["Code"] in ("InvalidAccessKeyId", "AccessDenied")
        time.sleep(0.05)
