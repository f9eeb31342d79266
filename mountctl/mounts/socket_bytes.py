"""Bytes a process has received over TCP, per socket, as the kernel counts them: what its store sent it.

A mount program's store traffic is the one sign of work that a health probe cannot cause:
the probe's own FUSE request, and the interrupt that follows a timed-out probe, are read
from ``/dev/fuse`` (and advance ``rchar``), and the request the probe makes the program send
to a store that never answers advances ``wchar``; only the store's answer brings bytes in.
The counts come from the kernel's socket diagnostics (``NETLINK_SOCK_DIAG``, the interface
``ss -ti`` reads: ``tcpi_bytes_received`` of ``struct tcp_info``, Linux 4.1+), matched to
the process by the socket inodes in ``/proc/PID/fd``.  Reading a process's fds needs its
owner or root; for anyone else the answer is None.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator

__all__ = ["tcp_bytes_received", "socket_inodes"]

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_INET_DIAG_INFO = 2
_ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # struct nlmsghdr
_REQUEST = struct.Struct("=BBBBI48x")  # struct inet_diag_req_v2, its socket id left zero (a dump of all)
_MESSAGE_INODE_AT = 68  # struct inet_diag_msg: 4 bytes, the 48-byte id, expires, rqueue, wqueue, uid, then inode
_MESSAGE_SIZE = 72
_BYTES_RECEIVED_AT = 128  # tcpi_bytes_received (u64) in struct tcp_info
_ATTRIBUTE = struct.Struct("=HH")  # struct rtattr


def socket_inodes(pid: int) -> set[int] | None:
    """Inodes of the sockets ``pid`` holds open; None when its fds cannot be read (gone, or another user's)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    inodes = set()
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def tcp_bytes_received(pid: int | None) -> dict[int, int] | None:
    """Bytes received so far on each TCP socket of ``pid``, by socket inode; None when that cannot be known."""
    if not pid:
        return None
    inodes = socket_inodes(pid)
    if inodes is None:
        return None
    if not inodes:
        return {}
    try:
        return {inode: received for family in (socket.AF_INET, socket.AF_INET6)
                for inode, received in _dump(family) if inode in inodes}
    except OSError:  # netlink refused (a sandbox without it): no count rather than a wrong one
        return None


def _dump(family: int) -> Iterator[tuple[int, int]]:
    """(inode, bytes received) of every TCP socket of ``family`` in this network namespace."""
    request = _REQUEST.pack(family, socket.IPPROTO_TCP, 1 << (_INET_DIAG_INFO - 1), 0, _ALL_STATES)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as link:
        link.settimeout(2.0)  # the kernel answers at once; never wait without a bound
        link.send(_HEADER.pack(_HEADER.size + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0)
                  + request)
        while True:
            data = link.recv(1 << 16)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind = _HEADER.unpack_from(data, offset)[:2]
                if kind == _NLMSG_DONE:
                    return
                if kind == _NLMSG_ERROR:
                    raise OSError("the kernel refused the socket diagnostics request")
                found = _received(data, offset + _HEADER.size, offset + length)
                if found is not None:
                    yield found
                offset += (length + 3) & ~3
            if not data:
                return


def _received(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """(inode, bytes received) from one inet_diag_msg and its attributes; None without tcp_info or an inode."""
    if end - start < _MESSAGE_SIZE:
        return None
    inode = struct.unpack_from("=I", data, start + _MESSAGE_INODE_AT)[0]
    attribute = start + _MESSAGE_SIZE
    while attribute + _ATTRIBUTE.size <= end:
        length, kind = _ATTRIBUTE.unpack_from(data, attribute)
        if length < _ATTRIBUTE.size:
            break
        if kind == _INET_DIAG_INFO and length - _ATTRIBUTE.size >= _BYTES_RECEIVED_AT + 8 and inode:
            return inode, struct.unpack_from("=Q", data, attribute + _ATTRIBUTE.size + _BYTES_RECEIVED_AT)[0]
        attribute += (length + 3) & ~3
    return None
