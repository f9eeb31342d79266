"""Observability: what the node's shared mounts are doing, for a person (``mountctl status``) or a scraper.

It sits above ``mountctl.shared``: it reads the registry's records and probes the
mounts they name, and nothing in ``shared`` imports it back (a supervisor or a holder
never needs a mount's figures).  Only ``status`` is imported here; the exporter pulls
in prometheus_client, so it is imported where it is served (``mountctl exporter``).
"""

from __future__ import annotations

from .status import status

__all__ = ["status"]
