"""MosaicML Streaming through the far store: each DataLoader worker on its own connections, every byte right, no stall.

streaming-community 0.14 makes its boto3 client when it reads index.json in the process that
opens the dataset; forked DataLoader workers inherited that client and its keep-alive
connection, so two workers wrote into one TCP connection and read each other's responses.
Through the far proxy a Streaming cell of ``resnet.py bench`` then waited 60 s (botocore's read
timeout) before its first batch, or cached a shard whose samples were garbage.  Real
components throughout: SeaweedFS, the far proxy (nginx) logging every request with its client
connection, the real library, and the bench's own peer cell (a child process, 2 workers).
"""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

from benchmarks.harness.peer_data import MDS_COLUMNS, SampleChecksum, peer_uri
from benchmarks.harness.peers import peer_epochs
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, find_nginx
from mountctl.s3 import client as s3_client

from conftest import make_bucket, missing, remove_bucket

SAMPLES = 24
SAMPLE_BYTES = 1 << 20
SHARD_BYTES = 10 << 20  # over s3transfer's 8 MB threshold: each shard is fetched as two ranged GETs, as in the bench
# A stall of botocore's read timeout (60 s) must show; a loaded 2-core machine reads these 24 MB in seconds.
EPOCH_BOUND_S = 30.0


@pytest.fixture(scope="module")
def far_mds(local_s3, tmp_path_factory):
    """An MDS copy of 24 one-MiB samples in 3 shards on SeaweedFS, and a far proxy before it that logs requests.

    Yields (settings through the proxy, dataset URI, peer.json-like marker, the proxy).
    """
    if find_nginx() is None or not os.path.exists("/usr/lib/nginx/modules/ngx_http_lua_module.so"):
        missing("nginx with its Lua module is not installed (apt-get install nginx-light libnginx-mod-http-lua)")
    from streaming import MDSWriter

    work = tmp_path_factory.mktemp("peer-stall")
    direct = local_s3.settings(direct=True)
    s3 = s3_client(direct)
    bucket = make_bucket(s3, f"stall-{uuid.uuid4().hex[:8]}")
    uri = f"s3://{bucket}/ds/"
    checksum = SampleChecksum()
    with MDSWriter(out=str(work / "mds"), columns=MDS_COLUMNS, size_limit=SHARD_BYTES, compression=None) as writer:
        for index in range(SAMPLES):
            sample = {"index": index, "cls": index % 5, "jpg": os.urandom(SAMPLE_BYTES)}
            checksum.add(sample["index"], sample["cls"], sample["jpg"])
            writer.write(sample)
    prefix = peer_uri(uri, "streaming").removeprefix(f"s3://{bucket}/")
    for name in sorted(os.listdir(work / "mds")):
        s3.upload_file(str(work / "mds" / name), bucket, prefix + name)
    marker = {"num_images": SAMPLES, "checksum": checksum.value}
    proxy = FarProxy(direct.endpoint_url or "", str(work / "proxy"), FarProfile(), log_requests=True)
    try:
        endpoint = proxy.start()
        yield dataclasses.replace(direct, endpoint_url=endpoint), uri, marker, proxy
    finally:
        proxy.stop()
        remove_bucket(s3, bucket)


def requests_by_connection(proxy: FarProxy) -> dict[str, list[str]]:
    """The URIs the proxy served, grouped by client connection (nginx's ``$connection``)."""
    grouped: dict[str, list[str]] = {}
    with open(proxy.requests_path) as f:
        for line in f:
            method, uri, _status, _sent, connection = line.split()
            grouped.setdefault(connection, []).append(f"{method} {uri}")
    return grouped


def test_streaming_workers_read_every_byte_on_connections_of_their_own_without_a_stall(far_mds):
    settings, uri, marker, proxy = far_mds
    # The cell's child checks every epoch's sample count and checksum against the marker (else DatasetError).
    rows = peer_epochs(settings, uri, marker, peer="streaming", mode="bytes", num_workers=2, batch_size=4,
                       image_size=32, warmup_batches=1, total_bytes=SAMPLES * SAMPLE_BYTES, timeout_s=300)
    assert [(r["epoch"], r["samples_checked"]) for r in rows] == [(1, SAMPLES), (2, SAMPLES)]
    for row in rows:
        assert row["seconds"] < EPOCH_BOUND_S, f"epoch {row['epoch']} took {row['seconds']} s: a stalled request"
    grouped = requests_by_connection(proxy)
    opening = [c for c, served in grouped.items() if any("index.json" in s for s in served)]
    assert opening, f"the proxy logged no read of index.json: {grouped}"
    for connection in opening:  # the parent's connection serves the parent only: no shard after the fork
        shards = [s for s in grouped[connection] if s.endswith(".mds")]
        assert not shards, f"connection {connection} read index.json and then shards {shards}: workers shared it"
