"""JPEG bytes to uint8 RGB CHW tensors through TorchCodec, on the CPU or a CUDA device: the one decode call.

torchvision 0.29 deprecates its image decoding in favour of TorchCodec, whose
``decode_jpeg`` runs libjpeg-turbo on the CPU and nvJPEG (a whole batch in
one call) on CUDA.  When this path was chosen it decoded the dataset's own
JPEGs, on one thread, as fast as torchvision's decode and faster than Pillow,
with the same pixels.  BENCHMARKS.md has no decoding section now;
``benchmarks/gpu/decode.py`` measures TorchCodec's rates on a GPU machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch loads on use: the command line imports this package's constants
    import torch

__all__ = ["decode_jpeg", "decode_jpegs", "DECODE_ERRORS", "jpeg_frame"]

# What TorchCodec raises for bytes that are not a decodable JPEG (its C++ ops raise RuntimeError).
DECODE_ERRORS = (RuntimeError, ValueError)


# Start-of-frame markers (baseline, extended, progressive, lossless ...): all 0xC0-0xCF but DHT, JPG and DAC.
_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn and TEM carry no length


def jpeg_frame(data: bytes) -> tuple[int, int, int] | None:
    """(width, height, components) from a JPEG's frame header; None if ``data`` is not a JPEG with one.

    A few byte reads in place of opening the image with Pillow (a tenth of a small image's decode).
    """
    if not data.startswith(b"\xff\xd8"):
        return None
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in _STANDALONE:
            at += 2
            continue
        if marker == 0xD9 or marker == 0xDA:  # end of image, or scan data before any frame header
            return None
        length = int.from_bytes(data[at + 2:at + 4], "big")
        if marker in _SOF_MARKERS:
            if at + 10 > len(data):
                return None
            height = int.from_bytes(data[at + 5:at + 7], "big")
            width = int.from_bytes(data[at + 7:at + 9], "big")
            return width, height, data[at + 9]
        at += 2 + length
    return None


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
