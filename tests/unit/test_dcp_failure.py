"""A failed DCP cell says why in its status: the rank's own error, not only which rank died.

The texts are what a rank killed by a C++ ``terminate`` and one that raised print; no real component aborts a
rank on demand, so the stderr is written out here."""

from __future__ import annotations

import pytest

from benchmarks.harness.checkpoint_cells import dcp_failure

ABORTED = """\
terminate called after throwing an instance of 'gloo::IoException'
  what():  [gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41234
Fatal Python error: Aborted

Thread 0x00007f (most recent call first):
  File "/x/checkpoint_cells.py", line 350 in _dcp_rank
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGABRT
"""

RAISED = """\
Traceback (most recent call last):
  File "/x/dcp.py", line 104, in save
mountctl.pytorch.errors.CheckpointError: distributed checkpoint save to /m/ckpt failed: rank 0: [Errno 5] EIO
"""


@pytest.mark.parametrize(("stderr", "expected"), [
    (ABORTED, ["terminate called after throwing an instance of 'gloo::IoException'", "Connection closed by peer",
               "Fatal Python error: Aborted", 'File "/x/checkpoint_cells.py", line 350 in _dcp_rank',
               "process 1 terminated with signal SIGABRT"]),
    (RAISED, ["CheckpointError: distributed checkpoint save to /m/ckpt failed: rank 0: [Errno 5] EIO"]),
])
def test_the_reason_names_the_ranks_own_error_and_how_it_ended(stderr, expected):
    reason = dcp_failure(stderr)
    assert "\n" not in reason
    for part in expected:
        assert part in reason


def test_no_output_is_said():
    assert dcp_failure("") == "no output"
