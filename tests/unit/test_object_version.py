"""Version pins: which ETag a reader holds to, how a changed object and a refused If-Match are recognised.

The store's answer to "which ETag does the object have now" is a plain function here: a store that
changes its answer between two reads of one file cannot be produced on demand without a server
(tests/test_object_versions.py does it for real, on every route).
"""

from __future__ import annotations

import errno
import json

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from mountctl import ObjectChanged, VersionPin, s3
from mountctl.mounts.resilient import ResilientReader
from mountctl.pytorch.data.index.manifest import Manifest
from mountctl.pytorch.data.sources.pins import shard_pins

URI = "s3://bkt/data/shard-000403.tar"


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def test_the_first_etag_seen_is_pinned_and_another_one_is_refused_in_one_line():
    pin = VersionPin(URI, remedy="re-index it")
    pin.check('"aaa"')
    assert pin.etag == "aaa" and pin.if_match == '"aaa"'
    pin.check("aaa")
    with pytest.raises(ObjectChanged) as caught:
        pin.check('"bbb"')
    text = str(caught.value)
    assert "\n" not in text and URI in text and "aaa" in text and "bbb" in text and text.endswith("re-index it")
    assert "first opened" in text
    assert (caught.value.uri, caught.value.expected_etag, caught.value.etag) == (URI, "aaa", "bbb")


def test_an_etag_from_the_index_is_the_one_held_and_said_to_come_from_it():
    pin = VersionPin(URI, '"abc-2"', etag_now=lambda: "abc-3")
    with pytest.raises(ObjectChanged) as caught:
        pin.verify()
    assert "index names" in str(caught.value) and caught.value.expected_etag == "abc-2"


def test_a_store_that_says_the_object_is_gone_is_not_a_change():
    assert VersionPin(URI, "aaa", etag_now=lambda: None).verify() is False


@pytest.mark.parametrize("value, plain", [('"abc"', "abc"), ("abc", "abc"), ('W/"abc-4"', "abc-4"), (' "x" ', "x")])
def test_etags_are_compared_without_their_quotes(value, plain):
    assert s3.plain_etag(value) == plain


def test_a_refused_if_match_is_recognised_as_each_library_reports_it():
    from s3fs.utils import FileExpired

    assert s3.is_precondition_failed(_client_error("PreconditionFailed", 412))
    expired = FileExpired(filename="bkt/k", e_tag='"aaa"')
    expired.__cause__ = OSError(errno.EINVAL, "At least one of the pre-conditions you specified did not hold")
    assert s3.is_precondition_failed(expired)
    assert not s3.is_precondition_failed(_client_error("AccessDenied", 403))
    assert not s3.is_precondition_failed(OSError(errno.EIO, "read failed"))


def test_manifests_keep_etags_and_older_ones_without_them_still_load():
    shard = {"name": "shard-000000.tar", "samples": 2, "first_index": 0, "bytes": 4096, "sha256": "00"}
    old = {"num_images": 2, "image_size": 32, "num_classes": 2, "seed": 0, "shards": [shard],
           "format": "mountctl-webdataset/1"}
    assert Manifest.from_dict(old).shards[0].etag is None
    with_etag = json.loads(json.dumps(old))
    with_etag["shards"][0]["etag"] = "d41d8cd9"
    manifest = Manifest.from_dict(with_etag)
    assert manifest.shards[0].etag == "d41d8cd9"
    assert Manifest.from_dict(json.loads(manifest.to_json())) == manifest
    files = {"num_images": 1, "image_size": 32, "num_classes": 1, "seed": 0, "shards": [],
             "format": "mountctl-files/1", "files": [{"key": "train/c0/0.jpg", "label": 0, "bytes": 9, "etag": "e"}]}
    assert Manifest.from_dict(files).files[0].etag == "e"


