"""s3fs in DataLoader workers ends cleanly: no aiobotocore "Task exception was never retrieved" at exit.

Real SeaweedFS; the loaders run in a child Python so that what its workers print while exiting is seen.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from torch_support import REPO, make_tiny_dataset

SCRIPT = textwrap.dedent("""
    import sys
    from torch.utils.data import DataLoader
    from mountctl import resolve
    from mountctl.pytorch.data.datasets.dataset import EpochLoader, ShardDataset
    from mountctl.pytorch.data.index.manifest import load_manifest
    from mountctl.pytorch.data.datasets.mapstyle import MapSampleDataset, collate
    from mountctl.pytorch.data.sources import open_source

    uri = sys.argv[1]
    settings = resolve()
    manifest = load_manifest(settings, uri)
    with open_source("fsspec", uri, settings) as source:
        streamed = [i for b in EpochLoader(ShardDataset(manifest, source, batch_size=4), epoch_fn=lambda: 0,
                                           num_workers=2, timeout=60) for i in b["index"]]
        dataset = MapSampleDataset.from_manifest(manifest, source, uri, readahead_threads=2)
        mapped = [i for b in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=collate, timeout=60)
                  for i in b["index"]]
    print(len(streamed), len(set(streamed)), len(mapped), len(set(mapped)))
""")


def test_fsspec_workers_close_their_s3_client_before_they_exit(s3_env, bucket):
    uri = f"s3://{bucket}/data/"
    make_tiny_dataset(uri, num_images=24, shard_size="8KB")
    done = subprocess.run([sys.executable, "-c", SCRIPT, uri], capture_output=True, text=True, timeout=120, cwd=REPO,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["24", "24", "24", "24"]
    for sign in ("Task exception was never retrieved", "attached to a different loop", "Unclosed", "Traceback"):
        assert sign not in done.stderr, done.stderr[-3000:]
