"""Another local user and the embedded S3 server: weed's own ports refuse them, S3 with the keys serves them.

The other user is real: a throwaway account made with ``useradd`` for the test (so the
test needs root) and removed afterwards; its requests are ``runuser -u USER -- curl ...``
and ``runuser -u USER -- weed shell ...``, against the session's real server.  Every HTTP
port of the server is tried for a read, a write and a delete: master, volume, filer, S3
without the keys, admin; gRPC through ``weed shell`` and weed's unix sockets.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import pwd
import re
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

from mountctl.local_s3.ports import GRPC_OFFSET
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


def _curl_as(user: str, url: str, config: str = "", *args: str) -> tuple[int, bytes]:
    """curl as ``user`` (``args`` before the URL); ``config`` (curl's config syntax) travels on its stdin, never on
    a command line.  The status is 0 when no HTTP answer came back."""
    done = subprocess.run(["runuser", "-u", user, "--", "curl", "-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}",
                           *(["-K", "-"] if config else []), *args, url], input=config.encode(), capture_output=True,
                          timeout=30)
    body, _, code = done.stdout.rpartition(b"\n")
    return int(code or 0), body


def _url(server, component: str, path: str) -> str:
    return f"http://127.0.0.1:{_ports(server)[component]}{path}"


def _refused(code: int) -> bool:
    """An HTTP answer that is an error: no success, no redirect (and no curl that never reached the port)."""
    return 400 <= code < 600


def _owner_reads(server, bucket: str, key: str) -> bytes:
    return s3_client(server.settings(direct=True)).get_object(Bucket=bucket, Key=key)["Body"].read()


def _chunk_file_ids(server, bucket: str, key: str) -> list[str]:
    """The volume file ids holding an object, from the filer's entry (our own ``weed shell``, with the TLS files)."""
    ports = _ports(server)
    done = subprocess.run([server.weed(), "shell", f"-master=127.0.0.1:{ports['master']}",
                           f"-filer=127.0.0.1:{ports['filer']}"], input=f"fs.meta.cat /buckets/{bucket}/{key}\nexit\n",
                          capture_output=True, text=True, cwd=server.dir, timeout=60)
    file_ids = re.findall(r'"fileId":\s*"([0-9]+,[0-9a-f]+)"', done.stdout)
    assert file_ids, f"no chunk in the filer's entry of {key}: {done.stdout[-500:]} {done.stderr[-500:]}"
    return file_ids


@pytest.fixture
def secret_object(local_s3, bucket) -> tuple[str, bytes]:
    """An object big enough to be stored in a volume chunk, not inline in the filer's entry."""
    key = f"private/{uuid.uuid4().hex}.txt"
    content = b"only for holders of the keys " + secrets.token_hex(64 * 1024).encode()
    s3_client(local_s3.settings(direct=True)).put_object(Bucket=bucket, Key=key, Body=content)
    return key, content


def test_another_user_cannot_delete_a_bucket_through_the_master_port(local_s3, bucket, secret_object, other_user):
    """The reproduction of issue 36: ``/col/delete`` from another user erased the bucket's volumes."""
    key, content = secret_object
    for method in ("GET", "POST"):
        code, body = _curl_as(other_user, _url(local_s3, "master", f"/col/delete?collection={bucket}"), "", "-X", method)
        assert _refused(code), f"the master answered {code} to another user's /col/delete ({method}): {body[:200]!r}"
    assert _owner_reads(local_s3, bucket, key) == content


def test_another_user_gets_no_file_id_from_the_master_port(local_s3, bucket, other_user):
    """A file id from ``/dir/assign`` (or a whole upload through ``/submit``) is a write into the server's volumes."""
    for args, path in (((), "/dir/assign"), (("-X", "POST"), f"/dir/assign?collection={bucket}&count=1"),
                       (("-F", "file=@/etc/passwd"), f"/submit?collection={bucket}")):
        code, body = _curl_as(other_user, _url(local_s3, "master", path), "", *args)
        assert _refused(code) and b'"fid"' not in body, f"the master gave another user a file id at {path}: {body!r}"


def test_another_user_cannot_grow_or_vacuum_volumes_through_the_master_port(local_s3, bucket, other_user):
    for path in (f"/vol/grow?collection={bucket}&count=1", "/vol/vacuum?garbageThreshold=0.0001"):
        code, body = _curl_as(other_user, _url(local_s3, "master", path))
        assert _refused(code), f"the master answered {code} to another user's {path}: {body[:200]!r}"


def test_another_user_cannot_look_up_volumes_through_the_master_port(local_s3, bucket, secret_object, other_user):
    key, _ = secret_object
    file_id = _chunk_file_ids(local_s3, bucket, key)[0]
    for path in (f"/dir/lookup?volumeId={file_id.split(',')[0]}", f"/{file_id}", "/dir/status", "/vol/status"):
        code, body = _curl_as(other_user, _url(local_s3, "master", path))
        assert _refused(code), f"the master answered {code} to another user's {path}: {body[:200]!r}"


def test_master_status_page_shows_another_user_no_object_names_or_bytes(local_s3, bucket, secret_object, other_user):
    """The one page weed's master serves to anyone (no setting of weed closes it): topology and volume counts."""
    key, content = secret_object
    _, body = _curl_as(other_user, _url(local_s3, "master", "/"))
    assert key.rsplit("/", 1)[-1].encode() not in body and content[-64:] not in body


def test_another_user_cannot_read_write_or_delete_a_chunk_through_the_volume_port(local_s3, bucket, secret_object,
                                                                                   other_user):
    """The chunk's real file id, as a user would learn it from a leak: no JWT signed by the server's key, no access."""
    key, content = secret_object
    for file_id in _chunk_file_ids(local_s3, bucket, key):
        url = _url(local_s3, "volume", f"/{file_id}")
        code, body = _curl_as(other_user, url)
        assert _refused(code) and not (body and body in content), f"the volume served {file_id} to another user"
        for args in (("-F", "file=@/etc/passwd"), ("-X", "DELETE")):
            code, body = _curl_as(other_user, url, "", *args)
            assert _refused(code), f"the volume answered {code} to another user's {args[0]} of {file_id}: {body!r}"
    assert _owner_reads(local_s3, bucket, key) == content


def test_another_user_cannot_read_an_object_through_the_filer_port(local_s3, bucket, secret_object, other_user):
    key, content = secret_object
    code, body = _curl_as(other_user, _url(local_s3, "filer", f"/buckets/{bucket}/{key}"))
    assert content not in body
    assert _refused(code), f"the filer answered {code} to another user"
    code, body = _curl_as(other_user, _url(local_s3, "filer", f"/buckets/{bucket}/private/"))
    assert _refused(code) and key.encode() not in body, "the filer listed the bucket for another user"


def test_another_user_cannot_write_or_delete_through_the_filer_port(local_s3, bucket, secret_object, other_user):
    key, content = secret_object
    planted = f"private/planted-{uuid.uuid4().hex}.txt"
    for args, path in ((("-F", "file=@/etc/passwd"), f"/buckets/{bucket}/{planted}"),
                       (("-X", "DELETE"), f"/buckets/{bucket}/{key}"),
                       (("-X", "DELETE"), f"/buckets/{bucket}/?recursive=true")):
        code, body = _curl_as(other_user, _url(local_s3, "filer", path), "", *args)
        assert _refused(code), f"the filer answered {code} to another user's {args[0]} of {path}: {body[:200]!r}"
    listed = s3_client(local_s3.settings(direct=True)).list_objects_v2(Bucket=bucket).get("Contents", [])
    assert planted not in {item["Key"] for item in listed}
    assert _owner_reads(local_s3, bucket, key) == content


def test_s3_without_the_keys_refuses_another_user_listing_writing_and_deleting(local_s3, bucket, secret_object,
                                                                               other_user):
    key, content = secret_object
    endpoint = local_s3.settings(direct=True).endpoint_url
    planted = f"private/planted-{uuid.uuid4().hex}.txt"
    for args, path in (((), "/"), ((), f"/{bucket}?list-type=2"),
                       (("-X", "PUT", "--data-binary", "planted by another user"), f"/{bucket}/{planted}"),
                       (("-X", "DELETE"), f"/{bucket}/{key}"), (("-X", "DELETE"), f"/{bucket}")):
        code, body = _curl_as(other_user, f"{endpoint}{path}", "", *args)
        assert code == 403, f"S3 answered {code} to another user's {args} {path}"
        assert key in path or key.encode() not in body, f"S3 named the key to another user at {path}"
    listed = s3_client(local_s3.settings(direct=True)).list_objects_v2(Bucket=bucket).get("Contents", [])
    assert planted not in {item["Key"] for item in listed}
    assert _owner_reads(local_s3, bucket, key) == content


def test_another_user_gets_no_admin_interface(local_s3, bucket, other_user):
    for args, path in (((), "/"), ((), "/api/s3/users"), ((), "/object-store/users"), ((), "/api/cluster/topology"),
                       (("-X", "POST", "--data-binary", '{"name": "planted"}'), "/api/s3/buckets"),
                       (("-X", "DELETE"), f"/api/s3/buckets/{bucket}")):
        code, _ = _curl_as(other_user, _url(local_s3, "admin", path), "", *args)
        assert _refused(code), f"the admin port answered {code} for {args} {path}"
    assert s3_client(local_s3.settings(direct=True)).head_bucket(Bucket=bucket)


@pytest.fixture(params=["state-dir", "deep-state-dir"])
def socket_server(request, local_s3, tmp_path):
    """The session's server (its sockets in its state dir), and one whose state dir is too deep for a unix socket's
    path: its filer and S3 sockets move to a private directory of this user's in the temp dir.  The session's never
    moves (its home is short), so without the second the moved sockets would never be checked at all."""
    if request.param == "state-dir":
        yield local_s3
        return
    from mountctl.local_s3.server import LocalS3

    server = LocalS3(str(tmp_path / ("d" * 60) / ("e" * 60) / "local-s3"))
    server.start(buckets=("deep",))
    try:
        yield server
    finally:
        server.stop()


def test_weeds_unix_sockets_are_closed_to_another_user(socket_server, other_user):
    """weed also serves gRPC on unix sockets in /tmp, and filer and S3 on ours: none may let another user connect."""
    ports = _ports(socket_server).values()
    # filer and S3 bind ours, in the state dir or (a state dir too deep for a socket path) a private dir in /tmp:
    # wherever they are, both must exist and be checked, never dropped from the list.
    ours = socket_server.sockets()
    given = [arg.split("=", 1)[1] for arg in psutil.Process(socket_server.status().pid).cmdline()
             if arg.startswith(("-filer.localSocket=", "-s3.localSocket="))]
    assert sorted(ours) == sorted(given), f"weed was told {given}, the server says {ours}"
    missing_ours = [path for path in ours if not os.path.exists(path)]
    assert not missing_ours, f"weed's own sockets are not where the server put them: {missing_ours}"
    if not ours[0].startswith(socket_server.dir + os.sep):  # moved: into a private directory of this user's
        for folder in {os.path.dirname(path) for path in ours}:
            info = os.lstat(folder)
            assert os.path.basename(folder).startswith(f"mountctl-{os.getuid()}-"), folder
            assert info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700, (folder, oct(info.st_mode))
    grpc = [path for port in ports for path in glob.glob(f"/tmp/seaweedfs-*-grpc-{port + GRPC_OFFSET}.sock")]
    assert grpc, "weed made no gRPC socket in /tmp"
    sockets = ours + grpc
    connect = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n" \
              "except OSError as e:\n    print(e.errno)\nelse:\n    print('connected')\n"
    for path in sockets:
        assert os.stat(path).st_mode & 0o077 == 0, f"{path} is open to other users: {oct(os.stat(path).st_mode)}"
        done = subprocess.run(["runuser", "-u", other_user, "--", "/usr/bin/python3", "-c", connect, path],
                              capture_output=True, text=True, timeout=30)
        assert done.stdout.strip() == str(errno.EACCES), f"another user's connect to {path}: {done.stdout}{done.stderr}"


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
