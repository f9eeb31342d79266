"""``jpeg.py``: the frame header read without Pillow agrees with Pillow, and TorchCodec decodes like it."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from mountctl.pytorch.data.decode.jpeg import decode_jpeg, jpeg_frame
from mountctl.pytorch.data.synthetic import sample_jpeg

COMPONENTS = {"RGB": 3, "L": 1, "CMYK": 4}


def encoded(mode: str, size: tuple[int, int], fmt: str = "JPEG", **options) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color=None).save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize("mode,size,options", [
    ("RGB", (224, 224), {}), ("RGB", (500, 375), {}), ("L", (31, 17), {}), ("CMYK", (40, 40), {}),
    ("RGB", (64, 48), {"progressive": True}), ("RGB", (64, 64), {"exif": Image.Exif().tobytes()}),
    ("RGB", (80, 80), {"icc_profile": b"\0" * 3000}),
])
def test_the_frame_header_says_what_pillow_says(mode, size, options):
    data = encoded(mode, size, **options)
    opened = Image.open(io.BytesIO(data))
    assert jpeg_frame(data) == (*opened.size, COMPONENTS[opened.mode])


def test_what_is_not_a_jpeg_with_a_frame_header_has_none():
    assert jpeg_frame(encoded("RGB", (8, 8), "PNG")) is None
    assert jpeg_frame(b"") is None and jpeg_frame(b"\xff\xd8") is None
    whole = sample_jpeg(0, 0, 32, 10)[0]
    start = whole.index(b"\xff\xc0")
    assert jpeg_frame(whole[:start + 6]) is None  # cut inside the frame header
    assert jpeg_frame(whole[:start]) is None


def test_torchcodec_decodes_the_datasets_jpegs_to_pillows_pixels():
    import numpy as np
    import torch

    for index in range(3):
        data = sample_jpeg(1, index, 56, 10)[0]
        pillow = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).copy()).permute(2, 0, 1)
        assert torch.equal(decode_jpeg(data), pillow)
