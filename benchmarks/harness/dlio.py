"""DLIO (``dlio-benchmark`` 2.0.0) as a program: where its environment is, running it under MPI, reading its summary.

DLIO lives in ``.venv-dlio`` (``scripts/setup_dlio.sh``), apart from mountctl's own
packages; this module only starts it and reads what it wrote, so a hung or failed run
ends with its whole process group and a message that names the log to read.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import CHECKOUT
from mountctl import InvalidSpec

__all__ = ["DLIO_VENV_ENV", "dlio_venv", "run_dlio", "read_summary"]

DLIO_VENV_ENV = "MOUNTCTL_DLIO_VENV"  # where .venv-dlio is, when not beside resnet.py


def dlio_venv() -> Path:
    """``.venv-dlio`` beside resnet.py (or ``$MOUNTCTL_DLIO_VENV``); InvalidSpec with the remedy if it is missing."""
    chosen = os.environ.get(DLIO_VENV_ENV)
    venv = Path(chosen) if chosen else Path(CHECKOUT) / ".venv-dlio"
    if not (venv / "bin" / "dlio_benchmark").exists() or not (venv / "bin" / "mpirun").exists():
        raise InvalidSpec(f"DLIO is not installed at {venv}: run `bash scripts/setup_dlio.sh` (about 1.5 min, "
                          f"1.7 GB), or point ${DLIO_VENV_ENV} at such an environment")
    return venv


def _dlio_env(venv: Path) -> dict[str, str]:
    """DLIO reads local paths only: it gets no S3 credentials, and TensorFlow's start-up chatter is silenced."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0", PYTHONWARNINGS="ignore",
               DFTRACER_ENABLE="0")
    env.pop("PYTHONPATH", None)  # DLIO's environment, not this tree's
    return env


def run_dlio(venv: Path, ranks: int, args: list[str], output_folder: str, timeout_s: float) -> str:
    """``mpirun -np RANKS dlio_benchmark ARGS`` in its own session; the whole group is killed on a timeout.

    Returns the path of the run's log (DLIO's stdout and stderr).
    """
    os.makedirs(output_folder, exist_ok=True)
    log_path = os.path.join(output_folder, "mpirun.log")
    argv = [str(venv / "bin" / "mpirun"), "-np", str(ranks), str(venv / "bin" / "dlio_benchmark"), *args]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=_dlio_env(venv), cwd=output_folder, start_new_session=True)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise InvalidSpec(f"DLIO with {ranks} ranks ran past {timeout_s:g}s and was stopped; see {log_path}"
                              ) from None
        except BaseException:
            _kill_group(process)
            raise
        finally:
            _kill_group(process)  # ranks or DataLoader workers that outlived mpirun
    if code != 0:
        raise InvalidSpec(f"DLIO with {ranks} ranks exited with status {code}; the end of its log: "
                          f"{_tail(log_path)} (whole log: {log_path})")
    return log_path


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM then SIGKILL to mpirun's session: its ranks and their DataLoader workers are in it."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _group_alive(process.pid):
            time.sleep(0.1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _tail(path: str, lines: int = 6) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return " | ".join(line.strip() for line in f.readlines()[-lines:])


def read_summary(path: str) -> dict[str, Any]:
    """DLIO's ``summary.json`` in MLPerf Storage's terms: AU (mean and per epoch) and samples/s."""
    with open(path, encoding="utf-8") as f:
        summary = json.load(f)
    metric = summary.get("metric") or {}
    try:
        return {"accelerators": int(summary["num_accelerators"]),
                "au_pct": round(float(metric["train_au_mean_percentage"]), 2),
                "au_pct_per_epoch": [round(float(v), 2) for v in metric.get("train_au_percentage", [])],
                "samples_per_s": round(float(metric["train_throughput_mean_samples_per_second"]), 2),
                "dlio_mb_per_s": round(float(metric.get("train_io_mean_MB_per_second", 0.0)), 2),
                "epochs": int(summary.get("epochs", 0))}
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidSpec(f"{path} is not a DLIO training summary (missing or bad {exc}); see dlio.log beside it"
                          ) from None
