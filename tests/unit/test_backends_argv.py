"""Each mount program's command line and environment: credentials never on the command line."""

from __future__ import annotations

import os
import stat

import pytest

from mountctl.errors import BackendNotFound
from mountctl.mounts.backends import BACKENDS, MountS3, Rclone, S3fsFuse, choose_backend
from mountctl.mounts.spec import MountSpec
from mountctl.s3 import S3Settings

SECRET = "unit-test-secret-value"
LOCAL = S3Settings(endpoint_url="http://127.0.0.1:9", region="eu-west-1", access_key_id="AKUNIT",
                   secret_access_key=SECRET)
AWS = S3Settings(endpoint_url=None, region="us-west-2", access_key_id=None)


@pytest.fixture(autouse=True)
def programs_on_path(monkeypatch):
    # The argv under test is what we would run; where the program lives is not.
    for backend in BACKENDS.values():
        monkeypatch.setattr(type(backend), "executable", lambda self: f"/usr/bin/{self.program}")


def _spec(**changes):
    return MountSpec(**{"uri": "s3://bkt/data/", "mount_dir": "/mnt/x", **changes})


@pytest.mark.parametrize("backend", [MountS3(), Rclone(), S3fsFuse()], ids=lambda b: b.name)
def test_no_secret_in_any_argv(backend, tmp_path):
    argv = backend.command(_spec(), LOCAL, str(tmp_path))
    assert SECRET not in " ".join(argv) and "AKUNIT" not in " ".join(argv)


def test_mount_s3_off_aws_uses_path_style_and_no_upload_checksums(tmp_path):
    argv = MountS3().command(_spec(), LOCAL, str(tmp_path))
    assert argv[1:3] == ["bkt", "/mnt/x"] and "--foreground" in argv and "--read-only" in argv
    assert argv[argv.index("--prefix") + 1] == "data/"
    assert {"--force-path-style", "--endpoint-url"} <= set(argv) and argv[argv.index("--upload-checksums") + 1] == "off"


def test_mount_s3_read_write_may_delete_and_read_only_may_not(tmp_path):
    assert "--allow-delete" in MountS3().command(_spec(read_only=False), LOCAL, str(tmp_path))
    assert "--allow-delete" not in MountS3().command(_spec(), LOCAL, str(tmp_path))


def test_mount_s3_cache_directory_exists_and_is_private_before_it_starts(tmp_path):
    spec = _spec(cache_dir=str(tmp_path / "cache"))
    argv = MountS3().command(spec, LOCAL, str(tmp_path))
    MountS3().environment(spec, LOCAL, str(tmp_path))
    cache = argv[argv.index("--cache") + 1]
    assert os.path.isdir(cache) and stat.S_IMODE(os.stat(cache).st_mode) == 0o700


def test_mount_s3_without_credentials_sends_unsigned_requests(tmp_path):
    argv = MountS3().command(_spec(), AWS, str(tmp_path))
    assert "--no-sign-request" in argv and "--endpoint-url" not in argv


def test_rclone_gets_its_remote_and_keys_by_environment_without_ca_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_CA_BUNDLE", "/etc/ssl/x.pem")
    env = Rclone().environment(_spec(), LOCAL, str(tmp_path))
    assert env["RCLONE_CONFIG_MOUNTCTL_SECRET_ACCESS_KEY"] == SECRET
    assert env["RCLONE_CONFIG_MOUNTCTL_ENDPOINT"] == "http://127.0.0.1:9"
    assert "AWS_CA_BUNDLE" not in env
    assert "MOUNTCTL:bkt/data" in Rclone().command(_spec(), LOCAL, str(tmp_path))


def test_s3fs_reads_keys_from_a_0600_file(tmp_path):
    S3fsFuse().environment(_spec(), LOCAL, str(tmp_path))
    passwd = tmp_path / "s3fs.passwd"
    assert passwd.read_text().strip() == f"AKUNIT:{SECRET}"
    assert stat.S_IMODE(os.stat(passwd).st_mode) == 0o600
    argv = S3fsFuse().command(_spec(), LOCAL, str(tmp_path))
    assert argv[1] == "bkt:/data" and "use_path_request_style" in argv[-1]


def test_extra_args_reach_only_their_program(tmp_path):
    spec = _spec(extra_args={"rclone": ["--transfers", "8"]})
    assert Rclone().command(spec, LOCAL, str(tmp_path))[-2:] == ["--transfers", "8"]
    assert "--transfers" not in S3fsFuse().command(spec, LOCAL, str(tmp_path))


