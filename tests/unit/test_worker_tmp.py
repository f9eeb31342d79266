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
