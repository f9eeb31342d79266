"""The exporter's output from registry records, readiness, the memory-bound flag mapping and the CLI options."""

from __future__ import annotations

import os
import time

import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mountctl.cli import _parser
from mountctl.errors import InvalidSpec, MountctlError
from mountctl.mounts.backends import (
    BACKENDS,
    mount_s3_memory_flags,
    rclone_memory_flags,
    s3fs_memory_options,
)
from mountctl.mounts.spec import MountSpec
from mountctl.observability.exporter import STATES, MountCollector, parse_listen, readiness
from mountctl.observability.metrics import mount_figures, program_memory
from mountctl.processes import process_identity
from mountctl.s3 import S3Settings
from mountctl.shared.client import sharing_identity
from mountctl.shared.registry import MountRecord

MIB = 1 << 20


def _record(tmp_path, **changes) -> MountRecord:
    spec = MountSpec(uri="s3://data/train/", mount_dir=str(tmp_path / "m"), backend="s3fs",
                     cache_dir=str(tmp_path / "cache"), cache_size_mb=100, memory_mb=256)
    from mountctl.mounts.cache import mount_cache_dir

    cache = {"cache_dir": spec.cache_dir, "cache_size_mb": 100, "keep_free_mb": 16,
             "path": mount_cache_dir(spec.cache_dir, spec.mount_dir)}
    base = MountRecord(uri=spec.uri, mount_dir=spec.mount_dir, spec=spec.to_dict(), identity={}, state="recovering",
                       cache=cache,
                       backend="s3fs", restarts=3, holders=(process_identity(),), supervisor=process_identity(),
                       program_pid=os.getpid(), since=time.time(), last_error="dead: mount program exited")
    return base.replace(**changes)


