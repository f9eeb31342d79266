"""``resnet.py demo``: make a small dataset, train briefly with each source kind, compare images/s per epoch.

Each step runs the real command line in a child process, exactly as a user
would type it (the commands are printed), against whatever endpoint the
environment names: ``eval "$(mountctl local-s3 env)"`` for the embedded one.
Besides training, each kind also runs ``bench`` (the data path alone): on a
CPU the model's arithmetic sets the training rate and hides the source kind.
Both run two epochs, shown apart: epoch 1 fetches from S3, epoch 2 shows what
the mount's node-local cache (on by default) gives over fetching again.

The table tells what a user on S3 would see: on a store on this machine the
dataset is made directly, then every train and bench command reads through
the far store (``benchmark/stores.py``: a proxy adding S3's latency and
per-connection rate), unless ``store`` is ``local``.  A real store is read as
it is.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, TextIO

from benchmarks.harness import CHECKOUT
from benchmarks.harness.stores import far_profile, plan_stores
from mountctl import FarProfile, InvalidSpec, S3Settings, parse_s3_uri, resolve
from mountctl.pytorch.data.sources import SOURCE_KINDS
from mountctl.pytorch.errors import DatasetError

__all__ = ["DemoConfig", "run_demo", "command_line", "comparison_table"]

_RESNET_PY = os.path.join(CHECKOUT, "resnet.py")


@dataclass(frozen=True)
class DemoConfig:
    uri: str = "s3://mountctl/demo-shards/"
    # Epochs long enough that the first batch does not decide them, within a few minutes for the three kinds on a
    # 2-core CPU (ResNet-50 at 64 px trains a few dozen images a second there).
    num_images: int = 1536
    image_size: int = 64
    batch_size: int = 32
    max_epochs: int = 2  # epoch 1 reads S3; epoch 2 reads the mount's node-local cache (the default)
    num_workers: int = 2
    shard_size: str = "256KB"  # several shards per reader even for a small dataset
    bench_epochs: int = 2
    kinds: tuple[str, ...] = tuple(SOURCE_KINDS)
    run_timeout_s: float = 600.0
    store: str = "far"  # local | far: the store train and bench read through (stores.py)
    far_latency_ms: float | None = None  # None: the far proxy's own profile
    far_rate_mb_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "uri", str(parse_s3_uri(self.uri)))
        if self.store not in ("local", "far"):
            raise InvalidSpec(f"the demo's --store must be local or far, not {self.store!r}")
        far_profile(self.far_latency_ms, self.far_rate_mb_s)  # a bad profile fails here
        unknown = [k for k in self.kinds if k not in SOURCE_KINDS]
        if unknown or not self.kinds:
            raise InvalidSpec(f"demo kinds {unknown or '(none)'} unknown: choose from {', '.join(SOURCE_KINDS)}")


def command_line() -> list[str]:
    """How to run ``resnet.py``: the file beside this checkout's benchmarks/ (the harness lives only there)."""
    return [sys.executable, _RESNET_PY]


def _run(argv: list[str], timeout_s: float, out: TextIO, settings: S3Settings | None = None
         ) -> tuple[int, dict[str, Any] | None]:
    """Run one command (stderr shown as it comes) against ``settings`` (default: this environment's);
    return its status and last JSON line on stdout."""
    print(f"\n$ {shlex.join(['python', *argv[1:]])}", file=out, flush=True)
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=timeout_s, check=False,
                              env=settings.child_env() if settings else None)
    except subprocess.TimeoutExpired:
        print(f"  gave up after {timeout_s:g}s", file=out)
        return 124, None
    summary = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                break
            except ValueError:
                continue
    return done.returncode, summary


def _mean(values: Any) -> str:
    numbers = [v for v in values if v is not None]
    return f"{sum(numbers) / len(numbers):.1f}" if numbers else "-"


def _epoch(epochs: list[dict[str, Any]], index: int, field: str = "epoch_images_per_s", digits: int = 1) -> str:
    value = epochs[index].get(field) if index < len(epochs) else None
    return f"{value:.{digits}f}" if value is not None else "-"


