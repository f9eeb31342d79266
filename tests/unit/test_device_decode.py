"""``--decode gpu``: JPEG bytes decoded after the transfer give the CPU path's tensors.

No GPU here: ``decode_batch`` runs on ``device="cpu"`` (TorchCodec's libjpeg-turbo
decode), the same code path a GPU runs with nvJPEG after the bytes were shipped.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from mountctl.errors import InvalidSpec
from mountctl.pytorch.data.datasets.shards import RawSample, batched, decode
from mountctl.pytorch.data.decode.device_decode import decode_batch, encoded, resolve_decode, transfer_encoded_batch
from mountctl.pytorch.data.decode.jpeg import decode_jpegs
from mountctl.pytorch.data.synthetic import sample_jpeg
from mountctl.pytorch.errors import DatasetError


def samples(count: int, stored_size: int) -> list[RawSample]:
    return [RawSample(f"k{i}", i, *sample_jpeg(0, i, stored_size, 1000), shard="s.tar") for i in range(count)]


def cpu_path(raw: list[RawSample], image_size: int) -> torch.Tensor:
    return torch.stack([decode(s, image_size)[0] for s in raw])


def test_bytes_decoded_after_transfer_equal_the_cpu_path_at_the_dataset_size():
    raw = samples(6, 64)
    images = decode_batch([encoded(s.image, s.key, s.shard) for s in raw], 64, "cpu")
    assert images.dtype == torch.uint8 and images.shape == (6, 3, 64, 64)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(images, cpu_path(raw, 64))


def test_resized_images_are_within_one_grey_level_of_the_cpu_path():
    """Pillow's bilinear resize and torchvision's antialiased tensor one round differently by at most 1.

    (Images at least twice the target size differ more: Pillow's ``draft`` then decodes
    them at a reduced DCT scale. ``resnet.py make`` writes images at the dataset size.)
    """
    raw = samples(4, 100)
    images = decode_batch([encoded(s.image, s.key, s.shard) for s in raw], 64, "cpu")
    assert images.shape == (4, 3, 64, 64)
    assert (images.int() - cpu_path(raw, 64).int()).abs().max() <= 1


def test_an_encoded_batch_becomes_the_cpu_batch_on_the_device():
    raw = samples(5, 32)
    on_host = next(batched(((encoded(s.image, s.key, s.shard), s.label, s.index) for s in raw), [5], encoded=True))
    assert "images" not in on_host and all(t.dim() == 1 for t in on_host["jpegs"])
    moved = transfer_encoded_batch({**on_host, "epoch": 0}, 32, torch.device("cpu"))
    expected = next(batched((decode(s, 32) for s in raw), [5]))
    assert torch.equal(moved["images"], expected["images"]) and torch.equal(moved["labels"], expected["labels"])
    assert moved["index"] == expected["index"] and moved["epoch"] == 0 and "jpegs" not in moved


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_decode_gpu_without_cuda_is_a_clear_error_and_auto_decodes_on_the_cpu():
    with pytest.raises(InvalidSpec, match="--decode gpu needs .*CUDA.*use --decode cpu"):
        resolve_decode("gpu", "auto")
    assert resolve_decode("auto", "auto") == resolve_decode("auto", "cpu") == "cpu"


def test_auto_never_decodes_on_the_gpu_when_training_on_the_cpu():
    assert resolve_decode("auto", "cpu") == "cpu" and resolve_decode("cpu", "gpu") == "cpu"


def test_a_non_jpeg_sample_is_refused_by_name():
    with pytest.raises(DatasetError, match=r"sample 'k' in shard s.tar is not a JPEG.*--decode cpu"):
        encoded(b"\x89PNG\r\n", "k", "s.tar")


def test_workers_yield_bytes_and_the_datamodule_hook_makes_the_cpu_batches(tmp_path):
    """The whole --decode gpu path on a local shard: ShardDataset with decode="gpu", then the
    DataModule's transfer hook (to the CPU here), against ShardDataset with decode="cpu"."""
    from benchmarks.harness.limits import LocalDiskSource
    from mountctl.pytorch.data.datasets.datamodule import ShardDataModule
    from mountctl.pytorch.data.datasets.dataset import ShardDataset
    from mountctl.pytorch.data.index.manifest import Manifest, ShardInfo
    from mountctl.pytorch.data.synthetic import MakeConfig, build_shard

    data = build_shard(MakeConfig(uri="s3://bucket/p/", num_images=12, image_size=32), 0, 12)
    (tmp_path / "shard-000000.tar").write_bytes(data)
    manifest = Manifest(num_images=12, image_size=32, num_classes=1000, seed=0,
                        shards=(ShardInfo("shard-000000.tar", 12, 0, len(data), "0" * 64),))
    source = LocalDiskSource(str(tmp_path))

    def batches(decode: str) -> list[dict]:
        return list(ShardDataset(manifest, source, batch_size=4, shuffle_buffer=4, decode=decode))

    module = ShardDataModule(manifest, source, batch_size=4, num_workers=0, seed=0, decode="gpu")
    on_device = [module.transfer_batch_to_device(b, torch.device("cpu"), 0) for b in batches("gpu")]
    expected = batches("cpu")
    assert len(on_device) == len(expected) == 3
    for got, want in zip(on_device, expected, strict=True):
        assert torch.equal(got["images"], want["images"]) and torch.equal(got["labels"], want["labels"])
        assert got["index"] == want["index"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_train_refuses_decode_gpu_before_anything_runs():
    from mountctl.pytorch.training.trainer import TrainConfig

    with pytest.raises(InvalidSpec, match="--decode gpu"):
        TrainConfig(uri="s3://bucket/data/", decode="gpu")


def test_the_cpu_path_decodes_jpegs_at_the_dataset_size_to_pillows_exact_pixels():
    """TorchCodec decodes these (``shards.decode``); the reference is Pillow's own decode of the same bytes."""
    for sample in samples(4, 48):
        pillow = torch.from_numpy(np.asarray(Image.open(io.BytesIO(sample.image)).convert("RGB")).copy())
        assert torch.equal(decode(sample, 48)[0], pillow.permute(2, 0, 1))


def test_decoding_raises_no_torchvision_deprecation_warning():
    raw = samples(3, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        decode_batch([encoded(s.image, s.key, s.shard) for s in raw], 32, "cpu")
        for sample in raw:
            decode(sample, 40)
            decode(sample, 32)


def test_the_batch_decode_honours_the_device_argument():
    raw = samples(2, 24)
    for device in ("cpu", torch.device("cpu")):
        images = decode_jpegs([encoded(s.image, s.key, s.shard) for s in raw], device)
        assert [image.device.type for image in images] == ["cpu", "cpu"]
        assert all(image.shape == (3, 24, 24) and image.dtype == torch.uint8 for image in images)


@pytest.mark.parametrize("cut", [0.5, 0.1])
def test_a_truncated_jpeg_is_refused_by_name_on_both_paths(cut):
    good = samples(1, 32)[0]
    bad = RawSample("k7", 7, good.image[:int(len(good.image) * cut)], 0, shard="s.tar")
    with pytest.raises(DatasetError, match=r"sample 'k7' in shard s.tar is not a decodable image"):
        decode(bad, 32)
    with pytest.raises(DatasetError, match=r"a batch of 1 JPEGs did not decode on cpu .*--decode cpu"):
        decode_batch([encoded(bad.image, bad.key, bad.shard)], 32, "cpu")
