"""Checkpoint cells of ``resnet.py bench``: save and load on every route, two state sizes, and DCP on 2 ranks.

Routes: ``local-disk`` (``torch.save`` to a file and ``fsync``; before the load
the file's pages are dropped from the page cache, so the load reads the disk),
``s3io`` (s3torchconnector's Lightning plugin), ``fsspec`` (s3fs whole-object
``pipe``/``cat``), ``mountpoint/PROGRAM`` (a read-write mountctl mount of the
prefix, one sequential write), and ``dcp-s3`` / ``dcp-mount/PROGRAM`` (2 gloo
ranks, ``torch.distributed.checkpoint``).  A save is timed from the state in
memory to the checkpoint durable at its destination (serialization included);
a load from nothing in memory to the state back, and ``verified`` is true once
it equals the saved state tensor for tensor.  Objects are removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.harness import CHECKOUT
from benchmarks.harness.bars import grouped_bars
from benchmarks.harness.config import SweepConfig
from benchmarks.harness.limits import LOCAL
from benchmarks.harness.monitor import ResourceMonitor
from benchmarks.harness.sweep_run import CELL_ERRORS, Planned, StoreCells, SweepRun
from benchmarks.harness.tables import table
from mountctl import S3Settings, installed_backends

__all__ = ["states_equal", "state_sizes", "checkpoint_routes", "dcp_routes", "run_checkpoint_cells",
           "checkpoint_cell_count", "add_checkpoint_ratios", "checkpoint_rows", "checkpoint_bars",
           "checkpoint_markdown", "checkpoint_panel", "dcp_failure"]


def states_equal(a: Any, b: Any) -> bool:
    """True when two (nested) states hold the same values, tensors compared with ``torch.equal``."""
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(states_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(states_equal, a, b))
    return bool(a == b)


def _model_state(arch: str) -> dict[str, Any]:
    """A torchvision model and its SGD optimizer after one step (momentum buffers), as Lightning saves them."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, arch)(num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()
    return {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "global_step": 1}


