"""JPEG bytes to uint8 RGB CHW tensors through TorchCodec, on the CPU or a CUDA device: the one decode call.

torchvision 0.29 deprecates its image decoding in favour of TorchCodec, whose
``decode_jpeg`` runs libjpeg-turbo on the CPU and nvJPEG (a whole batch in
one call) on CUDA.  Measured on the dataset's own JPEGs, one thread, it
decodes as fast as torchvision's and 1.3-2x as fast as Pillow, with the same
pixels (BENCHMARKS.md, "JPEG decoding: TorchCodec vs torchvision").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads on use: the command line imports this package's constants
    import torch

__all__ = ["decode_jpeg", "decode_jpegs", "DECODE_ERRORS"]

# What TorchCodec raises for bytes that are not a decodable JPEG (its C++ ops raise RuntimeError).
DECODE_ERRORS = (RuntimeError, ValueError)


def decode_jpeg(data: bytes | torch.Tensor) -> torch.Tensor:
    """One JPEG (bytes or a 1-D uint8 tensor) as a uint8 RGB CHW tensor on the CPU."""
    from torchcodec.decoders import decode_jpeg as codec_decode_jpeg

    image = codec_decode_jpeg(data, mode="RGB")
    assert not isinstance(image, list)  # one source in, one image out
    return image


def decode_jpegs(jpegs: Sequence[torch.Tensor], device: torch.device | str) -> list[torch.Tensor]:
    """A batch of JPEGs (1-D uint8 tensors in host memory) as uint8 RGB CHW tensors on ``device``.

    On CUDA the batch goes to nvJPEG in one call (TorchCodec reads the bytes from
    host memory, pinned or not); on the CPU each image is decoded in turn.
    """
    from torchcodec.decoders import decode_jpeg as codec_decode_jpeg

    images = codec_decode_jpeg(list(jpegs), mode="RGB", device=device)
    assert isinstance(images, list)  # a batch in, a batch out
    return images
