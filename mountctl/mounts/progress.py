"""Is a mount program making progress?  What tells a busy mount from a wedged one.

A probe that gets no answer within its bound proves only that the program did not
answer *this* request in time: under 64 readers s3fs serves its queue in order and the
probe waits its turn.  Whether it is still working is read from the kernel, and only
from signs the probe cannot cause.  Any one of these counts:

- the bytes the program received from its store over TCP (``socket_bytes``);
- the bytes it read from a disk (``read_bytes`` in ``/proc/PID/io``: storage reads, which
  a mount serving its data cache from disk makes with nothing coming from its store);
- a thread of it waiting for a disk at the end of the window: in uninterruptible sleep
  (state D) inside a read of a file on a local filesystem (``/proc/PID/task/TID/syscall``,
  the file's mount from ``fdinfo``'s ``mnt_id``, never by touching the file).  On a slow
  cache disk one read can take longer than the probe's whole window, during which
  ``read_bytes`` (counted when a read is issued) does not move; a read of a file on a FUSE
  mount does not count, since a program reading its own mount is deadlocked, not working;
- CPU time (``/proc/PID/stat``) of at least ``CPU_BUSY_SHARE`` of one core over the
  window: a mount serving its cache out of the page cache to many readers does nothing
  else, and the probe's own requests cost microseconds, far under that share.

``rchar``/``wchar`` in ``/proc/PID/io`` do not qualify: the probe's own FUSE request, and
the interrupt the kernel sends when the timed-out probe is killed, are read from
``/dev/fuse``, and the request the probe makes it send to a store that never answers is
written, so a program whose read loop runs while every handler is stuck (rclone reads
requests on one goroutine and serves each on another) would read as busy for ever; reads
from ``/dev/fuse`` are not storage reads, so ``read_bytes`` never sees them.  A stopped
(SIGSTOP) program, one whose store never answers, or one stuck in the kernel receives
nothing, reads nothing and spends no CPU.  The one wedge these signs cannot see is a
program that spins without serving anything: it reads as busy.

A program that shows none of these may be wedged, or waiting on a store that does not answer, and only the first
is mended by a remount (the second breaks every reader of the pages the kernel keeps, for nothing).  So the
addresses the program is connected (or connecting) to are read from its own sockets (``store_peers``), and each is
sent one bounded request from here (``ask_store``): the server the program waits on either answers us (any byte,
or closing the connection) or it does not.  No credentials are needed to learn that a server answers (S3 answers an
unsigned request with 403), so none is sent and none can leak.

A process's sockets, ``/proc/PID/io`` and its threads' system calls can be read only by its owner (and root;
the system calls only by a process allowed to trace it);
anyone else falls back to any advance of the CPU time, which every user may read
(weaker: a runtime's own timers spend a little CPU even when no request completes), and cannot ask its store.
"""

from __future__ import annotations

import ipaddress
import os
import platform
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .socket_bytes import socket_inodes, tcp_bytes_received

__all__ = ["ProgressMark", "progress_mark", "made_progress", "progress_evidence", "received_since", "read_since",
           "CPU_BUSY_SHARE", "Peer", "StoreAnswer", "store_peers", "ask_store", "peer_text"]

# The least share of one core over a window that counts as work on its own: a program serving readers from the
# page cache spends far more; idle timers and the probe's own requests (microseconds each) far less.
CPU_BUSY_SHARE = 0.1
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# The read system calls (read, pread64, readv, preadv, preadv2) by number, per architecture: what a program waiting
# for its disk cache is inside.
_READ_CALLS = {"x86_64": frozenset({0, 17, 19, 295, 327}),
               "aarch64": frozenset({63, 65, 67, 69, 286})}.get(platform.machine(), frozenset())


@dataclass(frozen=True)
class ProgressMark:
    """One reading of a program's counters; None where a counter could not be read."""

    cpu_ticks: int | None  # user + system time of every thread, in clock ticks
    received: tuple[tuple[int, int], ...] | None  # (socket inode, bytes received) of each of its TCP sockets
    stopped: bool = False  # stopped by a signal or a tracer (state T or t)
    read_bytes: int | None = None  # bytes it has read from storage (disks), every thread's
    disk_waits: int | None = None  # threads waiting (state D) in a read of a file on a local disk
    at: float = field(default=0.0, compare=False)  # time.monotonic() of the reading (0: not known)