def _synthetic_state(megabytes: int) -> dict[str, Any]:
    """``megabytes`` of random float32 in 64 MB tensors: incompressible, like trained weights."""
    import torch

    generator = torch.Generator().manual_seed(0)
    count, rest = divmod(megabytes, 64)
    sizes = [64] * count + ([rest] if rest else [])
    return {f"layer{i}": torch.rand(size * (1 << 20) // 4, generator=generator) for i, size in enumerate(sizes)}


def state_sizes(model: str, megabytes: int) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """(label, make state): a model's state with its optimizer (none for ""), and a synthetic state."""
    sizes: list[tuple[str, Callable[[], dict[str, Any]]]] = [(f"{model}+sgd", lambda: _model_state(model))] if model else []
    return sizes + [(_synthetic_label(megabytes), lambda: _synthetic_state(megabytes))]


def _synthetic_label(megabytes: int) -> str:
    return "synthetic-1GB" if megabytes == 1024 else f"synthetic-{megabytes}MB"


def _nbytes(state: Any) -> int:
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(_nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(_nbytes(v) for v in state)
    return 0


def checkpoint_routes(backends: tuple[str, ...] = ()) -> list[str]:
    """Single-process routes, local disk first (the ratio's base)."""
    return [LOCAL, "s3io", "fsspec", *(f"mountpoint/{b}" for b in backends or installed_backends())]


def dcp_routes(backends: tuple[str, ...] = ()) -> list[str]:
    return ["dcp-s3", *(f"dcp-mount/{b}" for b in backends or installed_backends())]


def checkpoint_cell_count(config: SweepConfig, planned: Planned) -> int:
    """Save and load of each state through each route, and of the DCP routes (none unless the run checkpoints)."""
    if not config.runs_checkpoints:
        return 0
    states = len(state_sizes(config.checkpoint_model, config.checkpoint_mb))
    return 2 * (states * len(checkpoint_routes(config.backends)) + len(dcp_routes(config.backends)))


class _LocalDisk:
    """torch.save to a file, fsync'd; its pages dropped before a load so that the load reads the disk."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str) -> None:
        import torch

        with open(path, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())

    def load_checkpoint(self, path: str, weights_only: bool = True) -> dict[str, Any]:
        import torch

        loaded: dict[str, Any] = torch.load(path, weights_only=weights_only)
        return loaded

    def drop_cache(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def remove_checkpoint(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def teardown(self) -> None:
        pass


@contextlib.contextmanager
def _route(route: str, uri: str, settings: S3Settings, scratch: str) -> Iterator[tuple[Any, str]]:
    """(CheckpointIO-like plugin, directory or URI to write under) for one route."""
    from mountctl.pytorch.training.checkpoint_routes import FsspecCheckpointIO, MountCheckpointIO, s3io_plugin

    plugin: Any
    if route == LOCAL:
        plugin, base = _LocalDisk(), scratch + "/"
    elif route == "s3io":
        plugin, base = s3io_plugin(settings), uri + "s3io/"
    elif route == "fsspec":
        plugin, base = FsspecCheckpointIO(settings), uri + "fsspec/"
    else:
        backend = route.split("/", 1)[1]
        base = uri + f"mount-{backend}/"
        plugin = MountCheckpointIO(base, base, backend=backend, settings=settings)
        plugin.handle  # mount now: start-up is not part of the first save  # noqa: B018
    try:
        yield plugin, base
    finally:
        plugin.teardown()


def _single_route_cells(run: Any, uri: str, scratch: str, label: str, state: dict[str, Any],
                        size_mb: float, route: str, errors: tuple[type[BaseException], ...]) -> None:
    base = {"cell": "checkpoint", "route": route, "state": label, "size_mb": round(size_mb, 1)}
    with contextlib.ExitStack() as stack:
        try:
            plugin, where = stack.enter_context(_route(route, uri, run.settings, scratch))
        except errors as exc:
            for op in ("save", "load"):
                run.cells.append({**base, "op": op, "status": f"failed: {exc}"})
                run.bar.update()
            return
        path = where + label + ".ckpt"
        program = _program_pid(plugin)

        def save() -> dict[str, Any]:
            with ResourceMonitor(program) as monitor:
                started = time.perf_counter()
                plugin.save_checkpoint(state, path)
                seconds = time.perf_counter() - started
            return {"seconds": round(seconds, 3), "mb_per_s": round(size_mb / seconds, 1), "verified": False,
                    **_program_usage(monitor)}

        saved = run.cell({**base, "op": "save"}, save)

        def load() -> dict[str, Any]:
            if isinstance(plugin, _LocalDisk):
                plugin.drop_cache(path)
            with ResourceMonitor(program) as monitor:
                started = time.perf_counter()
                loaded = plugin.load_checkpoint(path, weights_only=True)
                seconds = time.perf_counter() - started
            verified = states_equal(state, loaded)
            saved["verified"] = verified
            return {"seconds": round(seconds, 3), "mb_per_s": round(size_mb / seconds, 1), "verified": verified,
                    **_program_usage(monitor)}

        if saved["status"] == "ok":
            run.cell({**base, "op": "load"}, load)
        else:
            run.cells.append({**base, "op": "load", "status": "not run: the save failed"})
            run.bar.update()
        with contextlib.suppress(Exception):
            plugin.remove_checkpoint(path)


def _program_pid(plugin: Any) -> int | None:
    """The mount program's pid for a mount route (its plugin has a handle), else None."""
    from mountctl.pytorch.training.checkpoint_routes import MountCheckpointIO

    return plugin.handle.pid if isinstance(plugin, MountCheckpointIO) else None


def _program_usage(monitor: ResourceMonitor) -> dict[str, Any]:
    """The mount program's CPU and peak RSS during the cell (none for a route without a mount)."""
    usage = monitor.usage
    return {} if usage.program_peak_rss_mb is None else {"program_cpu_pct": round(usage.program_cpu_pct or 0.0, 1),
                                                          "program_peak_rss_mb": round(usage.program_peak_rss_mb, 1)}


def _dcp_cells(run: Any, uri: str, megabytes: int, route: str, errors: tuple[type[BaseException], ...]) -> None:
    """Two ranks in a child process (spawned with gloo), timed by rank 0 between barriers."""
    import mountctl

    size_mb = megabytes * (1 << 20) / 1e6  # the state is ``megabytes`` MiB, as the single-route cells'
    base = {"cell": "checkpoint", "route": route, "state": _synthetic_label(megabytes), "size_mb": round(size_mb, 1), "ranks": 2}
    with contextlib.ExitStack() as stack:
        where, program = uri + "dcp-s3/", None
        try:
            if route.startswith("dcp-mount/"):
                backend = route.split("/", 1)[1]
                handle = stack.enter_context(mountctl.mount(uri + f"dcp-mount-{backend}/", backend=backend,
                                                            read_only=False, settings=run.settings))
                where, program = os.path.join(handle.path, "ckpt"), handle.pid
            timeout = 120 + megabytes / 5
            # The ranks resolve S3 from their environment: the store being measured (a far proxy's endpoint).
            with ResourceMonitor(program) as monitor:  # both ops: the child times them, not this process
                done = subprocess.run([sys.executable, "-m", __name__, where, str(megabytes)],
                                      capture_output=True, text=True, timeout=timeout, check=False,
                                      env=run.settings.child_env(), cwd=CHECKOUT)
            if done.returncode != 0:
                raise RuntimeError(f"the DCP ranks failed: {dcp_failure(done.stderr)}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
        except (*errors, subprocess.TimeoutExpired) as exc:  # type: ignore[misc]  # a tuple of exception classes
            for op in ("save", "load"):
                run.cells.append({**base, "op": op, "status": f"failed: {exc}"})
                run.bar.update()
            return
        finally:
            if where.startswith("s3://"):
                _remove_prefix(run.settings, where)
        for op in ("save", "load"):
            seconds = figures[f"{op}_s"]
            run.cell({**base, "op": op}, lambda s=seconds: {
                "seconds": round(s, 3), "mb_per_s": round(size_mb / s, 1), "verified": figures["verified"],
                **_program_usage(monitor)})
        if not where.startswith("s3://"):
            import shutil

            shutil.rmtree(where, ignore_errors=True)


def _remove_prefix(settings: S3Settings, uri: str) -> None:
    from mountctl.s3 import client, list_objects, parse_s3_uri

    location = parse_s3_uri(uri)
    s3 = client(settings)
    keys = [{"Key": location.prefix + name} for name in list_objects(s3, location.bucket, location.prefix)]
    for first in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
        s3.delete_objects(Bucket=location.bucket, Delete={"Objects": keys[first:first + 1000]})


def run_checkpoint_cells(run: SweepRun, store: StoreCells) -> None:
    """Every checkpoint cell of the sweep, under the bench prefix and the run's scratch directory; ``run`` records
    them, a failure in ``CELL_ERRORS`` as a failed cell.  Ratios come later (``add_checkpoint_ratios``)."""
    config, errors = run.config, CELL_ERRORS
    backends = config.backends
    uri = config.uri + "checkpoints/"
    scratch = f"{store.scratch}/checkpoints"
    os.makedirs(scratch, exist_ok=True)
    for label, make in state_sizes(config.checkpoint_model, config.checkpoint_mb):
        state = make()
        size_mb = _nbytes(state) / 1e6
        for route in checkpoint_routes(backends):
            _single_route_cells(run, uri, scratch, label, state, size_mb, route, errors)
        del state
    for route in dcp_routes(backends):
        _dcp_cells(run, uri, config.checkpoint_mb, route, errors)


def add_checkpoint_ratios(cells: list[dict[str, Any]]) -> None:
    """Each checkpoint cell against local disk for the same state and op, in the same run and store."""
    local = {(c.get("store"), c["state"], c["op"]): c["mb_per_s"] for c in cells
             if c["cell"] == "checkpoint" and c["route"] == LOCAL and c["status"] == "ok"}
    for row in cells:
        if row["cell"] == "checkpoint" and row["status"] == "ok":
            base = local.get((row.get("store"), row["state"], row["op"]))
            row["ratio_to_local_disk"] = round(row["mb_per_s"] / base, 3) if base else None


def checkpoint_rows(cells: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """The Markdown table of the checkpoint cells: header and rows."""
    header = ["store", "state", "op", "route", "size MB", "MB/s", "x local disk", "verified",
              "program peak RSS MB"]
    rows = [[c.get("store"), c["state"], c["op"], c["route"], c["size_mb"], c.get("mb_per_s"),
             c.get("ratio_to_local_disk"), c.get("verified"), c.get("program_peak_rss_mb")] if c["status"] == "ok"
            else [c.get("store"), c["state"], c["op"], c["route"], c["size_mb"], c["status"], "", "", ""]
            for c in cells if c["cell"] == "checkpoint"]
    return header, rows


def checkpoint_bars(cells: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """For the chart: MB/s per route, per "state op" group (the caller picks one store's cells)."""
    bars: dict[str, dict[str, float]] = {}
    for c in cells:
        if c["cell"] == "checkpoint" and c["status"] == "ok":
            bars.setdefault(c["route"], {})[f"{c['state']}\n{c['op']}"] = c["mb_per_s"]
    return bars


def dcp_failure(stderr: str) -> str:
    """Why the DCP child failed, in one line: a rank's own words (a C++ ``terminate``, a fatal Python error,
    the exception) and torch.multiprocessing's last line, which says only which rank died and how."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    telling = [line for line in lines if line.startswith(("terminate called", "what():", "Fatal Python error"))
               or re.match(r"^[\w.]+(Error|Exception)\b", line)][:3]
    # faulthandler's stack of the aborting thread: its innermost frame says where the abort came from.
    frames = [line for line in lines if line.startswith("File ")][:1]
    return " | ".join(telling + frames + [line for line in lines[-1:] if line not in telling]) or "no output"


def _dcp_rank(rank: int, where: str, megabytes: int, rendezvous: str) -> None:
    import faulthandler

    import torch.distributed as dist

    import mountctl
    from mountctl.pytorch.training import dcp

    faulthandler.enable()  # a rank that aborts says where, on the stderr its parent reports
    # A file in the child's own directory, not a TCP port chosen beforehand: no other process can take it
    # between the choice and the bind, nor talk to this job's store.
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)
    try:
        settings = mountctl.resolve()
        state = _synthetic_state(megabytes)  # the same on both ranks: DCP splits the writing between them
        dist.barrier()
        started = time.perf_counter()
        dcp.save(state, where, settings)
        dist.barrier()
        save_s = time.perf_counter() - started
        loaded = {k: v.new_zeros(v.shape) for k, v in state.items()}
        dist.barrier()
        started = time.perf_counter()
        dcp.load(loaded, where, settings)
        dist.barrier()
        load_s = time.perf_counter() - started
        if rank == 0:
            print(json.dumps({"save_s": save_s, "load_s": load_s, "verified": states_equal(state, loaded)}),
                  flush=True)
        dist.barrier()  # both ranks leave together: neither tears its connections down under the other
    finally:
        dist.destroy_process_group()
    # Both ranks have passed every barrier and rank 0 has answered: leave without the interpreter's
    # finalization.  A rank aborted there now and then on a loaded machine ("terminate called without an
    # active exception", SIGABRT: a C++ thread object destroyed while still joinable, which is what static
    # destructors of torch's thread pools do when a worker thread has not finished by then), after its work
    # was done and checked.  An error above still propagates with its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _dcp_main(where: str, megabytes: int) -> None:
    """Two gloo ranks, spawned, meeting through a file in a private temporary directory."""
    import tempfile

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="mountctl-dcp-") as private:
        mp.start_processes(_dcp_rank, args=(where, megabytes, os.path.join(private, "rendezvous")), nprocs=2,
                           start_method="spawn")


if __name__ == "__main__":  # the DCP cells' child: python -m ...checkpoint_cells WHERE MEGABYTES
    _dcp_main(sys.argv[1], int(sys.argv[2]))


def checkpoint_markdown(cells: list[dict[str, Any]]) -> str:
    """The checkpoint section ("" where the run has no checkpoint cell)."""
    if not any(c["cell"] == "checkpoint" for c in cells):
        return ""
    return "## Checkpoints: save and load per route\n\n" + table(*checkpoint_rows(cells))


def checkpoint_panel(axis: Any, cells: list[dict[str, Any]], store: str) -> None:
    """The chart's checkpoint row: MB/s per route, grouped by state and op."""
    grouped_bars(axis, checkpoint_bars(cells))
    axis.set_ylabel("MB/s")
    axis.set_title(f"{store}: checkpoint save and load per route")
