"""`weed shell` as the identity changes run it: the filer named on its command line, and a shell that hangs
reported with what it printed (secrets redacted), within the caller's bound.

A real `weed shell` that hangs cannot be had on demand (it was seen once, under load, in a full CI run), so
the `weed` here is a stand-in script that prints what a shell prints first and then never finishes.
"""

from __future__ import annotations

import json
import os
import stat
import time
from types import SimpleNamespace

import pytest

from mountctl.errors import LocalS3Error
from mountctl.local_s3.identities import _shell
from mountctl.redaction import remember_secret


class StandIn:
    """A running server as ``_shell`` sees it, whose ``weed`` is the script written by ``weed_script``."""

    def __init__(self, directory: str, weed: str) -> None:
        self.dir, self._weed = directory, weed
        self.log_path = os.path.join(directory, "weed.log")
        with open(os.path.join(directory, "server.json"), "w") as f:
            json.dump({"ports": {"master": 19333, "filer": 18888}}, f)

    def weed(self) -> str:
        return self._weed

    def status(self) -> SimpleNamespace:
        return SimpleNamespace(running=True)


def weed_script(tmp_path, body: str) -> str:
    path = tmp_path / "weed"
    path.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/argv\"\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_shell_is_told_the_filer_and_a_hung_one_is_reported_with_its_output(tmp_path):
    weed = weed_script(tmp_path, "cat > /dev/null &\necho 'master: 127.0.0.1:19333 filer: 127.0.0.1:18888'\n"
                                 "echo '\"secretKey\": \"TopSecretValue123\"'\nexec sleep 30\n")
    remember_secret("TopSecretValue123")  # as add_identity does before it runs the shell
    started = time.monotonic()
    with pytest.raises(LocalS3Error) as caught:
        _shell(StandIn(str(tmp_path), weed), "s3.configure -access_key=AK -secret_key=TopSecretValue123 -apply", 1.0)
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "did not finish `s3.configure` within 1s (it said: master: 127.0.0.1:19333" in message
    assert "TopSecretValue123" not in message and "weed.log" in message
    argv = (tmp_path / "argv").read_text().split()
    assert argv == ["shell", "-master=127.0.0.1:19333", "-filer=127.0.0.1:18888"]


def test_a_refusal_names_the_shells_last_lines(tmp_path):
    weed = weed_script(tmp_path, "cat > /dev/null\necho 'error: failed to get user u1: no such user'\n")
    with pytest.raises(LocalS3Error, match="refused `s3.configure` .*failed to get user u1"):
        _shell(StandIn(str(tmp_path), weed), "s3.configure -user=u1 -delete -apply", 5.0)