def test_a_missing_program_names_itself_and_how_to_install_it(monkeypatch):
    monkeypatch.undo()  # restore the real `executable` so the lookup really runs
    monkeypatch.setattr("mountctl.mounts.backends.base.find_program", lambda name: None)
    with pytest.raises(BackendNotFound, match="apt-get install s3fs") as info:
        choose_backend("s3fs")
    assert info.value.program == "s3fs"


@pytest.mark.parametrize("backend", [MountS3(), Rclone()], ids=lambda b: b.name)
def test_ownership_and_sharing_flags(backend, tmp_path):
    argv = backend.command(_spec(uid=1000, gid=100, allow_other=True), LOCAL, str(tmp_path))
    assert argv[argv.index("--uid") + 1] == "1000" and argv[argv.index("--gid") + 1] == "100"
    assert "--allow-other" in argv
    assert "--allow-other" not in backend.command(_spec(), LOCAL, str(tmp_path))


def test_s3fs_spells_ownership_as_options(tmp_path):
    options = S3fsFuse().command(_spec(uid=1000, gid=100, allow_other=True), LOCAL, str(tmp_path))[-1].split(",")
    assert {"uid=1000", "gid=100", "allow_other"} <= set(options)


@pytest.mark.parametrize(("installed", "chosen"), [
    (("mount-s3", "rclone", "s3fs"), "mount-s3"),
    (("rclone", "s3fs"), "rclone"),
    (("rclone",), "rclone"),
    (("s3fs",), "s3fs"),
])
def test_auto_prefers_mount_s3_then_rclone_then_s3fs(monkeypatch, installed, chosen):
    from mountctl.mounts.backends import base

    # Which programs are on PATH is a path lookup, not a component: answer it from the case.
    monkeypatch.setattr(base, "find_program",
                        lambda program: f"/usr/bin/{program}" if program in installed else None)
    assert choose_backend("auto").name == chosen


def test_auto_without_any_program_names_all_three(monkeypatch):
    from mountctl.mounts.backends import base

    monkeypatch.setattr(base, "find_program", lambda program: None)
    with pytest.raises(BackendNotFound, match="mount-s3, rclone, s3fs"):
        choose_backend("auto")


def _free_mb(monkeypatch, value: int) -> None:
    from mountctl.mounts.backends import base, s3fs

    # The free space of the cache disk is the one input from the machine; give it per case.
    for module in (base, s3fs):
        monkeypatch.setattr(module, "free_mb", lambda path: value)


def test_rclone_cache_cap_is_never_more_than_half_the_free_disk(monkeypatch):
    _free_mb(monkeypatch, 1000)
    argv = Rclone().command(_spec(cache_dir="/c", cache_size_mb=5000), LOCAL, "/w")
    assert argv[argv.index("--vfs-cache-max-size") + 1] == "500M"
    assert argv[argv.index("--vfs-cache-min-free-space") + 1] == "500M"  # the soft max size overshoots; this holds
    assert argv[argv.index("--cache-dir") + 1] == "/c/rclone-cache"
    argv = Rclone().command(_spec(cache_dir="/c", cache_size_mb=100), LOCAL, "/w")
    assert argv[argv.index("--vfs-cache-max-size") + 1] == "100M"


def test_s3fs_cache_keeps_the_disk_free_beyond_its_cap(monkeypatch):
    _free_mb(monkeypatch, 10_000)
    options = S3fsFuse().command(_spec(cache_dir="/c", cache_size_mb=3000), LOCAL, "/w")[-1].split(",")
    assert "use_cache=/c/s3fs-cache" in options and "ensure_diskfree=5000" in options and "auto_cache" in options


def test_s3fs_cache_floor_leaves_half_the_free_disk_to_other_writers(monkeypatch):
    """A floor of free - cap broke reads (ENOSPC) as soon as another process wrote more than the cap."""
    _free_mb(monkeypatch, 66_000)
    options = S3fsFuse().command(_spec(cache_dir="/c", cache_size_mb=256), LOCAL, "/w")[-1].split(",")
    floor = int(next(o for o in options if o.startswith("ensure_diskfree=")).split("=")[1])
    assert floor <= 66_000 // 2


def test_s3fs_on_a_disk_too_small_for_its_buffers_mounts_without_a_cache(monkeypatch):
    _free_mb(monkeypatch, 100)
    options = S3fsFuse().command(_spec(cache_dir="/c", cache_size_mb=3000), LOCAL, "/w")[-1].split(",")
    assert not [o for o in options if o.startswith(("use_cache", "ensure_diskfree"))]


