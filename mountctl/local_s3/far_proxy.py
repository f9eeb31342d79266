"""A far S3 store on 127.0.0.1: nginx in front of an S3 endpoint, adding per-request latency and a per-connection rate cap.

Loopback SeaweedFS answers a request sooner than S3 in the same region, whose first byte comes tens of
milliseconds after the request, and carries more on one connection (the two stores side by side:
BENCHMARKS.md, "Stores side by side", from a run with ``--store both``).  A benchmark on loopback
therefore rewards whatever keeps few requests in flight.  This proxy gives the same server S3's shape
(``FarProfile``: a wait per request, a rate per connection) so the mount programs and loaders can be
tuned for it.

nginx runs as our child (``daemon off``) with everything of its own under ``workdir``:
configuration, pid file, temp dirs, its log (``nginx.log``) and the proxy's state
(``far-proxy.json``: pid, start time, endpoint, profile, owner), so a later process (``mountctl
local-s3 stop``) can find and stop it.  A ``workdir`` that did not exist is created and,
at the stop, removed with everything in it; otherwise the stop removes what it made.

nginx must not outlive its owner.  Unless started with ``outlive_owner=True`` (``mountctl
local-s3 start --profile far``, whose command exits at once), the master gets a
parent-death signal, so a SIGKILLed bench takes its proxy with it.  nginx's workers
keep serving after their master is SIGKILLed, so a stop reaps every nginx of the
workdir (its process group, checked by working directory), live master or not, and
``orphaned()`` tells ``mountctl cleanup`` about a proxy whose master or owner is gone.
Starts and stops of one workdir are serialized by a lock file beside it.
"""

from __future__ import annotations

import contextlib
import grp
import json
import math
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidSpec, LocalS3Error
from ..logs import tail
from ..paths import lock_within, write_private_json
from ..processes import process_alive, process_identity
from ..programs import find_program
from ..teardown import spawn_with_parent_death_signal
from .ports import free_port, port_free

__all__ = ["FarProfile", "FarProxy", "render_config", "find_nginx", "MAX_LATENCY_MS", "MIN_RATE_MB_S"]

# Debian's package names, for every "not installed" message.
_INSTALL_HINT = ("install Debian's nginx-light and libnginx-mod-http-lua (apt-get install nginx-light "
                 "libnginx-mod-http-lua), or run scripts/setup.sh")
_STATE = "far-proxy.json"
_CONF = "nginx.conf"
_LOG = "nginx.log"
_PID = "nginx.pid"
_TEMP = "temp"
# One line per request the store answered, written only when asked (``log_requests``): tests count them.
_REQUESTS = "requests.log"
# Files and dirs the proxy makes in a workdir it did not create (all of them go at the stop).
_MADE = (_CONF, _PID, _STATE, _TEMP, _LOG, _REQUESTS)
# Past 10 s per request no S3 client gets through its own timeouts: that models an outage, not a far store.
MAX_LATENCY_MS = 10_000.0
# 1 kB/s; below it the cap would round to nginx's ``limit_rate 0``, which means unlimited.
MIN_RATE_MB_S = 0.001
# How long a readiness HEAD may take beyond the profile's own wait.
_READY_TIMEOUT_S = 1.0


