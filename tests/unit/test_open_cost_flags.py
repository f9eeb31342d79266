"""The per-open flags and the warm option, as parsed and as they reach each program's command line."""

from __future__ import annotations

import pytest

from mountctl.cli import main
from mountctl.errors import InvalidSpec
from mountctl.mounts.backends import Rclone, S3fsFuse
from mountctl.mounts.spec import MountSpec
from mountctl.mounts.warm import Warmer, WarmReport, read_listing, warm_for
from mountctl.s3 import S3Settings

LOCAL = S3Settings(endpoint_url="http://127.0.0.1:9", region="eu-west-1", access_key_id="AKUNIT",
                   secret_access_key="unit-secret")


@pytest.fixture
def programs(monkeypatch):
    monkeypatch.setattr("mountctl.mounts.backends.base.find_program", lambda name: f"/usr/bin/{name}")


def _spec(tmp_path, **options) -> MountSpec:
    return MountSpec(uri="s3://data-bucket/train/", mount_dir=str(tmp_path / "m"), **options)


def test_rclone_takes_fingerprints_from_the_listing_instead_of_a_head_per_open(programs, tmp_path):
    argv = Rclone().command(_spec(tmp_path), LOCAL, str(tmp_path))
    assert "--vfs-fast-fingerprint" in argv


def test_read_only_mounts_let_the_kernel_keep_attributes_for_the_metadata_ttl(programs, tmp_path):
    spec = _spec(tmp_path, metadata_ttl_s=600)
    rclone = Rclone().command(spec, LOCAL, str(tmp_path))
    assert rclone[rclone.index("--attr-timeout") + 1] == "600s"
    s3fs = S3fsFuse().command(spec, LOCAL, str(tmp_path))
    options = s3fs[s3fs.index("-o") + 1].split(",")
    assert "entry_timeout=600" in options and "attr_timeout=600" in options


def test_writable_mounts_keep_the_kernels_default_attribute_cache(programs, tmp_path):
    spec = _spec(tmp_path, read_only=False)
    assert "--attr-timeout" not in Rclone().command(spec, LOCAL, str(tmp_path))
    s3fs = S3fsFuse().command(spec, LOCAL, str(tmp_path))
    assert "attr_timeout" not in s3fs[s3fs.index("-o") + 1]


def test_warm_is_not_part_of_what_two_requests_must_agree_on(tmp_path):
    assert _spec(tmp_path, warm="all").served() == _spec(tmp_path).served()


def test_a_warm_list_path_is_made_absolute_and_an_empty_one_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _spec(tmp_path, warm="files.txt").warm == str(tmp_path / "files.txt")
    with pytest.raises(InvalidSpec, match="warm must be"):
        _spec(tmp_path, warm=" ")


def test_a_warm_list_names_paths_relative_to_the_mount(tmp_path):
    listing = tmp_path / "files.txt"
    listing.write_text("# classes\ncat/1.jpg\n\n/dog/2.jpg\n")
    assert read_listing(str(listing)) == ["cat/1.jpg", "dog/2.jpg"]
    assert read_listing("all") is None
    with pytest.raises(InvalidSpec, match="cannot read the warm list"):
        read_listing(str(tmp_path / "absent.txt"))


def test_cli_refuses_warm_without_a_cache_where_nothing_would_keep_what_it_reads(tmp_path, capsys):
    from mountctl.cli import configure
    from mountctl.mounts.backends import BACKENDS

    uri, where = "s3://data-bucket/train/", str(tmp_path / "m")
    assert main(["mount", uri, where, "--warm", "--backend", "rclone"]) == 1
    assert "add --cache-dir" in capsys.readouterr().err
    # A read-write mount keeps no pages for a warm, whatever the program.
    assert main(["mount", uri, where, "--warm", "--backend", "mount-s3", "--read-write"]) == 1
    assert "add --cache-dir" in capsys.readouterr().err
    # mountctl's own mount-s3, read only, keeps them in the page cache: the warm goes there.
    ours = BACKENDS["mount-s3"].available() and BACKENDS["mount-s3"].version().startswith("mount-s3 built from")
    if ours:
        assert configure(["mount", uri, where, "--warm", "--backend", "mount-s3"]).warm == "all"
    else:
        assert main(["mount", uri, where, "--warm", "--backend", "mount-s3"]) == 1


