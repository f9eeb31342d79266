"""Wait for the run's ``rclone serve s3``, and make sure the S3 the run will talk to is that rclone and wants keys.

``run.sh`` starts rclone on ``--addr 127.0.0.1:0``, so the kernel gives it a free port at its bind: choosing a free
port, releasing it and then starting rclone on it leaves a gap in which another local process can take the port,
and a probe that accepts any listener there hands that process the run's keys and uploads.  rclone names the port it
got in its log; this reads it there, checks that every listener on that port is a socket rclone's own process holds
(``/proc/net/tcp``'s inode, found among ``/proc/PID/fd``), and that an unsigned request is refused (an S3 error,
never a listing).  Standard library only: it runs before anything of the project is installed.

    python3 s3_ready.py --pid PID --log FILE [--timeout-s 20]    # prints: PORT REFUSAL (41547 400 UnsupportedAlgorithm)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

_STARTED = re.compile(r"Starting s3 server on \[https?://127\.0\.0\.1:(\d+)/?\]")
_LISTEN = "0A"  # the TCP state column of /proc/net/tcp: LISTEN


class NotReady(Exception):
    """The server is not (yet, or ever) the run's own: the message says which check failed."""


def reported_port(log_text: str) -> int | None:
    """The port rclone says it serves S3 on, from its log; None before it has said so."""
    found = _STARTED.search(log_text)
    return int(found.group(1)) if found else None


def listeners(port: int, net: Path = Path("/proc/net")) -> set[int]:
    """The socket inodes listening on TCP ``port``, on any address, IPv4 and IPv6."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (net / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            # sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode ...
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def sockets_of(pid: int) -> set[int]:
    """The socket inodes process ``pid`` holds open."""
    inodes = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def owner_problem(port: int, pid: int) -> str | None:
    """Why the listener on ``port`` is not (only) process ``pid``'s; None when every one there is its own."""
    there = listeners(port)
    if not there:
        return f"nothing listens on port {port}"
    others = there - sockets_of(pid)
    if others:
        return (f"a listener on port {port} is not held by rclone (pid {pid}): another process serves there "
                f"(socket inode {min(others)})")
    return None


def unsigned_refusal(port: int, timeout_s: float = 5.0) -> str:
    """The server's answer to an unsigned ListBuckets, which must be an S3 error: its status and code."""
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through an HTTP_PROXY
    try:
        with direct.open(f"http://127.0.0.1:{port}/", timeout=timeout_s) as answer:
            status = answer.status
    except urllib.error.HTTPError as refused:
        body = refused.read(4096).decode(errors="replace")
        code = re.search(r"<Code>([^<]+)</Code>", body)
        if refused.code >= 400 and code:
            return f"{refused.code} {code.group(1)}"
        raise NotReady(f"127.0.0.1:{port} answered an unsigned request with {refused.code} and no S3 error: "
                       "it is not rclone serve s3") from None
    raise NotReady(f"127.0.0.1:{port} answered an unsigned request with {status}: the server takes requests "
                   "without keys (RCLONE_AUTH_KEY not applied?), so anyone on this machine could read the run's data")


def wait_ready(pid: int, log: Path, timeout_s: float) -> tuple[int, str]:
    """(port, how it refused an unsigned request) once rclone has said its port and both checks pass."""
    deadline = time.monotonic() + timeout_s
    problem: str | None = None
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            raise NotReady(f"rclone (pid {pid}) exited before it served S3") from None
        try:
            port = reported_port(log.read_text(errors="replace"))
        except FileNotFoundError:
            port = None
        if port is not None:
            problem = owner_problem(port, pid)
            if problem is None:
                return port, unsigned_refusal(port)
            if listeners(port):  # someone else's: waiting will not make it rclone's
                raise NotReady(problem)
        if time.monotonic() > deadline:
            raise NotReady(f"rclone (pid {pid}) did not say in {log} within {timeout_s:g} s that it serves S3"
                           + (f" ({problem})" if problem else ""))
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pid", required=True, type=int, help="rclone's process id")
    parser.add_argument("--log", required=True, type=Path, help="rclone's --log-file")
    parser.add_argument("--timeout-s", type=float, default=20.0)
    args = parser.parse_args()
    try:
        port, refusal = wait_ready(args.pid, args.log, args.timeout_s)
    except (NotReady, OSError) as exc:
        print(f"s3_ready: error: {exc}", file=sys.stderr)
        return 1
    print(port, refusal)
    return 0


if __name__ == "__main__":
    sys.exit(main())
