"""Redaction: no secret ever reaches a log line, an error message or a status report."""

from __future__ import annotations

import re
import threading

__all__ = ["redact", "remember_secret"]

_secrets: set[str] = set()
_secrets_lock = threading.Lock()
# Catches secrets we were never told about, e.g. in a mount program's log line.
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)(secret[_-]?access[_-]?key|session[_-]?token|aws_secret_access_key|secret_key|password)"
    r"(\s*[=:]\s*|\"\s*:\s*\")([^\s\",']+)"
)


def remember_secret(value: str | None) -> None:
    """Make ``redact`` hide this value wherever it appears later."""
    if value and len(value) >= 4:
        with _secrets_lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """Hide every known secret and anything that looks like a secret assignment."""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, "***")
    return _SECRET_ASSIGNMENT.sub(lambda m: m.group(1) + m.group(2) + "***", text)
