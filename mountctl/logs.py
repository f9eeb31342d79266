"""Log tails: the last lines of a program's log, redacted, for an error message."""

from __future__ import annotations

import os

from .redaction import redact

__all__ = ["tail"]


def tail(paths: list[str], lines: int = 6, *, skip_prefix: str = "--- ") -> str:
    """The last ``lines`` non-empty lines over ``paths`` (last 4 KiB of each), joined with ' | '."""
    texts: list[str] = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
                texts += f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
    kept = [t.strip() for t in texts if t.strip() and not (skip_prefix and t.startswith(skip_prefix))]
    return redact(" | ".join(kept[-lines:]))