def test_nothing_asked_warms_a_mount_s3_mount_with_a_cache_and_nothing_else(tmp_path):
    assert warm_for(None, "mount-s3", has_cache=True) == "auto"
    assert warm_for(None, "mount-s3", has_cache=False) is None  # no cache: nothing to warm into
    # ... unless the kernel keeps the pages the warm reads (mountctl's mount-s3, read only)
    assert warm_for(None, "mount-s3", has_cache=False, keeps_pages=True) == "auto"
    assert warm_for("off", "mount-s3", has_cache=False, keeps_pages=True) is None
    assert warm_for(None, "rclone", has_cache=True) is None and warm_for(None, "s3fs", has_cache=True) is None
    assert warm_for("off", "mount-s3", has_cache=True) is None
    assert warm_for("all", "rclone", has_cache=True) == "all"
    assert read_listing("auto") is None  # the whole tree
    assert _spec(tmp_path, warm="off").warm == "off"  # a keyword, not a list's path


def test_cli_no_warm_asks_for_none_and_cannot_be_given_with_warm(tmp_path, capsys):
    from mountctl.cli import configure

    assert configure(["mount", "s3://data-bucket/train/", str(tmp_path / "m"), "--no-warm"]).warm == "off"
    assert configure(["mount", "s3://data-bucket/train/", str(tmp_path / "m")]).warm is None
    with pytest.raises(SystemExit):
        configure(["mount", "s3://data-bucket/train/", str(tmp_path / "m"), "--no-warm", "--warm"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_an_automatic_warm_needs_the_whole_tree_and_a_budget(tmp_path):
    with pytest.raises(InvalidSpec, match="whole tree within a cache budget"):
        Warmer(str(tmp_path), ["a"], budget_bytes=10, only_if_fits=True)
    with pytest.raises(InvalidSpec, match="whole tree within a cache budget"):
        Warmer(str(tmp_path), only_if_fits=True)


def test_an_automatic_warm_of_a_local_tree_reads_all_of_it_or_none(tmp_path):
    for name in ("a/1.bin", "a/2.bin", "b/3.bin"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * 100)
    fits = Warmer(str(tmp_path), budget_bytes=300, only_if_fits=True, timeout_s=60).start().wait()
    assert fits.complete and fits.files == 3 and fits.bytes == 300, fits
    outgrown = Warmer(str(tmp_path), budget_bytes=250, only_if_fits=True, timeout_s=60).start().wait()
    assert outgrown.files == 0 and outgrown.outgrown_bytes == 300 and not outgrown.complete, outgrown


def test_a_warm_report_is_complete_only_when_every_file_was_read():
    assert WarmReport(files=3).complete
    partial = WarmReport(files=2, missing=["gone.jpg"])
    assert not partial.complete and "1 missing" in partial.summary()
    assert not WarmReport(files=1, timed_out=True).complete


def test_the_far_proxy_logs_requests_only_when_asked(tmp_path):
    from mountctl.local_s3.far_proxy import FarProfile, render_config

    def conf(log_requests: bool) -> str:
        return render_config(FarProfile(), upstream="127.0.0.1:8333", port=9000, workdir=str(tmp_path),
                             modules_dir="/m", log_requests=log_requests)

    assert "access_log off;" in conf(False)
    assert f"access_log {tmp_path}/requests.log requests;" in conf(True)


def test_rclones_cache_keeps_files_longer_than_an_epoch(programs, tmp_path):
    argv = Rclone().command(_spec(tmp_path, cache_dir=str(tmp_path / "c"), cache_size_mb=1024), LOCAL, str(tmp_path))
    assert argv[argv.index("--vfs-cache-max-age") + 1] == "8760h"
