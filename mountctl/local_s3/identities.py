"""Live identities of the embedded S3 server: keys added and revoked while it runs (``weed shell``).

The server's own key comes from its ``-s3.config`` file and is static: SeaweedFS
neither reloads that file nor lets ``s3.configure`` change it.  Identities made
through ``weed shell``'s ``s3.configure ... -apply`` live in the filer instead and
take effect within about a second, which is what a test of key rotation needs:
add a second key, switch a credentials file to it, revoke the first.

Secrets travel on the shell's stdin, never on its command line, and its output
(which echoes them) is never logged; an error carries only a redacted tail.  The
secrets of the keys added here are kept in ``live-identities.json`` (0600) in the
server's private dir, so a revocation (by any process) can wait until the real key,
not just any wrong signature, is refused.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from typing import Any, Protocol

from ..errors import LocalS3Error
from ..paths import write_private_json
from ..redaction import redact, remember_secret

__all__ = ["add_identity", "revoke_identity", "DEFAULT_ACTIONS"]

DEFAULT_ACTIONS = ("Read", "Write", "List", "Tagging", "Admin")
# weed's flags are parsed from the shell line: a value with a space or a quote would split it.
_TOKEN = re.compile(r"^[A-Za-z0-9_+/=.\-]{3,128}$")
_LIVE = "live-identities.json"


class LocalS3(Protocol):
    """What this module needs of ``local_s3.LocalS3`` (named here, not imported: that module imports this one)."""

    dir: str

    @property
    def log_path(self) -> str: ...

    def weed(self) -> str: ...

    def status(self) -> Any: ...

    def settings(self) -> Any: ...


def _check(kind: str, value: str) -> None:
    if not _TOKEN.match(value):
        raise LocalS3Error(f"the {kind} for a local S3 identity must be 3-128 letters, digits or _+/=.-")


def _shell(server: LocalS3, line: str, timeout_s: float) -> None:
    """Run one ``weed shell`` command against the server's master, bounded by ``timeout_s``."""
    status = server.status()
    try:
        with open(os.path.join(server.dir, "server.json")) as f:
            ports = json.load(f).get("ports", {})
    except (OSError, ValueError):
        ports = {}
    if not status.running or "master" not in ports or "filer" not in ports:
        raise LocalS3Error(f"the local S3 server of {server.dir} is not running; start it with "
                           "`mountctl local-s3 start` before changing its identities")
    # The filer named, not looked up through the master: one less thing for the shell to wait on.
    argv = [server.weed(), "shell", f"-master=127.0.0.1:{ports['master']}", f"-filer=127.0.0.1:{ports['filer']}"]
    try:
        done = subprocess.run(argv, input=line + "\nexit\n", capture_output=True, text=True, timeout=timeout_s,
                              cwd=server.dir)
    except subprocess.TimeoutExpired as exc:
        said = _tail(exc.stdout, exc.stderr)
        raise LocalS3Error(f"`weed shell` did not finish `{line.split()[0]}` within {timeout_s:g}s"
                           f"{f' (it said: {said})' if said else ' (it said nothing)'}; see {server.log_path} "
                           "and try again", timeout_s=timeout_s) from None
    output = (done.stdout or "") + (done.stderr or "")
    if done.returncode != 0 or re.search(r"(?im)^\s*error\b", output):
        raise LocalS3Error(f"`weed shell` refused `{line.split()[0]}` (status {done.returncode}): "
                           f"{_tail(done.stdout, done.stderr)}; see {server.log_path}")


def _tail(*outputs: str | bytes | None) -> str:
    """The last three lines the shell printed, secrets redacted."""
    text = "".join(o.decode(errors="replace") if isinstance(o, bytes) else (o or "") for o in outputs)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return redact(" | ".join(lines[-3:]))


def _wait_until(server: LocalS3, access_key: str, secret_key: str, *, accepted: bool, timeout_s: float) -> None:
    """Poll with the key until the server accepts it (or, ``accepted=False``, refuses it)."""
    from botocore.exceptions import ClientError

    from ..s3 import S3Settings
    from ..s3.objects import _new_client

    settings = S3Settings(endpoint_url=server.status().endpoint_url, region=server.settings().region,
                          access_key_id=access_key, secret_access_key=secret_key)
    # A fresh client each time: nothing cached may answer for the server.
    s3 = _new_client(settings, 2, 5, 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            s3.list_buckets()
            now_accepted = True
        except ClientError:
            now_accepted = False
        if now_accepted == accepted:
            return
        if time.monotonic() > deadline:
            raise LocalS3Error(f"the local S3 server still {'refuses' if accepted else 'accepts'} key "
                               f"{access_key} {timeout_s:g}s after it was {'added' if accepted else 'revoked'}",
                               timeout_s=timeout_s)
        time.sleep(0.1)


def _live_secrets(server: LocalS3) -> dict[str, str]:
    try:
        with open(os.path.join(server.dir, _LIVE)) as f:
            live = json.load(f)
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in live.items()} if isinstance(live, dict) else {}


def _remember_live(server: LocalS3, access_key: str, secret_key: str | None) -> None:
    live = _live_secrets(server)
    if secret_key is None:
        live.pop(access_key, None)
    else:
        live[access_key] = secret_key
    write_private_json(os.path.join(server.dir, _LIVE), live)


def add_identity(server: LocalS3, user: str, access_key: str, secret_key: str, *,
                 actions: tuple[str, ...] = DEFAULT_ACTIONS, timeout_s: float = 30.0) -> None:
    """Give ``user`` the key ``access_key``; returns once the server accepts it."""
    for kind, value in (("user", user), ("access key", access_key), ("secret key", secret_key)):
        _check(kind, value)
    remember_secret(secret_key)
    _shell(server, f"s3.configure -access_key={access_key} -secret_key={secret_key} -user={user} "
                   f"-actions={','.join(actions)} -apply", timeout_s)
    _remember_live(server, access_key, secret_key)
    _wait_until(server, access_key, secret_key, accepted=True, timeout_s=timeout_s)


def revoke_identity(server: LocalS3, user: str, access_key: str, *, secret_key: str | None = None,
                    timeout_s: float = 30.0) -> None:
    """Take ``access_key`` away from ``user``; returns once the server refuses the key with its real secret.

    A probe with a wrong secret proves nothing: the server refuses a bad signature from a live key
    too.  The secret is the one ``add_identity`` kept, unless ``secret_key`` names it.
    """
    for kind, value in (("user", user), ("access key", access_key)):
        _check(kind, value)
    secret = secret_key or _live_secrets(server).get(access_key)
    if secret is None:
        raise LocalS3Error(f"the secret of key {access_key} is unknown (it was not added with add_identity "
                           "here): pass secret_key= so the revocation can be checked")
    _shell(server, f"s3.configure -access_key={access_key} -user={user} -delete -apply", timeout_s)
    _wait_until(server, access_key, secret, accepted=False, timeout_s=timeout_s)
    _remember_live(server, access_key, None)