def _after_warmup(epochs: list[dict[str, Any]]) -> str:
    return " / ".join(_epoch(epochs, i, "images_per_s", 0) for i in range(2))


def comparison_table(rows: list[dict[str, Any]]) -> str:
    """One row per kind, whole epochs first: time to the first batch, then img/s over epochs 1 and 2.

    Epoch 1 fetches from S3, epoch 2 shows what a cache gives; the first batch is what every epoch
    of a real dataset pays before it streams.  The rates after warm-up follow, labelled as such.
    """
    header = ("source kind", "reads through", "train first batch s", "train img/s epoch 1", "epoch 2",
              "loader first batch s", "loader img/s epoch 1", "epoch 2",
              "after warm-up: train e1 / e2, loader e1 / e2", "exactly once")
    lines = [header]
    for row in rows:
        summary, bench = row.get("summary"), row.get("bench")
        if summary is None:
            lines.append((row["kind"], "-", f"failed (exit {row['status']})", *["-"] * (len(header) - 3)))
            continue
        epochs = summary["epochs"]
        source = summary["source"]
        cached = " + cache" if source.get("cache_size_mb") else ""
        via = {"mountpoint": f"mount ({source.get('backend')}{cached})", "s3io": "s3torchconnector",
               "fsspec": "s3fs"}.get(row["kind"], row["kind"])
        loader = (bench or {}).get("epochs", [])
        once = all(e["images"] == e["distinct_images"] == summary["dataset_images"] and not e["repeated_images"]
                   for e in epochs)
        lines.append((row["kind"], via, _epoch(epochs, 0, "first_batch_s", 2), _epoch(epochs, 0), _epoch(epochs, 1),
                      _epoch(loader, 0, "first_batch_s", 2) if bench else "failed",
                      _epoch(loader, 0) if bench else "-", _epoch(loader, 1) if bench else "-",
                      f"{_after_warmup(epochs)}, {_after_warmup(loader) if bench else '-'}",
                      "yes" if once else "NO"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines]
    rendered.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(rendered)


_WHOLE_EPOCH_COLUMNS = (("train", 0, "train img/s epoch 1"), ("train", 1, "train img/s epoch 2"),
                        ("loader", 0, "loader img/s epoch 1"), ("loader", 1, "loader img/s epoch 2"))
# A route that kept training waiting for data under this share of its step time did not set the training's pace:
# the model did (ResNet-50 on a CPU), and the routes' train img/s then differ by the machine's noise.
MODEL_BOUND_WAIT = 0.05


def _data_waits(row: dict[str, Any]) -> list[float] | None:
    """The training's share of step time spent waiting for data, per epoch; None when any epoch's is unknown."""
    epochs = (row.get("summary") or {}).get("data_wait") or []
    waits = [e.get("data_wait_fraction") for e in epochs]
    return [float(w) for w in waits] if waits and all(w is not None for w in waits) else None


def model_bound(rows: list[dict[str, Any]]) -> float | None:
    """The largest data wait of any route that trained, when every one stayed under ``MODEL_BOUND_WAIT`` in every
    epoch (the training was bound by the model, not by any route); else None."""
    trained = [waits for r in rows if r.get("summary") is not None and (waits := _data_waits(r)) is not None]
    if not trained or len(trained) < sum(1 for r in rows if r.get("summary") is not None):
        return None
    worst = max(max(waits) for waits in trained)
    return worst if worst < MODEL_BOUND_WAIT else None


def mount_verdict(rows: list[dict[str, Any]]) -> str:
    """One line under the table: is the mount first in every whole-epoch column, and where not, by how much.

    When no route made the training wait for data (``model_bound``), the training columns measure the model on
    this CPU, not the routes, and the line says so instead of ranking them.  Empty when the run had no mount or
    nothing to compare it with.
    """
    def figure(row: dict[str, Any], part: str, index: int) -> float | None:
        source = row.get("summary") if part == "train" else row.get("bench")
        epochs = (source or {}).get("epochs", [])
        value = epochs[index].get("epoch_images_per_s") if index < len(epochs) else None
        return float(value) if value is not None else None

    mount = next((r for r in rows if r["kind"] == "mountpoint"), None)
    others = [r for r in rows if r["kind"] != "mountpoint"]
    if mount is None or not others:
        return ""
    bound = model_bound(rows)
    behind = []
    for part, index, column in _WHOLE_EPOCH_COLUMNS:
        if part == "train" and bound is not None:
            continue
        ours = figure(mount, part, index)
        theirs = [(v, r["kind"]) for r in others if (v := figure(r, part, index)) is not None]
        if ours is None or not theirs:
            continue
        best, kind = max(theirs)
        if ours < best:
            behind.append(f"{column} {ours:.1f} against {kind}'s {best:.1f} ({ours / best:.2f} x)")
    note = "" if bound is None else (
        f" Training here is bound by the model, not the data: no route kept it waiting for data as much as "
        f"{MODEL_BOUND_WAIT:.0%} of its step time (at most {bound:.1%}), so the train img/s columns differ by this "
        f"machine's noise and are not ranked.")
    if not behind:
        columns = "whole-epoch loader column" if bound is not None else "whole-epoch column"
        return f"The mount is first in every {columns}." + note
    return ("The mount is not first in: " + "; ".join(behind) + "." + note + " BENCHMARKS.md has the same routes "
            "over whole epochs of larger datasets.")


def _store_words(store: str, profile: FarProfile) -> str:
    if store == "far":
        return (f"the far store (a proxy before this endpoint adding {profile.latency_ms:g} ms per request and "
                f"{profile.rate_mb_s:g} MB/s per connection, as S3 would)")
    return "the endpoint itself" if store == "local" else "the store as it is (not on this machine: no proxy)"


def run_demo(config: DemoConfig, *, out: TextIO | None = None) -> list[dict[str, Any]]:
    out = out or sys.stdout
    settings = resolve()
    plan = plan_stores(config.store, settings, config.far_latency_ms, config.far_rate_mb_s)
    store, profile = plan.stores[0], plan.profile
    print(f"mountctl demo against {plan.origin.endpoint_url or 'AWS S3 (' + settings.region + ')'}: "
          f"{config.num_images} images of {config.image_size} px at {config.uri}; train and bench read through "
          f"{_store_words(store, profile)}", file=out)
    base = command_line()
    status, made = _run([*base, "make", config.uri, "--num-images", str(config.num_images), "--image-size",
                         str(config.image_size), "--num-classes", "100", "--shard-size", config.shard_size,
                         "--no-progress"],
                        config.run_timeout_s, out, plan.origin)  # made once, directly
    if status != 0 or made is None:
        raise DatasetError(f"`resnet.py make` failed (exit {status}); see the messages above")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mountctl-demo-") as scratch, \
            plan.settings(store, f"{scratch}/far-proxy") as read_through:
        for kind in config.kinds:
            started = time.monotonic()
            status, summary = _run([*base, "train", config.uri, "--source-kind", kind, "--batch-size",
                                    str(config.batch_size), "--max-epochs", str(config.max_epochs), "--num-workers",
                                    str(config.num_workers), "--no-progress"], config.run_timeout_s, out, read_through)
            _, bench = _run([*base, "bench", config.uri, "--source-kind", kind, "--batch-size",
                             str(config.batch_size), "--num-workers", str(config.num_workers), "--epochs",
                             str(config.bench_epochs)], config.run_timeout_s, out, read_through)
            rows.append({"kind": kind, "status": status, "summary": summary, "bench": bench,
                         "wall_s": time.monotonic() - started, "store": store})
    print(f"\nwhole epochs through {_store_words(store, profile)} (time to the first batch, then images/s over "
          f"the epoch; the rates after warm-up last):\n" + comparison_table(rows), file=out, flush=True)
    if verdict := mount_verdict(rows):
        print(f"\n{verdict}", file=out, flush=True)
    return rows
