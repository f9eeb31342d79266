"""A URI given on the command line, or a small example dataset on the embedded local S3 when none is.

``resnet.py bench`` and ``demo`` run without a URI on the embedded local S3
(``mountctl.uri_or_embedded``); the examples do the same through ``example_uri``,
which also writes the few images or shards an example reads there (once: a
re-run finds them), so ``python examples/NAME.py`` works with nothing set up.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence

from mountctl import uri_or_embedded

__all__ = ["example_uri", "EXAMPLE_BUCKET", "write_unless_present", "run_with_uri"]

EXAMPLE_BUCKET = "mountctl"
_DATA = {  # what each kind of example reads: where it lives under the example bucket, how it is made
    "files": ("examples/files/", "files"),  # ImageFolder classes under train/
    "shards": ("examples/shards/", "shards"),
    "none": ("examples/checkpoints/", None),  # examples that write (checkpoints)
}


@contextlib.contextmanager
def example_uri(uri: str | None, data: str = "none") -> Iterator[str]:
    """Yield ``uri``; without one, the example's place on the embedded local S3 (started if need be).

    ``data``: ``files`` (yields the ImageFolder root, ``.../train/``), ``shards`` or ``none``.
    """
    where, layout = _DATA[data]
    with uri_or_embedded(uri, f"s3://{EXAMPLE_BUCKET}/{where}") as chosen:
        if uri is None and layout is not None:
            from mountctl.pytorch.data.synthetic import MakeConfig, make_dataset

            make_dataset(MakeConfig(uri=chosen, num_images=64, image_size=32, num_classes=4, shard_size=16_000,
                                    jobs=1, layout=layout), progress=False)
            chosen += "train/" if layout == "files" else ""
        yield chosen


def write_unless_present(uri: str, present: Callable[[str], bool], write: Callable[[str], None]) -> None:
    """``write(uri)`` unless a key in the first page under ``uri`` is ``present``: the own-data examples fill an
    empty prefix with a user's kind of data, and leave a prefix that already holds it alone."""
    from mountctl import parse_s3_uri, resolve, s3

    location = parse_s3_uri(uri)
    listed = s3.client(resolve()).list_objects_v2(Bucket=location.bucket, Prefix=location.prefix)
    if not any(present(item["Key"]) for item in listed.get("Contents", [])):
        write(uri)


def run_with_uri(main: Callable[[str], None], where: str, usage: str | None, argv: Sequence[str] = ()) -> None:
    """An own-data example's command line: ``main(URI)`` with the one optional URI, else with its place ``where``
    under the example bucket on the embedded local S3 (started if need be); ``usage`` for anything more."""
    args = list(argv or sys.argv[1:])
    if len(args) > 1:
        sys.exit(usage)
    with uri_or_embedded(args[0] if args else None, f"s3://{EXAMPLE_BUCKET}/{where}") as chosen:
        main(chosen)