def progress_mark(pid: int | None) -> ProgressMark:
    """Read ``pid``'s counters now; never blocks (procfs and netlink answer from the kernel, not the mount)."""
    if not pid:
        return ProgressMark(None, None)
    at = time.monotonic()
    cpu, stopped = _cpu_and_state(pid)
    received = tcp_bytes_received(pid)
    return ProgressMark(cpu, None if received is None else tuple(sorted(received.items())), stopped,
                        _storage_read_bytes(pid), _disk_waits(pid), at)


def received_since(before: ProgressMark, after: ProgressMark) -> int | None:
    """Bytes the program received from its store between two marks (None: not known to this user).

    Sockets are matched by inode: one opened meanwhile counts from zero, one closed meanwhile is not counted.
    """
    if before.received is None or after.received is None:
        return None
    earlier = dict(before.received)
    return sum(max(0, count - earlier.get(inode, 0)) for inode, count in after.received)


def read_since(before: ProgressMark, after: ProgressMark) -> int | None:
    """Bytes the program read from a disk between two marks (None: not known to this user)."""
    if before.read_bytes is None or after.read_bytes is None:
        return None
    return max(0, after.read_bytes - before.read_bytes)


def progress_evidence(before: ProgressMark, after: ProgressMark) -> str:
    """What shows that the program did work between two marks (and is not stopped now), or '' for nothing."""
    if after.stopped:
        return ""
    received = received_since(before, after)
    if received:
        return f"it received {received} bytes from its store meanwhile"
    read = read_since(before, after)
    if read:
        return f"it read {read} bytes from its disk meanwhile (its data cache)"
    if after.disk_waits:
        return (f"{after.disk_waits} of its threads {'is' if after.disk_waits == 1 else 'are'} waiting for its disk "
                "(reading its data cache)")
    if before.cpu_ticks is None or after.cpu_ticks is None:
        return ""
    used = after.cpu_ticks - before.cpu_ticks
    if received is None:  # its sockets are not this user's to read: any CPU time is the only sign left
        return "its CPU time advanced; its sockets are not readable by this user" if used > 0 else ""
    window = after.at - before.at
    if used > 0 and window > 0 and used / _TICKS_PER_S >= CPU_BUSY_SHARE * window:
        return f"it used {used / _TICKS_PER_S / window:.0%} of a CPU meanwhile"
    return ""


def made_progress(before: ProgressMark, after: ProgressMark) -> bool:
    """The program did work between two marks (and is not stopped now)."""
    return bool(progress_evidence(before, after))


def _cpu_and_state(pid: int) -> tuple[int | None, bool]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None, False
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return int(fields[11]) + int(fields[12]), fields[0] in ("T", "t")
    except (IndexError, ValueError):
        return None, False


def _disk_waits(pid: int) -> int | None:
    """Threads of ``pid`` in uninterruptible sleep inside a read of a file on a local (non-FUSE) filesystem (None:
    the process is gone; a thread whose system call this user cannot read is not counted).  Only procfs is read,
    never the file, which may be on a mount."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    waiting, filesystems = 0, None
    for tid in tids:
        task = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{task}/stat") as f:
                stat = f.read()
            if stat[stat.rfind(")") + 2:stat.rfind(")") + 3] != "D":
                continue
            with open(f"{task}/syscall") as f:
                call = f.read().split()
        except OSError:
            continue
        if len(call) < 2 or not call[0].isdigit() or int(call[0]) not in _READ_CALLS:
            continue
        try:
            fd = int(call[1], 16)
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("/"):  # a pipe, a socket, an anonymous file
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                mount_id = next(line.split()[1] for line in f if line.startswith("mnt_id:"))
        except (OSError, ValueError, StopIteration):
            continue
        if filesystems is None:
            filesystems = _filesystems(pid)
        if not filesystems.get(mount_id, "fuse").startswith("fuse"):
            waiting += 1
    return waiting


def _filesystems(pid: int) -> dict[str, str]:
    """Mount id -> filesystem type, as ``pid`` sees its mounts."""
    found = {}
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            for line in f:
                fields = line.split()
                if " - " in line and fields:
                    found[fields[0]] = line.split(" - ", 1)[1].split()[0]
    except OSError:
        pass
    return found


def _storage_read_bytes(pid: int) -> int | None:
    """``read_bytes`` of ``/proc/PID/io`` (the owner's and root's to read), or None."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


