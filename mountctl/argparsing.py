"""``ArgumentParser``: the command lines' parser, whose usage errors exit 1 like every other error.

argparse exits 2 on a bad option; the README promises 1 for any error, so ``mountctl`` and
``resnet.py`` both build their parsers (and subparsers) from this class.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["ArgumentParser", "USAGE_ERROR"]

USAGE_ERROR = 1


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a usage error printed as one line, exiting ``USAGE_ERROR`` (1) instead of 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
