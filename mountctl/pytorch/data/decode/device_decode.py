"""JPEG batches decoded on the accelerator (``--decode gpu``): workers ship bytes, the device decodes.

With ``--decode gpu`` the DataLoader workers only parse the tar stream and
yield each sample's JPEG bytes (1-D uint8 tensors, pinned by the DataLoader)
with its label; ``decode_batch`` turns a batch of them into the same uint8
NCHW images as ``shards.decode`` (the CPU path), on the device, in
channels_last.  nvJPEG reads the bytes from host memory, so the bytes are
never copied to the device by hand; labels move with non-blocking copies.
Both decodes are TorchCodec's (``jpeg.py``): nvJPEG on CUDA, libjpeg-turbo
on ``device="cpu"``, which is how the tests check this path against the CPU
path on a machine without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mountctl import InvalidSpec
from mountctl.pytorch.errors import DatasetError

if TYPE_CHECKING:  # torch loads on use: the command line imports DECODE_CHOICES
    import torch

__all__ = ["DECODE_CHOICES", "resolve_decode", "encoded", "decode_batch", "transfer_encoded_batch"]

DECODE_CHOICES = ("auto", "cpu", "gpu")
_JPEG_MAGIC = b"\xff\xd8"


def resolve_decode(choice: str, accelerator: str = "auto") -> str:
    """``cpu`` or ``gpu``: auto decodes on the GPU when training runs on CUDA; gpu without CUDA fails here."""
    if choice not in DECODE_CHOICES:
        raise InvalidSpec(f"unknown --decode {choice!r}: choose one of {', '.join(DECODE_CHOICES)}")
    if choice == "cpu" or accelerator not in ("auto", "gpu", "cuda"):
        on_cuda = False  # known without torch, whose import (2 s of CPU) a bad dataset need not wait for
    else:
        import torch

        on_cuda = torch.cuda.is_available()
    if choice == "gpu" and not on_cuda:
        raise InvalidSpec("--decode gpu needs training on a CUDA GPU (--accelerator gpu or auto on a machine "
                          "with one); here there is none: use --decode cpu (or auto)")
    if choice == "auto":
        return "gpu" if on_cuda else "cpu"
    return choice


def encoded(image: bytes, key: str, shard: str) -> torch.Tensor:
    """A sample's JPEG bytes as a 1-D uint8 tensor (a worker's whole share of the work on this path)."""
    if not image.startswith(_JPEG_MAGIC):
        raise DatasetError(f"sample {key!r} in shard {shard} is not a JPEG; --decode gpu decodes JPEG only: "
                           "use --decode cpu for PNG or WebP images")
    import torch

    return torch.frombuffer(bytearray(image), dtype=torch.uint8)


def _fit(image: torch.Tensor, size: int) -> torch.Tensor:
    """The CPU path's geometry: resize the shorter side to ``size`` (bilinear, antialiased), centre-crop."""
    import torchvision.transforms.v2.functional as F

    height, width = image.shape[-2:]
    if (height, width) == (size, size):
        return image
    scale = size / min(height, width)
    new_w, new_h = max(size, round(width * scale)), max(size, round(height * scale))
    image = F.resize(image, [new_h, new_w], interpolation=F.InterpolationMode.BILINEAR, antialias=True)
    top, left = (new_h - size) // 2, (new_w - size) // 2
    return image[..., top:top + size, left:left + size]


def decode_batch(jpegs: Sequence[torch.Tensor], image_size: int, device: torch.device | str) -> torch.Tensor:
    """uint8 NCHW images of ``image_size`` on ``device`` (channels_last), as ``shards.decode`` makes them.

    Images already ``image_size`` square (what ``resnet.py make`` writes) come out
    equal to the CPU path's; others are resized on the device with an antialiased
    bilinear filter, within one grey level of Pillow's (see the tests).
    """
    import torch

    from mountctl.pytorch.data.decode.jpeg import DECODE_ERRORS, decode_jpegs

    device = torch.device(device)
    try:
        images = decode_jpegs(jpegs, device)
    except DECODE_ERRORS as exc:
        raise DatasetError(f"a batch of {len(jpegs)} JPEGs did not decode on {device} ({exc}); "
                           "fix the shard or use --decode cpu") from None
    fitted = [_fit(image, image_size) for image in images]
    return torch.stack(fitted).contiguous(memory_format=torch.channels_last)


def transfer_encoded_batch(batch: dict[str, Any], image_size: int, device: torch.device) -> dict[str, Any]:
    """A batch of JPEG bytes made into a batch of images on ``device``; the labels follow, non-blocking."""
    images = decode_batch(batch["jpegs"], image_size, device)
    rest = {k: v for k, v in batch.items() if k != "jpegs"}
    return {**rest, "images": images, "labels": batch["labels"].to(device, non_blocking=True)}