# /proc/net/tcp states: the program is connected to a server (01), or still connecting (02: a SYN not answered).
_TCP_ESTABLISHED, _TCP_SYN_SENT, _TCP_LISTEN = "01", "02", "0A"
_PEERS_ASKED = 4  # a program talks to one endpoint; a few addresses (DNS round robin) are enough to judge it

Peer = tuple[str, int]  # (address, port) of a server a program is connected to


@dataclass(frozen=True)
class StoreAnswer:
    peer: Peer
    answered: bool  # it sent a byte or closed the connection: a server process acts there
    how: str  # what happened, for a message ("answered", "no reply within 2s", "connection refused", ...)


def store_peers(pid: int | None) -> list[Peer] | None:
    """The servers ``pid`` is connected or connecting to over TCP; None when its sockets cannot be read.

    Connections the program accepted (rclone's remote control) are not its store: sockets on a port it listens
    on are left out.  Read from ``/proc/PID/net/tcp{,6}`` (its network namespace), matched by socket inode.
    """
    inodes = socket_inodes(pid) if pid else None
    if inodes is None:
        return None
    rows = [row for name in ("tcp", "tcp6") for row in _tcp_table(pid, name) if row[3] in inodes]
    listening = {local[1] for local, _, state, _ in rows if state == _TCP_LISTEN}
    peers: list[Peer] = []
    for local, remote, state, _ in rows:
        if state in (_TCP_ESTABLISHED, _TCP_SYN_SENT) and local[1] not in listening and remote not in peers:
            peers.append(remote)
    return peers


def _tcp_table(pid: int | None, name: str) -> list[tuple[Peer, Peer, str, int]]:
    """(local, remote, state, inode) of each socket in ``/proc/PID/net/NAME``."""
    try:
        with open(f"/proc/{pid}/net/{name}") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    rows = []
    for line in lines:
        fields = line.split()
        try:
            rows.append((_address(fields[1]), _address(fields[2]), fields[3], int(fields[9])))
        except (IndexError, ValueError):
            continue
    return rows


def _address(text: str) -> Peer:
    """``0100007F:1F90`` -> ('127.0.0.1', 8080): the kernel prints each 32-bit word of the address in host order
    (little-endian here); an IPv4 address mapped into IPv6 is given as IPv4."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    packed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(packed)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address), int(port, 16)


def peer_text(peer: Peer) -> str:
    """``127.0.0.1:8333``, ``[::1]:8333``: as an address is written in a URL."""
    host, port = peer
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def ask_store(peers: list[Peer], timeout_s: float) -> list[StoreAnswer]:
    """Send each peer (a few at most, at once) one unsigned HTTP request; the whole costs at most ``timeout_s``.

    The request is one a reverse proxy passes on (``HEAD /`` with its Host), so a proxy in front of a store that
    hangs does not answer for it.  A TLS endpoint's own server answers a plain request (it closes or sends an
    alert) whatever hangs behind it: that reads as an answer.
    """
    asked = peers[:_PEERS_ASKED]
    if not asked:
        return []
    with ThreadPoolExecutor(max_workers=len(asked), thread_name_prefix="mountctl-ask-store") as pool:
        return list(pool.map(lambda peer: _ask(peer, timeout_s), asked))


def _ask(peer: Peer, timeout_s: float) -> StoreAnswer:
    deadline = time.monotonic() + timeout_s
    where = peer_text(peer)
    try:
        with socket.create_connection(peer, timeout=timeout_s) as conn:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            conn.sendall(f"HEAD / HTTP/1.1\r\nHost: {where}\r\nUser-Agent: mountctl-health\r\n"
                         "Connection: close\r\n\r\n".encode())
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            reply = conn.recv(1)
    except ConnectionRefusedError:
        return StoreAnswer(peer, False, "connection refused (nothing listens there)")
    except ConnectionResetError:
        return StoreAnswer(peer, True, "answered (reset the connection)")
    except TimeoutError:
        return StoreAnswer(peer, False, f"no reply within {timeout_s:g}s")
    except OSError as exc:  # no route, network unreachable
        return StoreAnswer(peer, False, exc.strerror or type(exc).__name__)
    return StoreAnswer(peer, True, "answered" if reply else "answered (closed the connection)")
