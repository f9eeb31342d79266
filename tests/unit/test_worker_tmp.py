"""DataLoader workers leave no ``pymp-*`` directories in /tmp, even when an epoch is cut short."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

import torch
from torch.utils.data import DataLoader, Dataset

from mountctl.pytorch.worker_tmp import PREFIX, sweep_stale, worker_tempdir


class Tensors(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.full((3, 16, 16), float(i))


def pymp_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "pymp-*")))


def test_workers_cut_off_mid_epoch_leave_no_temp_dir():
    before = pymp_dirs()
    with worker_tempdir() as shared:
        batches = iter(DataLoader(Tensors(), batch_size=4, num_workers=2))
        next(batches)
        next(batches)
        assert pymp_dirs() - before == {shared}, "the workers share this run's one directory"
        del batches  # the workers are shut down mid-epoch
    assert pymp_dirs() - before == set()


def test_the_directory_of_a_killed_run_is_swept_and_a_live_ones_is_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = tmp_path / f"{PREFIX}{dead.stdout.strip()}-abc"
    live = tmp_path / f"{PREFIX}{os.getpid()}-def"
    other = tmp_path / "pymp-someone-else"
    for directory in (stale, live, other):
        directory.mkdir()
    assert sweep_stale(str(tmp_path)) == [stale.name]
    assert not stale.exists() and live.exists() and other.exists()


# A worker that outlives the block, as a DataLoader's workers do when a worker's error ends the run: the
# iterator that holds them is freed only after the error has left the block (a trainer's data fetcher holds
# it), and each worker then removes the socket its resource sharer made in the shared dir.
_WORKER_OUTLIVES_THE_BLOCK = """
import multiprocessing, os, sys, time
from multiprocessing.connection import Listener

from mountctl.pytorch.worker_tmp import worker_tempdir


def worker(stop):
    global listener  # held to the end, as the resource sharer holds it; multiprocessing removes it at exit
    listener = Listener()  # what a worker's resource sharer opens to pass a tensor: a socket in the temp dir
    stop.wait(60)


if __name__ == "__main__":
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    with worker_tempdir() as path:
        child = context.Process(target=worker, args=(stop,), daemon=True)
        child.start()
        deadline = time.monotonic() + 60
        while not os.listdir(path):
            assert child.is_alive() and time.monotonic() < deadline, "the worker made no socket"
            time.sleep(0.01)
    stop.set()
    child.join(60)
    print(path)
    print("train: error: a worker failed", file=sys.stderr)
    sys.exit(1)
"""


def test_a_worker_that_outlives_the_block_ends_without_a_traceback_and_the_dir_goes_at_exit():
    """A real forked worker with multiprocessing's own listener (no DataLoader needed to make the case)."""
    done = subprocess.run([sys.executable, "-c", _WORKER_OUTLIVES_THE_BLOCK], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == ["train: error: a worker failed"], done.stderr
    assert not os.path.exists(done.stdout.strip()), "the workers' temp dir outlived the run"