@dataclass(frozen=True, kw_only=True)
class FarProfile:
    """What the far store models: S3 in the same region as the reader.

    ``latency_ms`` is waited once per request before it reaches the server, so it is the
    least time to a response's first byte; ``rate_mb_s`` caps each connection (MB/s of
    1e6 bytes).  0 turns either off.  Defaults: 20 ms and 50 MB/s (README, "Far profile").
    """

    latency_ms: float = 20.0
    rate_mb_s: float = 50.0
    # Share of GETs and HEADs (LIST included) answered with S3's own 503 SlowDown instead of being
    # forwarded: what a prefix over its request rate sees when many nodes start one job at once.
    slowdown_pct: float = 0.0

    def __post_init__(self) -> None:
        for name, value, least, most in (("latency_ms", self.latency_ms, 0.0, MAX_LATENCY_MS),
                                         ("rate_mb_s", self.rate_mb_s, MIN_RATE_MB_S, 1e6),
                                         ("slowdown_pct", self.slowdown_pct, 0.0, 100.0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidSpec(f"far profile: {name} must be a number, not {value!r}")
            if not 0 <= value <= most:
                raise InvalidSpec(f"far profile: {name} must lie in 0..{most:g} (0 turns it off), not {value:g}")
            if 0 < value < least:
                # nginx's limit_rate is whole bytes per second, and 0 there means no cap at all.
                raise InvalidSpec(f"far profile: {name} must be 0 (no cap) or at least {least:g}, not {value:g}")

    @property
    def rate_bytes_s(self) -> int:
        return round(self.rate_mb_s * 1e6)

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def find_nginx() -> str | None:
    """nginx lives in /usr/sbin on Debian, which a non-root PATH often lacks."""
    found = find_program("nginx")
    if found:
        return found
    return "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None


def _modules_dir(nginx: str) -> str:
    """Where this nginx's dynamic modules live (``--modules-path`` of ``nginx -V``)."""
    try:
        built = subprocess.run([nginx, "-V"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.TimeoutExpired):
        built = ""
    match = re.search(r"--modules-path=(\S+)", built)
    return match.group(1) if match else "/usr/lib/nginx/modules"


def _user_line() -> str:
    """As root, nginx's workers would switch to ``nobody`` and lose the 0700 workdir: keep them as us."""
    if os.geteuid() != 0:
        return ""
    user = pwd.getpwuid(os.geteuid()).pw_name
    group = grp.getgrgid(os.getegid()).gr_name
    return f"user {user} {group};\n"


# The body S3 sends with a 503 when a prefix is over its request rate; clients classify it by <Code>.
SLOWDOWN_BODY = ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                 '<Message>Please reduce your request rate.</Message><RequestId>mountctl-far-proxy</RequestId></Error>')


def _access_lua(profile: FarProfile) -> str:
    """The per-request Lua: the latency first, then (for a share of GETs and HEADs) S3's SlowDown answer."""
    parts = []
    if profile.latency_ms > 0:
        parts.append(f"ngx.sleep({profile.latency_ms / 1000:.6f})")
    if profile.slowdown_pct > 0:
        parts.append(
            'local m = ngx.req.get_method() '
            f'if (m == "GET" or m == "HEAD") and math.random() * 100 < {profile.slowdown_pct:.6f} then '
            'ngx.status = 503 ngx.header["Content-Type"] = "application/xml" '
            f"ngx.print('{SLOWDOWN_BODY}') return ngx.exit(503) end")
    return " ".join(parts)


def render_config(profile: FarProfile, *, upstream: str, port: int, workdir: str, modules_dir: str,
                  log_requests: bool = False) -> str:
    """nginx.conf for one proxy: ``upstream`` is ``host:port`` of the S3 server.

    ``log_requests`` writes one line per request (method, URI, status, bytes, client connection) to
    ``requests.log``, unbuffered, so that a reader counts what a client really sent and sees which requests
    shared one TCP connection (``$connection``, nginx's serial number); off by default (it costs a write each).
    """
    temp = os.path.join(workdir, _TEMP)
    access = (f"log_format requests '$request_method $request_uri $status $body_bytes_sent $connection';\n"
              f"    access_log {os.path.join(workdir, _REQUESTS)} requests;") if log_requests else "access_log off;"
    lua = ""
    delay = ""
    if profile.latency_ms > 0 or profile.slowdown_pct > 0:
        # The Lua module needs the NDK loaded first.  ngx.sleep yields, so waiting requests cost no worker.
        lua = (f"load_module {os.path.join(modules_dir, 'ndk_http_module.so')};\n"
               f"load_module {os.path.join(modules_dir, 'ngx_http_lua_module.so')};\n")
        delay = f"            access_by_lua_block {{ {_access_lua(profile)} }}\n"
    return f"""# written by mountctl.local_s3.far_proxy; every path is under {workdir}
{lua}{_user_line()}daemon off;
worker_processes auto;
pid {os.path.join(workdir, _PID)};
lock_file {os.path.join(workdir, 'nginx.lock')};
error_log {os.path.join(workdir, _LOG)} warn;
events {{ worker_connections 4096; }}
http {{
    {access}
    server_tokens off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    upstream far_s3 {{
        server {upstream};
        keepalive 64;
        keepalive_requests 100000;
        keepalive_timeout 60s;
    }}
    server {{
        listen 127.0.0.1:{port};
        # S3 keys may hold any byte: no rewriting of the URI, headers or body.
        merge_slashes off;
        underscores_in_headers on;
        ignore_invalid_headers off;
        client_max_body_size 0;
        client_header_buffer_size 16k;
        large_client_header_buffers 8 64k;
        keepalive_requests 100000;
        location / {{
{delay}            proxy_pass http://far_s3;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # SigV4 signs the Host the client sent: pass it unchanged.
            proxy_set_header Host $http_host;
            # limit_rate caps a response only while nginx buffers it; nothing spills to disk.  A send
            # may run one busy buffer ahead of the cap: small buffers keep a short stream close to it
            # (tests/test_far_store.py bounds one stream's rate).
            proxy_buffering on;
            proxy_buffers 8 64k;
            proxy_busy_buffers_size 128k;
            proxy_max_temp_file_size 0;
            limit_rate {profile.rate_bytes_s};
            # Uploads stream through instead of landing in a temp file first.
            proxy_request_buffering off;
            proxy_connect_timeout 10s;
            proxy_send_timeout 300s;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


def _answers_http(port: int, timeout_s: float = 1.0) -> bool:
    """Anything that speaks HTTP on the port (nginx answers even when the upstream does not)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(b"HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return conn.recv(16).startswith(b"HTTP/")
    except OSError:
        return False


class FarProxy:
    """Start, stop and describe one nginx that makes ``upstream_url`` look far away.

    ``with FarProxy(url, workdir) as endpoint:`` starts it and stops it at the end.  Any
    instance with the same ``workdir`` sees and can stop a proxy another process started.
    """

    def __init__(self, upstream_url: str, workdir: str, profile: FarProfile = FarProfile(), *,
                 nginx: str | None = None, log_requests: bool = False) -> None:
        match = re.fullmatch(r"http://([^/:]+):(\d+)/?", upstream_url)
        if not match:
            raise InvalidSpec(f"far proxy: the upstream must be http://HOST:PORT (an S3 endpoint), not {upstream_url!r}")
        self.upstream_url = upstream_url.rstrip("/")
        self._upstream = f"{match.group(1)}:{match.group(2)}"
        self.workdir = os.path.abspath(workdir)
        self.profile = profile
        self._nginx = nginx
        self.log_requests = log_requests
        self._child: subprocess.Popen[bytes] | None = None

    # -- state ----------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return os.path.join(self.workdir, name)

    @property
    def log_path(self) -> str:
        return self._path(_LOG)

    @property
    def requests_path(self) -> str:
        """The request log (``log_requests=True``): ``METHOD URI STATUS BYTES CONNECTION`` per line."""
        return self._path(_REQUESTS)

    def state(self) -> dict[str, Any] | None:
        """The running proxy's record, or None when none runs from this workdir."""
        state = self._recorded()
        return state if state is not None and process_alive(state.get("process")) else None

    @property
    def endpoint_url(self) -> str | None:
        state = self.state()
        return state["endpoint"] if state else None

    def running_profile(self) -> FarProfile | None:
        state = self.state()
        return FarProfile(**state["profile"]) if state else None

    # -- start / stop ---------------------------------------------------------------------

    def nginx(self) -> str:
        found = self._nginx or find_nginx()
        if not found:
            raise LocalS3Error(f"nginx is not installed (looked beside this Python, on PATH and in /usr/sbin); "
                               f"the far store needs it: {_INSTALL_HINT}", program="nginx")
        return found

    def _check_modules(self, modules_dir: str) -> None:
        if self.profile.latency_ms <= 0 and self.profile.slowdown_pct <= 0:
            return
        for module in ("ndk_http_module.so", "ngx_http_lua_module.so"):
            if not os.path.exists(os.path.join(modules_dir, module)):
                raise LocalS3Error(f"nginx's Lua module is missing ({module} not in {modules_dir}); the far store's "
                                   f"latency and SlowDown answers need it: {_INSTALL_HINT}", program="nginx")

    @contextlib.contextmanager
    def locked(self, timeout_s: float) -> Iterator[None]:
        """Hold this workdir's lock (bounded): one start or stop at a time, across processes."""
        os.makedirs(os.path.dirname(self.workdir), exist_ok=True)
        fd = os.open(self.workdir + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if not lock_within(fd, timeout_s, poll_s=0.05):
                raise LocalS3Error(f"another start or stop of the far-store proxy in {self.workdir} held its lock "
                                   f"for {timeout_s:g}s; try again when it is done", program="nginx",
                                   timeout_s=timeout_s)
            yield
        finally:
            os.close(fd)

    def start(self, timeout_s: float = 30.0, *, outlive_owner: bool = False) -> str:
        """Start nginx and return its endpoint once it answers; a no-op when this proxy already runs.

        ``outlive_owner``: keep running after this process ends (a command that starts it and
        exits); otherwise nginx is stopped by the kernel when this process dies.
        """
        with self.locked(timeout_s):
            return self._start_locked(timeout_s, outlive_owner)

    def _start_locked(self, timeout_s: float, outlive_owner: bool) -> str:
        state = self.state()
        if state and state.get("upstream") == self.upstream_url and state.get("profile") == self.profile.to_dict() \
                and bool(state.get("log_requests")) == self.log_requests:
            return str(state["endpoint"])
        previous_port = state.get("port") if state else None
        if state:  # another profile or upstream: replace it, on the same port when it comes free
            self._stop(created_workdir=bool(state.get("created_workdir")), grace_s=10.0, keep_log=False)
        nginx = self.nginx()
        modules_dir = _modules_dir(nginx)
        self._check_modules(modules_dir)
        created = not os.path.isdir(self.workdir)
        os.makedirs(self._path(_TEMP), mode=0o700, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        for attempt in range(3):  # a port taken between our check and nginx's bind: try another
            port = previous_port if attempt == 0 and previous_port and port_free(previous_port) else \
                free_port(what="the far-store proxy")
            conf = render_config(self.profile, upstream=self._upstream, port=port, workdir=self.workdir,
                                 modules_dir=modules_dir, log_requests=self.log_requests)
            with open(self._path(_CONF), "w") as f:
                f.write(conf)
            endpoint = f"http://127.0.0.1:{port}"
            with open(self.log_path, "ab") as log:
                log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting nginx on {endpoint} in front of "
                          f"{self.upstream_url}, {self.profile}\n".encode())
                log.flush()
                argv = [os.path.abspath(nginx), "-p", self.workdir, "-c", self._path(_CONF), "-e", self.log_path]
                options: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": subprocess.STDOUT,
                                           "cwd": self.workdir, "start_new_session": True}
                child = subprocess.Popen(argv, **options) if outlive_owner else \
                    spawn_with_parent_death_signal(argv, **options)
            self._child = child
            write_private_json(self._path(_STATE), {
                "process": process_identity(child.pid), "endpoint": endpoint, "port": port,
                "owner": None if outlive_owner else process_identity(),
                "upstream": self.upstream_url, "profile": self.profile.to_dict(), "created_workdir": created,
                "log_requests": self.log_requests,
                "started_at": time.time()})
            if self._wait_until_serving(child, port, deadline, _READY_TIMEOUT_S + self.profile.latency_ms / 1000):
                return endpoint
            if "Address already in use" not in self._log_tail(2):
                break
        how = f"exited with status {child.returncode}" if child.poll() is not None else \
            f"did not answer within {timeout_s:g}s"
        message = f"the far-store proxy (nginx) {how} while starting: {self._log_tail()} (log: {self.log_path})"
        self._stop(created_workdir=created, grace_s=5.0, keep_log=True)
        raise LocalS3Error(message, program="nginx", log_path=self.log_path, timeout_s=timeout_s)

    def _wait_until_serving(self, child: subprocess.Popen[bytes], port: int, deadline: float,
                            answer_s: float) -> bool:
        """The HEAD waits the profile's latency like any request: ``answer_s`` allows for it."""
        while time.monotonic() < deadline:
            if child.poll() is not None:
                return False
            if _answers_http(port, answer_s):
                return True
            time.sleep(0.05)
        return False

    def _recorded(self) -> dict[str, Any] | None:
        """The state file as written, whether its nginx still runs or not."""
        try:
            with open(self._path(_STATE)) as f:
                state = json.load(f)
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def orphaned(self) -> str | None:
        """Why this workdir's nginx has lost its owner (master or owning process gone), or None."""
        state = self._recorded()
        if state is None:
            return None
        master = (state.get("process") or {}).get("pid")
        if not process_alive(state.get("process")):
            return f"its master (pid {master}) is gone" if master and _members(master, self.workdir) else None
        owner = state.get("owner")
        if owner and not process_alive(owner):
            return f"its owner (pid {owner.get('pid')}) is gone"
        return None

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop nginx (SIGTERM, SIGKILL after ``grace_s``) and remove what it made; a no-op when none runs."""
        with self.locked(grace_s + 30.0):
            state = self._recorded() or {}
            self._stop(created_workdir=bool(state.get("created_workdir")), grace_s=grace_s, keep_log=False)

    def _stop(self, *, created_workdir: bool, grace_s: float, keep_log: bool) -> None:
        state = self._recorded()
        master = (state.get("process") or {}).get("pid") if state else None
        if master is None and self._child is not None and self._child.poll() is None:
            master = self._child.pid
        if master:
            _reap(master, self.workdir, grace_s)
        if self._child is not None:
            self._child.poll()  # reap our own child
            self._child = None
        if keep_log:
            made = [name for name in _MADE if name != _LOG]
        elif created_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        else:
            made = list(_MADE)
        for name in made + ["nginx.lock"]:
            path = self._path(name)
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

    def _log_tail(self, lines: int = 5) -> str:
        return tail([self.log_path], lines)

    # -- context manager ------------------------------------------------------------------

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _members(group: int, workdir: str) -> list[Any]:
    """The nginx processes of ``workdir``'s proxy: its process group, named nginx, working in it.

    The master may be gone (SIGKILL) while its workers serve on; a recycled group id is
    told apart by the working directory.
    """
    import psutil

    found = []
    for process in psutil.process_iter(["name"]):
        try:
            if process.info["name"] == "nginx" and os.getpgid(process.pid) == group and process.cwd() == workdir:
                found.append(process)
        except (OSError, psutil.Error):
            continue
    return found


def _reap(group: int, workdir: str, grace_s: float) -> None:
    """SIGTERM every nginx of the workdir, SIGKILL what is left after ``grace_s``; none may outlive the stop."""
    import psutil

    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        members = _members(group, workdir)
        if not members:
            return
        for process in members:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signum)
        _, alive = psutil.wait_procs(members, timeout=wait_s)
        if not alive:
            return
    raise LocalS3Error(f"the far-store proxy (nginx, group {group}) did not exit within 10s of SIGKILL; "
                       f"check `ps -o stat,wchan -g {group}`", program="nginx", timeout_s=10)
