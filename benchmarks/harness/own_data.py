"""The bench on data the user brings: their indexed dataset stands in for the synthetic ones ``make`` writes.

``bench s3://own/imagenet/`` (an index beside the data) or ``bench s3://own/imagenet/ --index PATH`` runs
the limits, loader, bytes and peer cells on that one dataset, every sample checked as on ``make``'s data.
The cells that need a dataset written for them (training's, the files layout's) or write under the bench
prefix (checkpoints) are left out: a user's prefix is read-only to us.  Images of any size are decoded to the
sweep's ``--image-size``, and a dataset that changed since it was indexed is refused before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from botocore.exceptions import ClientError

from benchmarks.harness.config import SweepConfig
from mountctl import S3Settings, parse_s3_uri
from mountctl.pytorch.data.index.location import IndexLocation
from mountctl.pytorch.data.index.manifest import MANIFEST_NAME, Manifest, index_hint, load_dataset_description
from mountctl.pytorch.errors import DatasetError, NoShards
from mountctl.s3 import is_not_found, short_client

__all__ = ["OwnDataset", "find_own_dataset", "own_data_config", "LEFT_OUT"]

LEFT_OUT = "training, map-style, standard-loader and checkpoint cells (they need data `make` writes under a writable bench prefix)"


@dataclass(frozen=True)
class OwnDataset:
    """Where the sweep takes a ``DatasetSpec``: the dataset's label, shard size and URI (its own, not the base's)."""

    data_uri: str
    label: str
    shard_size: str = "as stored"

    def uri(self, base: str) -> str:
        return self.data_uri


def _described(settings: S3Settings, uri: str) -> bool:
    """An index or make's manifest sits directly under ``uri``: it names one dataset, not a bench prefix."""
    prefix = parse_s3_uri(uri)
    return any(place.read(settings) is not None for place in
               (IndexLocation(prefix, prefix.prefix + MANIFEST_NAME), IndexLocation.beside(prefix)))


def _shards_directly_under(settings: S3Settings, uri: str) -> int:
    """``.tar`` objects directly under ``uri`` (one page of a LIST): a bench prefix holds none, only datasets."""
    prefix = parse_s3_uri(uri)
    try:
        page = short_client(settings).list_objects_v2(Bucket=prefix.bucket, Prefix=prefix.prefix, Delimiter="/")
    except ClientError as exc:
        if is_not_found(exc):  # no bucket yet: a bench prefix that `make` will create
            return 0
        raise
    return sum(1 for item in page.get("Contents", []) if item["Key"].endswith(".tar"))


def find_own_dataset(config: SweepConfig, settings: S3Settings) -> tuple[OwnDataset, Manifest] | None:
    """The dataset at ``config.uri`` when it is one (an index there, or ``--index``); None for a bench prefix.

    Shards with no index are refused: treated as a bench prefix, ``make`` would write its datasets into them.
    """
    if config.index is None and not _described(settings, config.uri):
        shards = _shards_directly_under(settings, config.uri)
        if shards:
            raise NoShards(f"{config.uri} holds {shards} .tar shards but no index, so the bench cannot account for "
                           f"their samples (and writes nothing among them); {index_hint(config.uri)}, then bench "
                           "again (with --index PATH where the index went elsewhere)")
        return None
    loaded = load_dataset_description(settings, config.uri, config.index)
    loaded.check_present(settings)  # a shard replaced, removed or added since indexing: refused in one line
    if loaded.manifest.layout == "files":
        raise DatasetError(f"{loaded.uri} is a class tree (one object per image): the bench reads shards; train on "
                           f"it map-style with `python resnet.py train {loaded.uri}`, or bench WebDataset shards")
    return OwnDataset(loaded.uri, parse_s3_uri(loaded.uri).name), replace(loaded.manifest, image_size=config.image_size)


def own_data_config(config: SweepConfig) -> SweepConfig:
    """The sweep without the cells that need ``make``'s datasets or write under the bench prefix."""
    return replace(config, train=False, map_cells=False, checkpoints=False, standard_cells=False)
