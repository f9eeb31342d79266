"""An object list (what a mount of exactly the indexed objects serves) and the MountSpec that names one."""

from __future__ import annotations

import os
import stat

import pytest

from mountctl import InvalidSpec, ListedObject, MountSpec, read_object_list, write_object_list
from mountctl.mounts.backends import MountS3
from mountctl.s3 import S3Settings


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))


def test_the_same_objects_name_the_same_private_file_whatever_their_order():
    a = write_object_list([ListedObject("b/2.jpg", "e2", 2), ListedObject("a/1.jpg", '"e1"', 1)])
    b = write_object_list([ListedObject("a/1.jpg", "e1", 1), ListedObject("b/2.jpg", "e2", 2)])
    assert a == b and stat.S_IMODE(os.stat(a).st_mode) == 0o600
    assert read_object_list(a) == [ListedObject("a/1.jpg", '"e1"', 1), ListedObject("b/2.jpg", '"e2"', 2)]
    assert write_object_list([ListedObject("a/1.jpg", "e1", 9)]) != a  # another size: other objects


@pytest.mark.parametrize("bad", [ListedObject("a\tb", "e", 1), ListedObject("dir/", "e", 1),
                                 ListedObject("k", "", 1)], ids=["tab", "directory", "no-etag"])
def test_an_object_that_cannot_be_listed_is_refused_naming_it(bad):
    with pytest.raises(InvalidSpec, match="cannot be listed|no usable ETag"):
        write_object_list([bad])


def test_a_malformed_line_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / "list.tsv"
    path.write_text('a.jpg\t"e"\t1\nb.jpg\t"e"\n')
    with pytest.raises(InvalidSpec, match="line 2"):
        read_object_list(str(path))


def test_a_list_is_mounted_read_only_by_mount_s3_under_one_directory(tmp_path):
    objects = write_object_list([ListedObject("n01/x.JPEG", "e", 5)])
    spec = MountSpec(uri="s3://bkt/data/train/", mount_dir=str(tmp_path / "m"), objects=objects)
    assert spec.backend == "mount-s3" and spec.data_dir == str(tmp_path / "m" / "train")
    assert MountSpec(uri="s3://bkt/", mount_dir="/m", objects=objects).data_dir == "/m/bkt"
    for wrong, message in ((dict(backend="rclone"), "only mount-s3"), (dict(read_only=False), "read-only"),
                           (dict(objects=""), "object list file")):
        with pytest.raises(InvalidSpec, match=message):
            MountSpec(uri="s3://bkt/data/", mount_dir="/m", **{"objects": objects, **wrong})


def test_a_missing_list_is_named_before_mount_s3_starts(tmp_path, monkeypatch):
    monkeypatch.setattr("mountctl.mounts.backends.mount_s3.bundled_mount_s3", lambda: "/opt/ours/mount-s3")
    spec = MountSpec(uri="s3://bkt/shards/", mount_dir="/m", objects=str(tmp_path / "none.tsv"))
    with pytest.raises(InvalidSpec, match="none.tsv does not exist"):
        MountS3().command(spec, S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1"), str(tmp_path))


def test_mount_s3_gets_the_list_and_its_directory(tmp_path, monkeypatch):
    objects = write_object_list([ListedObject("x.tar", "e", 5)])
    monkeypatch.setattr("mountctl.mounts.backends.mount_s3.bundled_mount_s3", lambda: "/opt/ours/mount-s3")
    spec = MountSpec(uri="s3://bkt/shards/", mount_dir="/m", objects=objects)
    argv = MountS3().command(spec, S3Settings(endpoint_url="http://127.0.0.1:9", region="us-east-1"), str(tmp_path))
    assert argv[0] == "/opt/ours/mount-s3"  # AWS's mount-s3 has no --manifest: ours, even where AWS's is installed
    assert argv[argv.index("--manifest") + 1] == objects and argv[argv.index("--manifest-directory") + 1] == "shards"


@pytest.mark.parametrize("line, message", [
    ('a//b.jpg\t"e"\t1\n', "empty, '.' or '..' part"),
    ('./x.jpg\t"e"\t1\n', "empty, '.' or '..' part"),
    ('/x.jpg\t"e"\t1\n', "starts or ends with '/'"),
    ('x.jpg\t"e"\t1\r\n', "carriage return"),
    ('x.jpg\t\t1\n', "has no ETag"),
    ('x.jpg\t"e"\t\u00b2\n', "not a whole number"),
    ('x.jpg\t"e"\t99999999999999999999\n', "not a whole number"),
    ('   \n', "found 1 field"),
], ids=["double-slash", "dot", "leading-slash", "crlf", "no-etag", "superscript-digit", "too-big", "spaces"])
def test_a_line_mount_s3_would_refuse_is_refused_at_read_naming_line_and_key(tmp_path, line, message):
    """The same rules as mount-s3's own check (mount-s3/src/manifest.rs): before, such a list failed the whole
    mount late, inside mount-s3, with no line number ("channel provided in the config is invalid")."""
    path = tmp_path / "list.tsv"
    path.write_text('ok.jpg\t"e"\t1\n' + line, newline="")
    with pytest.raises(InvalidSpec, match="line 2") as caught:
        read_object_list(str(path))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_key_listed_twice_or_as_a_folder_of_another_is_refused_naming_both_lines(tmp_path):
    """A brace range naming a shard twice failed inside mount-s3 with a database constraint error."""
    path = tmp_path / "list.tsv"
    path.write_text('a.tar\t"e"\t1\nb.tar\t"e"\t1\na.tar\t"e"\t1\n')
    with pytest.raises(InvalidSpec, match=r"line 3, key 'a.tar' is listed twice \(first line 1"):
        read_object_list(str(path))
    path.write_text('n01/x.jpg\t"e"\t1\nn01\t"e"\t1\n')
    with pytest.raises(InvalidSpec, match="lies under 'n01'.*line 2"):
        read_object_list(str(path))
    with pytest.raises(InvalidSpec, match="listed twice"):
        write_object_list([ListedObject("a.tar", "e", 1), ListedObject("a.tar", "e", 1)])


def test_a_list_that_is_not_utf8_or_names_nothing_is_refused_in_one_line(tmp_path):
    path = tmp_path / "list.tsv"
    path.write_bytes(b'caf\xe9.jpg\t"e"\t1\n')
    with pytest.raises(InvalidSpec, match="not UTF-8"):
        read_object_list(str(path))
    path.write_text("\n\n")
    with pytest.raises(InvalidSpec, match="names no object"):
        read_object_list(str(path))
