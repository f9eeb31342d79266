"""The mount table is parsed in one place, from /proc/self/mountinfo's own format."""

from __future__ import annotations

from mountctl.mounts.mounttable import read_mount_table

SAMPLE = (
    "22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "101 22 0:52 / /tmp/with\\040space\\011tab rw,nosuid,nodev shared:60 - fuse.rclone MOUNTCTL:bkt rw,user_id=0\n"
    "102 22 0:53 / /mnt/m rw,nosuid,nodev - fuse mountpoint-s3 rw,user_id=0\n"
    "103 22 0:54 / /mnt/s rw - fuse.s3fs s3fs rw\n"
)


def test_fields_types_and_sources_are_read(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(SAMPLE)
    entries = read_mount_table(str(table))
    assert [e.fs_type for e in entries] == ["ext4", "fuse.rclone", "fuse", "fuse.s3fs"]
    assert entries[2].source == "mountpoint-s3" and entries[2].is_fuse and not entries[0].is_fuse


def test_octal_escapes_in_paths_are_decoded(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(SAMPLE)
    assert read_mount_table(str(table))[1].mount_point == "/tmp/with space\ttab"


def test_fuse_connection_number_is_the_device_minor(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(SAMPLE)
    assert [e.fuse_connection for e in read_mount_table(str(table))[1:]] == [52, 53, 54]


def test_optional_fields_before_the_separator_are_skipped(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text("7 1 0:5 / /x rw shared:2 master:3 propagate_from:4 - tmpfs none rw\n")
    (entry,) = read_mount_table(str(table))
    assert (entry.mount_point, entry.fs_type, entry.source) == ("/x", "tmpfs", "none")