def _scrape(rows) -> dict[str, list]:
    registry = CollectorRegistry()
    registry.register(MountCollector(rows=lambda: rows))
    text = generate_latest(registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_a_recovering_mount_is_down_with_one_state_series_per_state_and_its_restarts(tmp_path):
    row = mount_figures(_record(tmp_path), timeout_s=1.0)
    families = _scrape([row])
    labels = {"uri": "s3://data/train/", "dir": str(tmp_path / "m"), "backend": "s3fs"}
    assert [(s.labels, s.value) for s in families["mountctl_mount_up"]] == [(labels, 0.0)]
    states = {s.labels["state"]: s.value for s in families["mountctl_mount_state"]}
    assert states == {name: float(name == "recovering") for name in STATES}
    assert [s.value for s in families["mountctl_mount_restarts"] if s.name.endswith("_total")] == [3.0]
    assert [s.value for s in families["mountctl_mount_memory_bound_bytes"]] == [256.0 * MIB]
    assert [s.value for s in families["mountctl_cache_capacity_bytes"]] == [100.0 * MIB]


def test_cache_bytes_count_the_mounts_own_cache_directory(tmp_path):
    from mountctl.mounts.cache import mount_cache_dir

    record = _record(tmp_path)
    own = mount_cache_dir(str(tmp_path / "cache"), record.mount_dir)
    os.makedirs(own)
    with open(os.path.join(own, "shard.tar"), "wb") as f:
        f.write(os.urandom(3 * MIB))
    row = mount_figures(record, timeout_s=1.0)
    assert row["cache"]["bytes"] >= 3 * MIB and row["cache"]["cache_size_mb"] == 100
    assert _scrape([row])["mountctl_cache_bytes"][0].value == row["cache"]["bytes"]
    no_cache = mount_figures(record.replace(cache=None), timeout_s=1.0)
    assert no_cache["cache"] is None  # as `mountctl status` has it: the program runs without one
    assert "mountctl_cache_bytes" not in {n for n, samples in _scrape([no_cache]).items() if samples}


def test_the_programs_current_and_peak_rss_are_read_from_the_kernel():
    figures = program_memory(os.getpid())
    assert figures["rss_bytes"] and figures["peak_rss_bytes"]
    assert figures["peak_rss_bytes"] >= figures["rss_bytes"] > 1 * MIB
    assert program_memory(None) == {"rss_bytes": None, "peak_rss_bytes": None}


def test_a_record_whose_supervisor_died_is_abandoned_and_not_ready(tmp_path):
    row = mount_figures(_record(tmp_path, supervisor={"pid": os.getpid(), "create_time": 1.0}), timeout_s=1.0)
    assert row["state"] == "abandoned" and not row["up"]
    ready, body = readiness([row])
    assert not ready
    assert str(tmp_path / "m") in body and "supervisor is gone" in body


def test_a_mount_still_starting_keeps_the_node_ready_and_is_named(tmp_path):
    """A job mounting is not a broken node: /readyz must not turn 503 each time one starts."""
    starting = mount_figures(_record(tmp_path, state="starting", restarts=0, last_error="", program_pid=None),
                             timeout_s=1.0)
    assert not starting["up"]
    assert readiness([starting]) == (True, "ready: 0 mount(s) up, 1 starting\n")


def test_rclone_samples_and_vfs_stats_are_labelled_by_mount(tmp_path):
    row = mount_figures(_record(tmp_path), timeout_s=1.0)
    row["program"] = {
        "vfs": {"inUse": 2, "diskCache": {"bytesUsed": 1234, "outOfSpace": False, "path": "/x"},
                "metadataCache": {"dirs": 1, "files": 4}},
        "metrics": [{"name": "rclone_bytes_transferred_total", "family": "rclone_bytes_transferred",
                     "type": "counter", "help": "Total transferred bytes", "labels": {}, "value": 42.0}],
    }
    families = _scrape([row])
    assert families["mountctl_rclone_vfs_disk_cache_bytes_used"][0].value == 1234
    assert families["mountctl_rclone_vfs_in_use"][0].value == 2
    assert "mountctl_rclone_vfs_disk_cache_out_of_space" not in families  # booleans and paths are not figures
    sample = families["rclone_bytes_transferred"][0]
    assert sample.value == 42 and sample.labels["dir"] == str(tmp_path / "m")


def test_readiness_is_200_only_when_every_mount_is_up(tmp_path):
    up = {"up": True, "dir": "/a", "uri": "s3://a/", "backend": "rclone", "state": "mounted", "health": {}}
    down = {**up, "dir": "/b", "up": False, "state": "mounted",
            "health": {"state": "unresponsive", "error": "probe timed out after 2s"}}
    assert readiness([up]) == (True, "ready: 1 mount(s) up\n")
    ready, body = readiness([up, down])
    assert not ready and "/b" in body and "probe timed out" in body and "/a " not in body
    assert readiness([])[0]


# -- memory bound: one mapping per program -------------------------------------------------------------


def _value(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} appears {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def test_no_bound_leaves_every_command_line_as_it_is():
    argv = ["rclone", "mount", "--buffer-size", "32M"]
    assert rclone_memory_flags(argv, None) == argv
    assert s3fs_memory_options(["url=x"], None) == ["url=x"]
    assert mount_s3_memory_flags(["mount-s3"], None) == ["mount-s3"]


def test_rclone_bound_reads_each_file_as_one_unbuffered_stream_whatever_flags_are_in_use():
    """Per-file buffers and chunk streams grow with the number of open files; a bound must hold for any number."""
    argv = ["rclone", "mount", "r:", "/m", "--buffer-size", "32M", "--vfs-read-chunk-streams=16",
            "--vfs-read-chunk-size", "64M", "--vfs-read-chunk-size-limit", "off"]
    bounded = rclone_memory_flags(argv, 256)
    assert "--max-buffer-memory" not in bounded  # rclone's shared pool stalled every reader once outgrown
    assert _value(bounded, "--buffer-size") == "0"
    assert _value(bounded, "--vfs-read-chunk-streams") == "0"
    assert _value(bounded, "--vfs-read-chunk-size-limit") == "off"  # other flags are kept
    assert not any(arg.startswith("--vfs-read-chunk-streams=") for arg in bounded)


def test_rclone_refuses_a_bound_below_what_it_needs_to_run():
    with pytest.raises(InvalidSpec, match="at least 184 MiB"):
        rclone_memory_flags(["rclone"], 183)
    assert "--buffer-size" in rclone_memory_flags(["rclone"], 184)


def test_rclone_gets_a_go_memory_limit_and_a_private_remote_control(tmp_path):
    spec = MountSpec(uri="s3://bkt/", mount_dir=str(tmp_path / "m"), backend="rclone", memory_mb=300)
    settings = S3Settings(endpoint_url="http://127.0.0.1:1", region="us-east-1", access_key_id="AK",
                          secret_access_key="SECRET")
    (tmp_path / "rc.sock").write_text("")  # left by a killed rclone: the next one could not bind it
    env = BACKENDS["rclone"].environment(spec, settings, str(tmp_path))
    assert env["GOMEMLIMIT"] == "300MiB"
    assert not (tmp_path / "rc.sock").exists()
    try:
        argv = BACKENDS["rclone"].command(spec, settings, str(tmp_path))
    except MountctlError:
        pytest.skip("rclone is not installed")
    assert _value(argv, "--rc-addr") == f"unix://{tmp_path}/rc.sock" and "--rc-no-auth" in argv
    assert "SECRET" not in " ".join(argv)


def test_s3fs_bound_caps_parallel_parts_dirty_data_and_the_stat_cache():
    options = ["url=http://x", "multipart_size=64", "parallel_count=20", "max_dirty_data=5120"]
    bounded = dict(o.split("=", 1) for o in s3fs_memory_options(options, 128))
    budget = 128 - 24
    assert int(bounded["parallel_count"]) * int(bounded["multipart_size"]) <= budget // 2 or \
        bounded["parallel_count"] == "1"
    assert bounded["max_dirty_data"] == str(budget) and bounded["url"] == "http://x"
    assert int(bounded["max_stat_cache_size"]) * 400 <= budget * MIB // 4
    assert s3fs_memory_options(["max_dirty_data=20"], 64)[-4:][2] == "max_dirty_data=50"  # s3fs's minimum


def test_mount_s3_bound_is_its_memory_target_and_never_under_its_minimum():
    bounded = mount_s3_memory_flags(["mount-s3", "b", "/m", "--max-threads", "64"], 1024)
    assert _value(bounded, "--memory-target") == "1024"
    assert _value(bounded, "--max-threads") == "64"  # FUSE threads, not S3 requests: left alone
    # Mountpoint refuses a target under 512 MiB: a smaller bound is the least it can keep to.
    assert _value(mount_s3_memory_flags(["mount-s3", "b", "/m"], 256), "--memory-target") == "512"


def test_requests_that_differ_only_in_memory_bound_share_one_mount():
    settings = S3Settings(endpoint_url="http://127.0.0.1:1", region="us-east-1")
    small = MountSpec(uri="s3://bkt/", mount_dir="/m", memory_mb=128)
    large = small.replace(memory_mb=1024)
    assert sharing_identity(small, settings) == sharing_identity(large, settings)
    assert MountSpec.from_dict(large.to_dict()).memory_mb == 1024


@pytest.mark.parametrize("bad", [0, 63, -1, 1.5, "128", True])
def test_a_memory_bound_must_be_whole_mib_of_at_least_64(bad):
    with pytest.raises(InvalidSpec, match="memory_mb"):
        MountSpec(uri="s3://bkt/", mount_dir="/m", memory_mb=bad)


# -- command line -----------------------------------------------------------------------------------------


def test_cli_parses_the_exporter_and_the_memory_bound():
    args = _parser().parse_args(["exporter"])
    assert (args.command, args.listen, args.timeout) == ("exporter", "127.0.0.1:9464", 2.0)
    args = _parser().parse_args(["exporter", "--listen", "0.0.0.0:9100", "--timeout", "1"])
    assert (args.listen, args.timeout) == ("0.0.0.0:9100", 1.0)
    args = _parser().parse_args(["mount", "s3://bkt/", "/m", "--memory-mb", "512"])
    assert args.memory_mb == 512
    assert _parser().parse_args(["mount", "s3://bkt/", "/m"]).memory_mb is None


def test_listen_addresses():
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen(":9100") == ("127.0.0.1", 9100)
    assert parse_listen("[::1]:9100") == ("::1", 9100)
    for bad in ("9464", "host:", "host:port", "h:70000"):
        with pytest.raises(MountctlError, match="HOST:PORT"):
            parse_listen(bad)


def test_a_training_mounts_bound_grows_with_what_the_plan_reads_at_once():
    from mountctl.pytorch.data.sources.mountpoint import memory_bound_mb

    one, four = memory_bound_mb(1), memory_bound_mb(4)
    assert 4 * 64 <= four - one + 64 and four > one >= 184  # at least what rclone needs to read
    assert memory_bound_mb(4, shards_ahead=2) == memory_bound_mb(12)
    MountSpec(uri="s3://bkt/", mount_dir="/m", memory_mb=memory_bound_mb(0))  # valid even for no workers


def test_the_exporter_serves_its_three_paths_over_http():
    import urllib.error
    import urllib.request

    from mountctl.observability.exporter import Exporter

    with Exporter("127.0.0.1", 0, timeout_s=1.0) as exporter:
        host, port = exporter.address
        base = f"http://{host}:{port}"

        def get(path: str) -> tuple[int, str, str]:
            try:
                with urllib.request.urlopen(base + path, timeout=10) as response:
                    return response.status, response.headers["Content-Type"], response.read().decode()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.headers["Content-Type"], exc.read().decode()

        assert get("/healthz")[0] == 200
        code, _, body = get("/readyz")
        assert code == 200 and body.startswith("ready:")  # this test session's registry has no mounts
        code, content_type, body = get("/metrics")
        assert code == 200 and content_type.startswith("text/plain; version=")
        assert "# TYPE mountctl_mount_up gauge" in body
        assert get("/nope")[0] == 404
