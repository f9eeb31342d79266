#!/usr/bin/env python3
"""JPEG decode rate, one thread: TorchCodec vs torchvision, Pillow and mountctl's CPU path, alternating, medians.

    flock -w 1500 /tmp/mountctl-heavy.lock .venv/bin/python scripts/decode_ab.py [--sizes 224,64 --count 500 --rounds 5]

The images are the dataset's own synthetic JPEGs (``synthetic.sample_jpeg``), decoded to uint8 RGB
CHW tensors at their stored size.  "mountctl cpu path" is ``shards.decode`` as the DataLoader workers
run it (Pillow reads the header, TorchCodec decodes).  The numbers behind the decode choice in
BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from mountctl.pytorch.data import shards
from mountctl.pytorch.data.synthetic import sample_jpeg


def decoders(size: int) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    import numpy as np
    from PIL import Image
    from torchcodec.decoders import decode_jpeg as codec_decode
    from torchvision.io import ImageReadMode
    from torchvision.io import decode_jpeg as vision_decode

    def pillow(data: torch.Tensor) -> torch.Tensor:
        image = Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB")
        return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)

    def cpu_path(data: torch.Tensor) -> torch.Tensor:
        return shards.decode(shards.RawSample("k", 0, data.numpy().tobytes(), 0), size)[0]

    return {"torchcodec": lambda data: codec_decode(data, mode="RGB"),
            "torchvision": lambda data: vision_decode(data, mode=ImageReadMode.RGB),
            "pillow": pillow, "mountctl cpu path": cpu_path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="224,64")
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # torchvision's: what is being measured
    for size in (int(s) for s in args.sizes.split(",")):
        ways = decoders(size)
        jpegs = [torch.frombuffer(bytearray(sample_jpeg(0, i, size, 1000)[0]), dtype=torch.uint8)
                 for i in range(args.count)]
        reference = [ways["torchvision"](j) for j in jpegs[:20]]
        for name, decode in ways.items():  # same pixels, or the race is not fair
            assert all(torch.equal(decode(j), r) for j, r in zip(jpegs, reference, strict=False)), name
        rates: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, decode in ways.items():
                start = time.perf_counter()
                for data in jpegs:
                    decode(data)
                rates[name].append(len(jpegs) / (time.perf_counter() - start))
        kb = sum(len(j) for j in jpegs) / len(jpegs) / 1024
        for name, values in rates.items():
            runs = ", ".join(f"{v:,.0f}" for v in values)
            print(f"{size} px ({kb:.1f} KB avg), {name}: median {statistics.median(values):,.0f} decodes/s "
                  f"[{runs}]")


if __name__ == "__main__":
    main()