def test_shard_pins_name_each_object_and_the_index_command():
    pins = shard_pins("s3://bkt/data/", ["a.tar", "b.tar"], ["e1", None])
    assert [(p.uri, p.etag) for p in pins] == [("s3://bkt/data/a.tar", "e1"), ("s3://bkt/data/b.tar", None)]
    assert "resnet.py index s3://bkt/data/" in pins[0].remedy
    with pytest.raises(ValueError):
        shard_pins("s3://bkt/data/", ["a.tar"], [])


class _Store:
    """What S3 answers for the object's ETag: a value, or an outage (raises)."""

    def __init__(self, etag: str | None) -> None:
        self.etag, self.down, self.asked = etag, False, 0

    def __call__(self) -> str | None:
        self.asked += 1
        if self.down:
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        return self.etag


def _reader(tmp_path, store: _Store, etag: str | None = "v1", retry_for_s: float = 30) -> ResilientReader:
    path = tmp_path / "shard.tar"
    if not path.exists():
        path.write_bytes(bytes(range(256)) * 16)
    return ResilientReader(str(path), retry_for_s=retry_for_s, pin=VersionPin(URI, etag, etag_now=store))


def test_a_reopen_that_finds_another_version_fails_instead_of_joining_bytes(tmp_path):
    store = _Store("v1")
    reader = _reader(tmp_path, store)
    assert reader.read(100) == (bytes(range(256)) * 16)[:100]
    store.etag = "v2"
    reader._drop()  # the mount went away under the reader: the next read reopens at byte 100
    with pytest.raises(ObjectChanged):
        reader.read(100)
    assert reader.tell() == 100 and store.asked == 2


def test_a_reopen_of_the_same_version_goes_on_at_the_byte_reached(tmp_path):
    store = _Store("v1")
    reader = _reader(tmp_path, store, etag=None)  # no index ETag: the one at the first open is pinned
    first = reader.read(100)
    reader._drop()
    assert first + reader.read() == bytes(range(256)) * 16 and reader.reopens == 1 and store.asked == 2


def test_an_object_replaced_since_the_index_fails_at_its_first_open(tmp_path):
    with pytest.raises(ObjectChanged):
        _reader(tmp_path, _Store("v2"), etag="v1")


def test_a_store_down_at_the_first_open_does_not_stop_a_read_but_is_waited_for_at_a_reopen(tmp_path):
    store = _Store("v1")
    store.down = True
    reader = _reader(tmp_path, store, retry_for_s=0.5)
    assert len(reader.read(10)) == 10
    reader._drop()
    with pytest.raises(OSError) as caught:
        reader.read(10)
    assert "kept failing" in str(caught.value) and store.asked > 2  # retried until the bound, then failed


def test_a_refused_if_match_on_a_stream_is_the_one_line_error_and_not_a_credentials_refresh(monkeypatch):
    from mountctl.pytorch.data.sources import refreshing

    credentials = refreshing.Credentials(s3.resolve(endpoint_url="http://127.0.0.1:9"), "fsspec")
    monkeypatch.setattr(credentials, "refresh", lambda *a: pytest.fail("a changed object is not a refused key"))

    class Refused:
        def read(self, n: int) -> bytes:
            raise _client_error("PreconditionFailed", 412)

        def close(self) -> None:
            pass

    pin = VersionPin(URI, "v1")
    stream = refreshing.RefreshingStream(URI, credentials, lambda offset: Refused(), pin)
    with pytest.raises(ObjectChanged) as caught:
        stream.read(10)
    assert "If-Match" in str(caught.value) and caught.value.etag is None


def test_the_error_stays_one_line_when_a_library_appends_its_context_and_across_pickling():
    import pickle

    error = VersionPin(URI, "v1").changed("v2")
    error.args = error.args + ("<stream>", "shard-000403.tar")  # what webdataset's tar reader does on its way out
    assert str(error) == error.message and "\n" not in str(error) and "<stream>" not in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy).startswith(URI) and copy.etag == "v2"
