#!/usr/bin/env python3
"""32-true vs bf16-mixed on this CPU: ResNet-50 train steps on random tensors, alternating, medians.

    flock /tmp/mountctl-bench.lock python scripts/precision_ab.py [--size 112 --batch 16 --steps 5 --rounds 4]

bf16-mixed is ``torch.autocast("cpu", torch.bfloat16)``, what Lightning's bf16-mixed does.
The numbers behind the default precision rule in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in (("size", 112), ("batch", 16), ("steps", 5), ("rounds", 4)):
        parser.add_argument(f"--{name}", type=int, default=default)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.resnet50(num_classes=10).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(args.batch, 3, args.size, args.size).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (args.batch,))

    def rate(precision: str) -> float:
        def step() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16-mixed" else contextlib.nullcontext():
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        step()  # warm-up
        started = time.perf_counter()
        for _ in range(args.steps):
            step()
        return args.batch * args.steps / (time.perf_counter() - started)

    rates: dict[str, list[float]] = {"32-true": [], "bf16-mixed": []}
    for round_ in range(args.rounds):
        for precision in (("32-true", "bf16-mixed") if round_ % 2 == 0 else ("bf16-mixed", "32-true")):
            rates[precision].append(round(rate(precision), 2))
    print({p: v for p, v in rates.items()})
    print("medians img/s", {p: round(statistics.median(v), 2) for p, v in rates.items()})


if __name__ == "__main__":
    main()
