"""The synthetic-data ceiling: ResNet training on batches that already sit on the device, so no I/O and no decode.

What a source's training rate is held against: the same model, optimizer, precision and Lightning Trainer
settings as ``resnet.py train`` (a torchvision ResNet from uint8 images normalised on the device, SGD with
momentum 0.9, weight decay 1e-4 and lr 0.1 x batch / 256, cross-entropy; channels_last on CUDA, as training with
``--decode gpu`` runs), fed one fixed batch again and again: the model is the training package's own
(``mountctl.pytorch.training.model``), so the ceiling and the sources train the same thing.  Prints one JSON line.

    python ceiling.py --arch resnet50 --batch-size 256 --image-size 224 --steps 40 --accelerator gpu --precision bf16-mixed
"""

from __future__ import annotations

import argparse
import json
import time

import lightning
import torch

from mountctl.pytorch.training.model import ResNetClassifier


class Clock(lightning.Callback):
    """Marks after the warm-up steps and at the end, each after the device has finished its queued work."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps
        self.marks: dict[str, float] = {}

    def _now(self, module: lightning.LightningModule) -> float:
        if module.device.type == "cuda":
            torch.cuda.synchronize(module.device)
        return time.perf_counter()

    def on_train_epoch_start(self, trainer: lightning.Trainer, module: lightning.LightningModule) -> None:
        self.marks["start"] = self._now(module)

    def on_train_batch_end(self, trainer: lightning.Trainer, module: lightning.LightningModule, outputs: object,
                           batch: object, batch_idx: int) -> None:
        if batch_idx + 1 == self.warmup_steps:
            self.marks["warm"] = self._now(module)

    def on_train_epoch_end(self, trainer: lightning.Trainer, module: lightning.LightningModule) -> None:
        self.marks["end"] = self._now(module)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)  # what `resnet.py make` writes by default
    parser.add_argument("--steps", type=int, default=40, help="measured steps, after the warm-up")
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--accelerator", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--precision", default=None, help="default: bf16-mixed on a GPU, 32-true on a CPU")
    args = parser.parse_args()
    cuda = args.accelerator == "gpu"
    device = torch.device("cuda" if cuda else "cpu")
    precision = args.precision or ("bf16-mixed" if cuda else "32-true")
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (args.batch_size, 3, args.image_size, args.image_size), dtype=torch.uint8,
                           generator=generator)
    if cuda:
        images = images.contiguous(memory_format=torch.channels_last)
    batch = {"images": images.to(device), "labels": torch.randint(0, args.num_classes, (args.batch_size,),
                                                                  generator=generator).to(device)}
    total = args.warmup_steps + args.steps
    loader = torch.utils.data.DataLoader([batch] * total, batch_size=None)
    model = ResNetClassifier(args.num_classes, lr=0.1 * args.batch_size / 256, arch=args.arch)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    clock = Clock(args.warmup_steps)
    trainer = lightning.Trainer(accelerator=args.accelerator, devices=1, precision=precision, max_epochs=1,
                                callbacks=[clock], logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(model, train_dataloaders=loader)
    whole = clock.marks["end"] - clock.marks["start"]
    steady = clock.marks["end"] - clock.marks["warm"]
    print(json.dumps({
        "device": device.type, "gpu": torch.cuda.get_device_name(device) if cuda else None,
        "arch": args.arch, "batch_size": args.batch_size, "image_size": args.image_size, "precision": precision,
        "channels_last": cuda, "steps": args.steps, "warmup_steps": args.warmup_steps,
        "epoch_images_per_s": round(total * args.batch_size / whole, 2),  # warm-up included
        "images_per_s": round(args.steps * args.batch_size / steady, 2),  # after warm-up: the ceiling
        "torch": torch.__version__}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