def test_mount_s3_reads_in_5_mib_parts_unless_the_user_names_a_part_size(tmp_path):
    argv = MountS3().command(_spec(), LOCAL, str(tmp_path))
    assert argv[argv.index("--read-part-size") + 1] == str(5 * 1024 * 1024) and "--part-size" not in argv
    for flag in ("--part-size", "--read-part-size"):
        mine = MountS3().command(_spec(extra_args={"mount-s3": (flag, "16777216")}), LOCAL, str(tmp_path))
        # Given once (mount-s3 refuses a repeated flag), the user's value.
        assert [a for a in mine if a.endswith("part-size")] == [flag] and mine[-1] == "16777216"


def test_mount_s3_gets_64_fuse_threads_unless_the_user_names_a_count(tmp_path):
    argv = MountS3().command(_spec(), LOCAL, str(tmp_path))
    assert argv[argv.index("--max-threads") + 1] == "64" and argv.count("--max-threads") == 1
    mine = MountS3().command(_spec(extra_args={"mount-s3": ("--max-threads", "8")}), LOCAL, str(tmp_path))
    assert mine.count("--max-threads") == 1 and mine[mine.index("--max-threads") + 1] == "8"


def _aws_mount_s3(tmp_path, version):
    """A stand-in for AWS's mount-s3 that only answers --version: no registry here serves AWS's older releases,
    and the version line is all the command line depends on."""
    program = tmp_path / f"aws-{version}" / "mount-s3"
    program.parent.mkdir()
    program.write_text(f"#!/bin/sh\necho 'mount-s3 {version}'\n")
    program.chmod(0o755)
    return str(program)


@pytest.mark.parametrize("version, passed", [("1.7.2", False), ("1.8.0", True), ("1.22.0", True)])
def test_aws_mount_s3_gets_read_part_size_only_from_1_8_on(tmp_path, monkeypatch, version, passed):
    """AWS's releases before 1.8.0 refuse --read-part-size, so every mount that passed it failed."""
    program = _aws_mount_s3(tmp_path, version)
    monkeypatch.setattr(MountS3, "executable", lambda self: program)
    argv = MountS3().command(_spec(), LOCAL, str(tmp_path))
    assert argv[0] == program and ("--read-part-size" in argv) is passed and "--part-size" not in argv
    assert bool(MountS3().read_part_size_note()) is not passed


def test_doctor_says_why_an_old_aws_mount_s3_reads_in_its_own_parts(tmp_path, monkeypatch):
    from mountctl.doctor import run_checks

    program = _aws_mount_s3(tmp_path, "1.7.2")
    monkeypatch.setattr(MountS3, "available", lambda self: True)
    monkeypatch.setattr(MountS3, "executable", lambda self: program)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    row = next(check for check in run_checks() if check["name"] == "backend mount-s3")
    assert row["ok"] and "mount-s3 1.7.2 (AWS)" in row["detail"] and "1.8.0" in row["detail"]


def test_a_mount_read_whole_file_by_file_fetches_16_mib_first_only_with_our_build(tmp_path, monkeypatch):
    """Our front end takes --initial-request-size (AWS's mount-s3 does not); a spec read at random offsets keeps
    the prefetcher's small first GET, which keeps a random read cheap."""
    ours = tmp_path / "ours" / "mount-s3"
    ours.parent.mkdir()
    ours.write_text("#!/bin/sh\necho 'mount-s3 built from mountpoint-s3-fs 0.11.0 (mountctl front end 0.1.0)'\n")
    ours.chmod(0o755)
    for program, whole, expected in ((str(ours), True, True), (str(ours), False, False),
                                     (_aws_mount_s3(tmp_path, "1.22.0"), True, False)):
        monkeypatch.setattr(MountS3, "executable", lambda self, program=program: program)
        argv = MountS3().command(_spec(whole_files=whole), LOCAL, str(tmp_path))
        assert ("--initial-request-size" in argv) is expected, (program, whole)
        if expected:
            assert argv[argv.index("--initial-request-size") + 1] == str(16 * 1024 * 1024)
    mine = MountS3().command(_spec(whole_files=True, extra_args={"mount-s3": ("--initial-request-size", "0")}),
                             LOCAL, str(tmp_path))
    assert mine.count("--initial-request-size") <= 1
