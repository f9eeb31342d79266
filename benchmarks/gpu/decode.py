"""JPEG decode on the CPU and on the GPU, and the facts of the machine that the run's table needs.

``--facts``: versions (Python, torch, torchvision, Lightning, TorchCodec), the GPU, and whether TorchCodec decodes
a JPEG here, on the CPU and on CUDA: every JPEG the run trains on is decoded by TorchCodec
(``mountctl/pytorch/data/decode/jpeg.py``), so a TorchCodec that does not load with this machine's torch is said first,
in one line, before any training waits for it.

``--shard FILE``: decode rates on the JPEGs of one shard of the run's dataset (read from the S3 server's own
directory: decode alone, no I/O): TorchCodec on one CPU core, on ``--workers`` processes at once (what the loader
workers have), and in batches on CUDA with TorchCodec and with torchvision (both nvJPEG).  One JSON line.
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import platform
import tarfile
import time
from pathlib import Path
from typing import Any

MIN_DECODES = 1024  # per measurement: the shard's JPEGs repeated up to this many


def _pinned_torch() -> str | None:
    here = Path(__file__).resolve()
    requirements = next((p / "requirements.txt" for p in here.parents if (p / "requirements.txt").exists()), None)
    for line in requirements.read_text().splitlines() if requirements else []:
        if line.startswith("torch=="):
            return line.split("==", 1)[1].split("#")[0].strip()
    return None


def _sample_jpeg(size: int = 64) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), (200, 30, 90)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def facts(device: str) -> dict[str, Any]:
    import lightning
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    found: dict[str, Any] = {
        "python": platform.python_version(), "torch": torch.__version__, "torchvision": torchvision.__version__,
        "lightning": lightning.__version__, "cuda": cuda, "cores": multiprocessing.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()), "pinned_torch": _pinned_torch()}
    problems = []
    if found["pinned_torch"] and not torch.__version__.startswith(found["pinned_torch"]):
        problems.append(f"torch {torch.__version__} here, {found['pinned_torch']} pinned in requirements.txt: the run "
                        "uses this machine's torch, torchvision and Lightning")
    if device == "cuda" and not cuda:
        problems.append("torch sees no CUDA GPU here (torch.cuda.is_available() is False)")
    try:
        import torchcodec
        from torchcodec.decoders import decode_jpeg

        found["torchcodec"] = torchcodec.__version__
        jpeg = torch.frombuffer(bytearray(_sample_jpeg()), dtype=torch.uint8)
        found["cpu_decode_ok"] = tuple(decode_jpeg(jpeg, mode="RGB").shape) == (3, 64, 64)
    except Exception as exc:  # noqa: BLE001  any failure to load or decode is the fact to report
        found["torchcodec"], found["cpu_decode_ok"] = None, False
        problems.append(f"TorchCodec does not decode a JPEG with torch {torch.__version__} here ({type(exc).__name__}: "
                        f"{exc}); every JPEG of the run is decoded by it (mountctl/pytorch/data/decode/jpeg.py), so "
                        "training and the loader will fail: pack a TorchCodec built for this torch")
    found["gpu_decode_ok"] = False
    if cuda and found["cpu_decode_ok"]:
        try:
            from torchcodec.decoders import decode_jpeg

            images = decode_jpeg([jpeg, jpeg], mode="RGB", device="cuda")
            found["gpu_decode_ok"] = all(image.is_cuda and tuple(image.shape) == (3, 64, 64) for image in images)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"TorchCodec cannot decode on CUDA here ({type(exc).__name__}: {exc}): training decodes "
                            "in the loader workers instead (--decode cpu)")
    found["problems"] = problems
    return found


def _jpegs(shard: Path) -> list[bytes]:
    with tarfile.open(shard) as tar:
        return [tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isfile() and m.name.lower().endswith((".jpg", ".jpeg"))]


def _repeated(jpegs: list[bytes]) -> list[bytes]:
    return (jpegs * (MIN_DECODES // max(1, len(jpegs)) + 1))[:max(MIN_DECODES, len(jpegs))]


def _cpu_worker(jpegs: list[bytes], ready: Any, go: Any, done: Any) -> None:
    import torch
    from torchcodec.decoders import decode_jpeg

    torch.set_num_threads(1)
    tensors = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    for tensor in tensors[:8]:  # load the library and warm the decoder before the clock starts
        decode_jpeg(tensor, mode="RGB")
    ready.release()
    go.wait()
    for tensor in tensors:
        decode_jpeg(tensor, mode="RGB")
    done.put(len(tensors))


def cpu_rate(jpegs: list[bytes], processes: int) -> float:
    """Images/s of ``processes`` processes each decoding every JPEG once, all started together (fork)."""
    context = multiprocessing.get_context("fork")
    ready, go, done = context.Semaphore(0), context.Event(), context.Queue()
    workers = [context.Process(target=_cpu_worker, args=(jpegs, ready, go, done)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    for _ in workers:
        if not ready.acquire(timeout=60):
            raise TimeoutError("a decode process did not start within 60 s")
    started = time.perf_counter()
    go.set()
    decoded = sum(done.get(timeout=120) for _ in workers)
    seconds = time.perf_counter() - started
    for worker in workers:
        worker.join(timeout=10)
    return decoded / seconds


def gpu_rate(jpegs: list[bytes], batch_size: int, library: str) -> float:
    """Images/s of batched nvJPEG decode on CUDA, the host bytes as the loader hands them over (pinned)."""
    import torch

    if library == "torchcodec":
        from torchcodec.decoders import decode_jpeg

        def decode(batch: list[torch.Tensor]) -> Any:
            return decode_jpeg(batch, mode="RGB", device="cuda")
    else:
        import warnings

        from torchvision.io import ImageReadMode
        from torchvision.io import decode_jpeg as tv_decode_jpeg

        warnings.filterwarnings("ignore", category=UserWarning)

        def decode(batch: list[torch.Tensor]) -> Any:
            return tv_decode_jpeg(batch, mode=ImageReadMode.RGB, device="cuda")
    tensors = [torch.frombuffer(bytearray(j), dtype=torch.uint8).pin_memory() for j in jpegs]
    batches = [tensors[i:i + batch_size] for i in range(0, len(tensors), batch_size)]
    for batch in batches[:2]:
        decode(batch)
    torch.cuda.synchronize()
    started = time.perf_counter()
    for batch in batches:
        decode(batch)
    torch.cuda.synchronize()
    return len(tensors) / (time.perf_counter() - started)


def bench(shard: Path, workers: int, batch_size: int, device: str) -> dict[str, Any]:
    jpegs = _repeated(_jpegs(shard))
    cells: list[dict[str, Any]] = []

    def measure(what: str, how: Any, note: str = "") -> None:
        try:
            cells.append({"what": what, "images_per_s": round(how(), 1), "status": "ok", "note": note})
        except Exception as exc:  # noqa: BLE001  one failed cell is a row that says why
            cells.append({"what": what, "images_per_s": None, "status": f"failed: {type(exc).__name__}: {exc}"[:300],
                          "note": note})

    measure("cpu, TorchCodec, 1 process", lambda: cpu_rate(jpegs, 1), "libjpeg-turbo")
    if workers > 1:
        measure(f"cpu, TorchCodec, {workers} processes", lambda: cpu_rate(jpegs, workers), "as many as loader workers")
    if device == "cuda":
        for library in ("torchcodec", "torchvision"):
            measure(f"gpu, {library}, batch {batch_size}", lambda library=library: gpu_rate(jpegs, batch_size, library),
                    "nvJPEG, pinned host bytes in")
    return {"shard": shard.name, "jpegs": len(jpegs), "jpeg_kb": round(sum(map(len, jpegs)) / len(jpegs) / 1e3, 1),
            "cells": cells}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", action="store_true", help="versions, the GPU, whether TorchCodec decodes here")
    parser.add_argument("--shard", default=None, help="a tar shard of the run's dataset on local disk")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args()
    if args.facts:
        print(json.dumps(facts(args.device)), flush=True)
        return 0
    if not args.shard or not Path(args.shard).is_file():
        parser.error(f"--shard {args.shard!r} is not a file: give a tar shard of the dataset")
    print(json.dumps(bench(Path(args.shard), args.workers, args.batch_size, args.device)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
