"""Free TCP ports on 127.0.0.1 for the servers mountctl runs, chosen outside the kernel's ephemeral range."""

from __future__ import annotations

import secrets
import socket

__all__ = ["port_free", "ephemeral_range", "port_candidates", "free_port"]

# weed's gRPC ports are its HTTP ports + this offset (the offset SeaweedFS's own worker
# assumes); a candidate keeps room for both so one rule serves every server we run.
GRPC_OFFSET = 10000


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    try:
        with open(path) as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_candidates(ephemeral: tuple[int, int]) -> range:
    """Ports P for which neither P nor P + 10000 lies in the kernel's ephemeral range.

    An outgoing connection (a mount program talking to S3, say) takes its local port from
    that range; a server port there can be taken between a stop and the restart that
    reuses it, and the restart then fails with "address already in use".
    """
    low, high = ephemeral
    if low - GRPC_OFFSET > 10000:
        return range(10000, low - GRPC_OFFSET)  # both ports below the range
    if high + 1 <= 65535 - GRPC_OFFSET:
        return range(high + 1, 65536 - GRPC_OFFSET)  # both ports above it
    return range(20000, 55536 - GRPC_OFFSET)  # no room outside it: take our chances


def free_port(offsets: tuple[int, ...] = (0,), *, what: str = "a server") -> int:
    """A port P, outside the ephemeral range, with P + each offset free on 127.0.0.1.

    Raises OSError naming ``what`` when 200 random tries find none.
    """
    candidates = port_candidates(ephemeral_range())
    for _ in range(200):
        port = candidates[secrets.randbelow(len(candidates))]
        if all(port_free(port + offset) for offset in offsets):
            return port
    raise OSError(f"found no free port on 127.0.0.1 for {what}; free some ports")
