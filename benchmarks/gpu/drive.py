"""The GPU run's steps, each a command of this repository under one deadline; then one table, JSON and a log.

``run.sh`` has unpacked the pack, started the S3 server and set the environment (AWS_* for the clients, PATH,
PYTHONPATH, MOUNTCTL_HOME); this runs, in order, each in a process group of its own with a timeout cut from what
is left of the run's budget:

1. facts: torch, the GPU, and whether TorchCodec decodes a JPEG here (``decode.py --facts``);
2. the FUSE probe: ``mountctl mount`` of the bucket with mount-s3 (else rclone), one file read, ``mountctl
   unmount``; a failure leaves the mountpoint source out, in one line;
3. ``resnet.py make``: a dataset sized for the budget, in shards enough for every loader worker;
4. the ceiling: the same model and Trainer on synthetic batches already on the device (``ceiling.py``);
5. per source kind: ``resnet.py train`` (2 epochs; JPEGs decoded on the GPU where training runs on one) and
   ``resnet.py bench --source-kind`` (the loader alone, decode in the workers, 2 epochs);
6. JPEG decode: one CPU core, every loader worker's core, and the GPU (``decode.py``);
7. where time is left on a GPU: one source trained again with ``--decode cpu``.

Only the commands' documented output is read: the JSON line ``train`` and ``bench`` print last
(docs/training-output.md) and those of the scripts beside this one.  A step that fails or runs out of time is
a row that says so; the run goes on.  The exit status is 0 only when every step that ran succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCES = ("mountpoint", "s3io", "fsspec")
BUCKET = "gpu-run"
OUT_FILES = ("gpu-run.json", "gpu-table.md", "gpu-run.log")  # the device tool brings back at most 8 files


@dataclass(frozen=True)
class Plan:
    """What a mode runs: sizes, model, and a cap in seconds on each step (the budget cuts them further)."""

    images: int
    image_size: int
    batch_size: int
    arch: str
    precision: str | None  # None: train's own default for the device
    accelerator: str
    workers: int
    warmup_batches: int
    ceiling_steps: int
    ceiling_warmup: int
    budget_s: float
    caps: dict[str, float]
    reserve_s: float  # kept for the report and run.sh's cleanup

    def shard_size(self) -> str:
        """Shards enough that every loader worker reads several: an uneven last round costs a whole shard."""
        # make's JPEGs: 24.6 KB at 224 px, 4.4 KB at 32 px (headers and tables are most of a small one)
        per_image = 4_000 + int(20_600 * (self.image_size / 224) ** 2)
        shards = max(8, 4 * self.workers)
        return str(max(16_384, self.images * per_image // shards))


def plan_for(mode: str, cores: int, images: int | None, budget_s: float | None) -> Plan:
    if mode == "gpu":
        # 20,000 images of 224 px (about 490 MB): an epoch of a few seconds at a few thousand images/s, long
        # enough that worker start-up is a small part of it, and three sources x (2 trained + 2 loader epochs)
        # fit the 7 minutes with room for a slow one. Workers: the cores less four (main process, S3 server,
        # mount program, pin-memory thread).
        return Plan(images=images or 20_000, image_size=224, batch_size=256, arch="resnet50", precision="bf16-mixed",
                    accelerator="gpu", workers=max(1, cores - 4), warmup_batches=5, ceiling_steps=40, ceiling_warmup=10,
                    budget_s=budget_s or 420, reserve_s=30,
                    caps={"facts": 60, "probe": 45, "make": 120, "ceiling": 90, "train": 150, "bench": 90,
                          "decode": 60, "extra": 90})
    # The CPU check: the same steps on 64 images of 32 px with ResNet-18, two batches an epoch (a step of it takes
    # about 2 s on two busy cores), so that what it checks is the pack and the code path, in a few minutes.
    return Plan(images=images or 64, image_size=32, batch_size=32, arch="resnet18", precision=None,
                accelerator="cpu", workers=max(1, cores - 1), warmup_batches=1, ceiling_steps=2, ceiling_warmup=1,
                budget_s=budget_s or 900, reserve_s=30,
                caps={"facts": 120, "probe": 90, "make": 180, "ceiling": 240, "train": 300, "bench": 240,
                      "decode": 120, "extra": 0})


class Stopped(Exception):
    """SIGTERM or SIGINT: stop the step in flight, write what was measured, exit."""


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok | failed (...) | timed out after N s | skipped (...)
    seconds: float = 0.0
    result: Any = None
    probe: bool = False  # asks whether something works here: a "no" is an answer, not a failed run

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Run:
    args: argparse.Namespace
    plan: Plan
    started: float
    env: dict[str, str]
    secrets: tuple[str, ...]
    steps: list[Step] = field(default_factory=list)
    log_parts: list[str] = field(default_factory=list)

    def remaining(self) -> float:
        return self.plan.budget_s - (time.time() - self.started)

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def note(self, line: str) -> None:
        print(f"drive: {line}", flush=True)
        self.log_parts.append(f"drive: {line}\n")

    def step(self, name: str, argv: list[str], cap_s: float, *, json_last: bool = True, probe: bool = False) -> Step:
        """Run ``argv`` (a command of this repository) under min(cap, what the budget leaves); parse its last
        JSON line of stdout when ``json_last``."""
        step = Step(name, probe=probe)
        self.steps.append(step)
        timeout = min(cap_s, self.remaining() - self.plan.reserve_s)
        if timeout < 5:
            step.status = "skipped (no time left in the budget)"
            self.note(f"{name}: {step.status}")
            return step
        logs = Path(self.args.work) / "logs"
        stdout_path, stderr_path = logs / f"{name}.out", logs / f"{name}.err"
        self.note(f"{name}: {' '.join(_shown(argv))} (at most {timeout:.0f} s)")
        began = time.monotonic()
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=self.env,
                                       cwd=self.args.repo, start_new_session=True)
            pgid_file = Path(self.args.work) / "step.pgid"
            pgid_file.write_text(str(process.pid))
            try:
                rc = process.wait(timeout=timeout)
                step.status = "ok" if rc == 0 else f"failed (exit {rc})"
            except subprocess.TimeoutExpired:
                _stop_group(process)
                step.status = f"timed out after {timeout:.0f} s"
            except Stopped:
                _stop_group(process)
                step.status = "stopped (run.sh was interrupted)"
                raise
            finally:
                pgid_file.unlink(missing_ok=True)
                step.seconds = round(time.monotonic() - began, 1)
                stdout, stderr = (self.scrub(p.read_text(errors="replace")) for p in (stdout_path, stderr_path))
                self.log_parts.append(f"\n===== {name}: {step.status}, {step.seconds} s =====\n"
                                      f"$ {' '.join(_shown(argv))}\n{stdout}{stderr}")
        if json_last and step.ok:
            step.result = _last_json(stdout)
            if step.result is None:
                step.status = "failed (printed no JSON line)"
        if not step.ok:
            last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
            step.status += f": {last.strip()[:300]}" if last and not step.status.startswith("timed") else ""
        self.note(f"{name}: {step.status} in {step.seconds} s")
        return step


def _shown(argv: list[str]) -> list[str]:
    """The command as the log shows it: paths relative to the checkout, an inline script by name only."""
    shown = [os.path.relpath(a) if a.startswith("/") and os.path.exists(a) else a for a in argv]
    return [("<probe script>" if shown[i - 1] == "-c" else word) if i else word for i, word in enumerate(shown)]


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the step's group (mountctl unmounts on it), SIGKILL 10 s later: within the budget's reserve."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_json(text: str) -> Any:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


# -- the steps ---------------------------------------------------------------------------------


def fuse_probe(run: Run, python: str, found: dict[str, Any]) -> str | None:
    """The mount program that mounts here (mount-s3, else rclone), or None; one line says why not."""
    if run.args.fuse_problem:
        found["fuse"] = run.args.fuse_problem
        return None
    from mountctl import resolve  # the public API (run.sh put the pack's boto3 on PYTHONPATH)
    from mountctl.s3 import client, ensure_bucket

    settings = resolve()
    ensure_bucket(settings, BUCKET, create=True)
    client(settings).put_object(Bucket=BUCKET, Key="probe/hello.txt", Body=b"mounted\n")
    reasons = []
    for program in ("mount-s3", "rclone"):
        mount_dir = os.path.join(run.args.work, f"probe-{program}")
        probe = run.step(f"probe-{program}", [
            python, "-c", _PROBE, f"s3://{BUCKET}/probe/", mount_dir, program], run.plan.caps["probe"], probe=True)
        if probe.ok and probe.result and probe.result.get("read") == "mounted\n":
            if reasons:
                run.note("FUSE: mount-s3 did not mount here (" + reasons[0] + "); the mountpoint source uses rclone")
            return program
        reasons.append(f"{program}: {probe.status}")
    found["fuse"] = "; ".join(reasons)
    run.note(f"FUSE: the mount cannot run on this machine ({'; '.join(reasons)}); running s3io and fsspec only")
    return None


# Mount with the CLI, read one file in a child (a wedged FUSE mount must not hang this one), unmount with the CLI.
# A failure prints mountctl's own one-line error last on stderr, which the step's status shows.
_PROBE = """
import json, subprocess, sys
uri, mount_dir, program = sys.argv[1:4]
mountctl = [sys.executable, "-m", "mountctl"]
def run(argv, timeout):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    sys.stderr.write(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.exit(done.returncode)
run(mountctl + ["mount", uri, mount_dir, "--backend", program, "--timeout", "20"], 40)
try:
    read = subprocess.run(["cat", mount_dir + "/hello.txt"], capture_output=True, text=True, timeout=10).stdout
finally:
    run(mountctl + ["unmount", mount_dir, "--timeout", "20"], 40)
print(json.dumps({"read": read}))
"""


def train_argv(run: Run, python: str, uri: str, kind: str, backend: str | None, decode: str) -> list[str]:
    plan = run.plan
    argv = [python, "resnet.py", "train", uri, "--source-kind", kind, "--batch-size", str(plan.batch_size),
            "--max-epochs", "2", "--num-workers", str(plan.workers), "--accelerator", plan.accelerator,
            "--devices", "1", "--arch", plan.arch, "--warmup-batches", str(plan.warmup_batches), "--decode", decode,
            "--no-progress"]
    if plan.precision:
        argv += ["--precision", plan.precision]
    if backend:
        argv += ["--backend", backend]
    return argv


def bench_argv(run: Run, python: str, uri: str, kind: str, backend: str | None) -> list[str]:
    plan = run.plan
    argv = [python, "resnet.py", "bench", uri, "--source-kind", kind, "--num-workers", str(plan.workers),
            "--epochs", "2", "--batch-size", str(plan.batch_size), "--warmup-batches", str(plan.warmup_batches),
            "--no-progress"]
    return argv + (["--backend", backend] if backend else [])


def run_all(run: Run, found: dict[str, Any]) -> None:
    """Every step in order, into ``found`` (what the report reads; partial when stopped)."""
    python, plan, here = sys.executable, run.plan, Path(__file__).resolve().parent
    facts = run.step("facts", [python, str(here / "decode.py"), "--facts", "--device",
                               "cuda" if plan.accelerator == "gpu" else "cpu"], plan.caps["facts"])
    found["facts"] = facts.result or {}
    for line in found["facts"].get("problems", []):
        run.note(line)
    if plan.accelerator == "gpu" and not found["facts"].get("cuda"):
        run.note("no CUDA GPU is visible to torch here: nothing to measure on a GPU (run.sh --cpu runs the CPU check)")
        run.steps.append(Step("cuda", status="failed (no CUDA GPU visible to torch)"))
        return
    backend = fuse_probe(run, python, found)
    found["mount_program"] = backend
    kinds = [k for k in run.args.sources if k != "mountpoint" or backend]
    uri = f"s3://{BUCKET}/img{plan.image_size}-n{plan.images}/"
    found["dataset"] = {"uri": uri, "images": plan.images, "image_size": plan.image_size,
                        "shard_size": plan.shard_size()}
    make = run.step("make", [python, "resnet.py", "make", uri, "--num-images", str(plan.images),
                             "--image-size", str(plan.image_size), "--shard-size", plan.shard_size(),
                             "--jobs", str(os.cpu_count() or 1), "--no-progress"], plan.caps["make"])
    found["dataset"].update(make.result or {})
    if not make.ok:
        return
    ceiling = run.step("ceiling", [python, str(here / "ceiling.py"), "--arch", plan.arch, "--batch-size",
                                   str(plan.batch_size), "--image-size", str(plan.image_size), "--steps",
                                   str(plan.ceiling_steps), "--warmup-steps", str(plan.ceiling_warmup),
                                   "--accelerator", plan.accelerator, *(["--precision", plan.precision]
                                                                        if plan.precision else [])],
                       plan.caps["ceiling"])
    found["ceiling"] = ceiling.result
    # Training on a GPU decodes there (``--decode auto``) unless TorchCodec cannot decode on CUDA here.
    decode = "auto" if plan.accelerator == "cpu" or found["facts"].get("gpu_decode_ok") else "cpu"
    decode_s = min(plan.caps["decode"], 45)
    for number, kind in enumerate(kinds):
        share = (run.remaining() - plan.reserve_s - decode_s) / (len(kinds) - number)
        program = backend if kind == "mountpoint" else None
        cell = found["sources"][kind] = {"train": None, "bench": None, "program": program,
                                         "train_status": "not run", "bench_status": "not run"}
        try:
            train = run.step(f"train-{kind}", train_argv(run, python, uri, kind, program, decode),
                             min(plan.caps["train"], max(0.7 * share, 5)))
            run.step(f"bench-{kind}", bench_argv(run, python, uri, kind, program),
                     min(plan.caps["bench"], max(share - train.seconds, 5)))
        finally:  # also when stopped part-way: the row says how far it got
            for step in run.steps:
                if step.name in (f"train-{kind}", f"bench-{kind}"):
                    key = step.name.split("-")[0]
                    cell.update({key: step.result, f"{key}_status": step.status})
    shard = sorted((Path(run.args.s3_dir) / BUCKET / uri.split("/", 3)[3]).glob("*.tar"))
    decoding = run.step("decode", [python, str(here / "decode.py"), "--shard", str(shard[0]) if shard else "",
                                 "--workers", str(plan.workers), "--batch-size", str(plan.batch_size), "--device",
                                 "cuda" if plan.accelerator == "gpu" else "cpu"], plan.caps["decode"])
    found["decode"] = decoding.result
    if plan.caps["extra"] and "s3io" in kinds and run.remaining() - plan.reserve_s > 60:
        extra = run.step("train-s3io-decode-cpu", train_argv(run, python, uri, "s3io", None, "cpu"),
                         plan.caps["extra"])
        found["train_decode_cpu"] = {"train": extra.result, "train_status": extra.status}


# -- the report ---------------------------------------------------------------------------------


def _epoch(summary: dict[str, Any] | None, number: int, field_name: str) -> Any:
    epochs = (summary or {}).get("epochs") or []
    return epochs[number].get(field_name) if len(epochs) > number else None


def _wait(summary: dict[str, Any] | None, number: int) -> Any:
    waits = (summary or {}).get("data_wait") or []
    return waits[number]["data_wait_fraction"] if len(waits) > number else None


def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else str(value)


def rows(found: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows: the ceiling, training and loader per source, decode; each with its figures or status."""
    ceiling = found.get("ceiling") or {}
    limit = ceiling.get("images_per_s")
    fuse = found.get("fuse") if not found.get("mount_program") else None
    skipped = [{"cell": "train mountpoint", "what": "a FUSE mount", "status": f"not run: FUSE: {fuse}",
                "note": "the mount cannot run on this machine"}] if fuse else []
    table = [{"cell": "ceiling", "what": f"synthetic batches on {ceiling.get('device', '-')}, no I/O",
              "e1": ceiling.get("epoch_images_per_s"), "e2": limit, "status": "ok" if ceiling else "not measured",
              "note": "e1: whole run, e2: after warm-up (the limit used below)"}, *skipped]
    for kind, cell in found.get("sources", {}).items():
        train, bench = cell.get("train"), cell.get("bench")
        e1, e2 = _epoch(train, 0, "epoch_images_per_s"), _epoch(train, 1, "epoch_images_per_s")
        table.append({"cell": f"train {kind}", "what": (f"{cell['program']} mount" if cell.get("program") else kind)
                      + f", decode {(train or {}).get('decode', '-')}", "e1": e1, "e2": e2,
                      "r1": e1 / limit if e1 and limit else None, "r2": e2 / limit if e2 and limit else None,
                      "w1": _wait(train, 0), "w2": _wait(train, 1), "first": _epoch(train, 0, "first_batch_s"),
                      "status": cell["train_status"], "note": (train or {}).get("precision", "")})
        b1, b2 = _epoch(bench, 0, "epoch_images_per_s"), _epoch(bench, 1, "epoch_images_per_s")
        table.append({"cell": f"loader {kind}", "what": f"workers: {(bench or {}).get('num_workers', '-')}, "
                      "decode cpu, no model", "e1": b1, "e2": b2, "r1": b1 / limit if b1 and limit else None,
                      "r2": b2 / limit if b2 and limit else None, "first": _epoch(bench, 0, "first_batch_s"),
                      "status": cell["bench_status"], "note": ""})
    extra = found.get("train_decode_cpu")
    if extra:
        train = extra.get("train")
        e1, e2 = _epoch(train, 0, "epoch_images_per_s"), _epoch(train, 1, "epoch_images_per_s")
        table.append({"cell": "train s3io", "what": "decode cpu (in the workers)", "e1": e1, "e2": e2,
                      "r1": e1 / limit if e1 and limit else None, "r2": e2 / limit if e2 and limit else None,
                      "w1": _wait(train, 0), "w2": _wait(train, 1), "first": _epoch(train, 0, "first_batch_s"),
                      "status": extra["train_status"], "note": "against the row with decode gpu"})
    for cell in (found.get("decode") or {}).get("cells", []):
        table.append({"cell": "decode", "what": cell["what"], "e1": cell.get("images_per_s"), "e2": None,
                      "status": cell.get("status", "ok"), "note": cell.get("note", "")})
    return table


def verdicts(found: dict[str, Any]) -> list[str]:
    """Issue 42's targets, each with its number: whole epoch 2 >= 0.95 x the ceiling and epoch 1 >= 0.9 x, per
    source; where one is missed, what the other cells say about the limit; and which source is first."""
    limit = (found.get("ceiling") or {}).get("images_per_s")
    lines, epoch2 = [], {}
    for kind, cell in found.get("sources", {}).items():
        train, bench = cell.get("train"), cell.get("bench")
        e1, e2 = _epoch(train, 0, "epoch_images_per_s"), _epoch(train, 1, "epoch_images_per_s")
        if not (limit and e1 and e2):
            lines.append(f"{kind}: no training figures to hold against the ceiling ({cell.get('train_status')})")
            continue
        epoch2[kind] = e2
        met = e1 / limit >= 0.9 and e2 / limit >= 0.95
        line = (f"{kind}: epoch 1 {e1 / limit:.2f} x the ceiling (target 0.90), epoch 2 {e2 / limit:.2f} (target "
                f"0.95): {'met' if met else 'not met'}")
        if not met:
            line += (f"; waiting for data {_fmt(_wait(train, 0), 3)} / {_fmt(_wait(train, 1), 3)} of step time; the "
                     f"loader alone, decoding in its workers: {_fmt(_epoch(bench, 1, 'epoch_images_per_s'))} img/s; "
                     f"first batch {_fmt(_epoch(train, 0, 'first_batch_s'), 2)} s (see the decode rows)")
        lines.append(line)
    if epoch2:
        first = max(epoch2, key=lambda kind: epoch2[kind])
        lines.append(f"first in epoch 2: {first}" + ("" if first == "mountpoint" else
                                                       f" ({epoch2[first]:,.0f} img/s; mountpoint "
                                                       f"{_fmt(epoch2.get('mountpoint'))})"))
    return lines


def markdown(found: dict[str, Any], table: list[dict[str, Any]]) -> str:
    facts = found.get("facts") or {}
    plan = found.get("plan") or {}
    head = (f"GPU run: {facts.get('gpu') or 'no GPU'}, torch {facts.get('torch', '?')}, "
            f"torchvision {facts.get('torchvision', '?')}, Python {platform.python_version()}, "
            f"{os.cpu_count()} cores; {plan.get('images')} images of {plan.get('image_size')} px, "
            f"{plan.get('arch')}, batch {plan.get('batch_size')}, {plan.get('precision') or 'default precision'}, "
            f"{plan.get('workers')} loader workers; mount: {found.get('mount_program') or 'none'}")
    lines = [head, "", "| cell | what | epoch 1 img/s | epoch 2 img/s | e1 / ceiling | e2 / ceiling | data wait e1 "
             "| data wait e2 | first batch s | status | note |", "|" + " --- |" * 11]
    for r in table:
        lines.append(f"| {r['cell']} | {r['what']} | {_fmt(r.get('e1'))} | {_fmt(r.get('e2'))} | "
                     f"{_fmt(r.get('r1'), 2)} | {_fmt(r.get('r2'), 2)} | {_fmt(r.get('w1'), 3)} | "
                     f"{_fmt(r.get('w2'), 3)} | {_fmt(r.get('first'), 2)} | {r['status'][:80]} | {r.get('note', '')} |")
    return "\n".join([*lines, "", *verdicts(found)]) + "\n"


def write_report(run: Run, found: dict[str, Any]) -> bool:
    out = Path(run.args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = rows(found)
    text = markdown(found, table)
    elapsed = round(time.time() - run.started, 1)
    ok = all(step.ok or step.probe for step in run.steps)
    report = {"ok": ok, "seconds": elapsed, "budget_s": run.plan.budget_s, "found": found, "table": table,
              "verdicts": verdicts(found),
              "steps": [{"name": s.name, "status": s.status, "seconds": s.seconds} for s in run.steps]}
    (out / "gpu-run.json").write_text(run.scrub(json.dumps(report, indent=1, default=str)) + "\n")
    (out / "gpu-table.md").write_text(text)
    server_log = Path(run.args.work) / "logs" / "rclone.log"
    tail = server_log.read_text(errors="replace")[-200_000:] if server_log.exists() else ""
    log = "".join(run.log_parts) + f"\n===== rclone serve s3 (last 200 kB of its log) =====\n{tail}"
    (out / "gpu-run.log").write_text(run.scrub(log)[-15_000_000:])  # the device tool returns files up to 16 MiB
    print("\n" + text, flush=True)
    print(f"drive: {'every step ran' if ok else 'some steps failed (see the status column)'}; {elapsed} s since "
          f"run.sh started; wrote {', '.join(str(out / name) for name in OUT_FILES)}", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--s3-dir", required=True)
    parser.add_argument("--pack", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--fuse-problem", default="")
    parser.add_argument("--images", type=int, default=None)
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--sources", type=lambda s: [k for k in s.split(",") if k], default=list(SOURCES))
    args = parser.parse_args()
    unknown = [k for k in args.sources if k not in SOURCES]
    if unknown:
        parser.error(f"unknown source kinds {unknown}: choose from {', '.join(SOURCES)}")
    started = float(os.environ.get("MOUNTCTL_GPU_STARTED") or time.time())
    plan = plan_for(args.mode, os.cpu_count() or 1, args.images, args.budget_s)
    secrets = tuple(v for v in (os.environ.get("AWS_SECRET_ACCESS_KEY"), os.environ.get("AWS_ACCESS_KEY_ID")) if v)
    run = Run(args, plan, started, dict(os.environ), secrets)

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    found: dict[str, Any] = {"plan": plan.__dict__, "sources": {}}
    try:
        run_all(run, found)
    except Stopped as exc:
        run.note(f"stopped by {exc}: writing what was measured")
        run.steps.append(Step("stopped", status=f"stopped by {exc}"))
    ok = write_report(run, found)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
