"""The workers' imports run on a thread while the trainer sets up, and are finished before anything forks."""

from __future__ import annotations

import json
import subprocess
import sys

from mountctl.pytorch.data.datasets.worker_imports import WORKER_MODULES

_CHILD = """
import json, sys, threading
from mountctl.pytorch.data.datasets import worker_imports
before = [name for name in worker_imports.WORKER_MODULES if name in sys.modules]
worker_imports.start_worker_imports()
worker_imports.import_worker_modules()
threads = [t.name for t in threading.enumerate() if t.name == "mountctl-worker-imports"]
print(json.dumps({"before": before, "after": [n for n in worker_imports.WORKER_MODULES if n in sys.modules],
                  "threads": threads}))
"""


def test_imports_started_on_a_thread_are_done_and_the_thread_gone_when_the_fork_may_come():
    # A fresh interpreter, so that the modules are really imported here and not found already loaded.
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300, check=True)
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert "torchcodec.decoders" not in facts["before"]
    assert facts["after"] == list(WORKER_MODULES)
    assert facts["threads"] == []
