"""The MLPerf suite's pure parts: DLIO's overrides, its summary in MLPerf Storage's terms, the accelerator search."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks.harness.dlio import DLIO_VENV_ENV, dlio_venv, read_summary
from benchmarks.harness.mlperf import (
    AU_TARGET,
    SCALES,
    MlperfConfig,
    accelerators_kept,
    dlio_overrides,
    kept_table,
    mount_routes,
    search_accelerators,
)
from benchmarks.harness.report import mlperf_markdown, write_report
from mountctl import InvalidSpec

UNET3D, IMAGES = SCALES["full"]

# The fields of a summary.json that dlio-benchmark 2.0.0 wrote here (2 ranks, 1 epoch), host facts left out.
DLIO_SUMMARY = {
    "start": "2026-11-24T23:13:59.965950", "num_accelerators": 2, "num_hosts": 1, "hostname": "vm",
    "metric": {"train_au_percentage": [24.82181363070209], "train_au_mean_percentage": 24.82181363070209,
               "train_au_meet_expectation": "fail", "train_au_stdev_percentage": 0.0,
               "train_throughput_samples_per_second": [8.31012109042327],
               "train_throughput_mean_samples_per_second": 8.31012109042327,
               "train_throughput_stdev_samples_per_second": 0.0, "train_io_mean_MB_per_second": 2.0775302726058174,
               "train_io_stdev_MB_per_second": 0.0},
    "num_files_train": 16, "num_files_eval": 0, "num_samples_per_file": 1, "epochs": 1,
}


def _run(count: int, au: float, status: str = "ok") -> dict:
    return {"workload": "unet3d", "route": "local-disk", "store": "-", "accelerators": count, "au_pct": au,
            "samples_per_s": 21.0 * count, "status": status}


def test_overrides_keep_dlios_own_workload_config_and_only_override_it():
    args = dlio_overrides(UNET3D, "/data/u", "/out/u")
    assert args[0] == "workload=unet3d_h100"
    assert all(a.startswith(("++workload.", "hydra.run.dir=")) for a in args[1:])
    assert "++workload.train.computation_time=0.323" in args  # the H100 compute time, as shipped
    assert "++workload.reader.batch_size=7" in args
    assert "++workload.dataset.data_folder=/data/u" in args and "++workload.output.folder=/out/u" in args
    assert "++workload.workflow.generate_data=True" not in args


def test_overrides_for_generation_write_and_do_not_train():
    args = dlio_overrides(UNET3D, "/data/u", "/out/u", generate=True)
    assert "++workload.workflow.generate_data=True" in args and "++workload.workflow.train=False" in args


def test_image_workload_runs_on_dlios_pytorch_reader_over_jpeg():
    args = dlio_overrides(IMAGES, "/d", "/o")
    assert args[0] == "workload=resnet50_h100"
    for override in ("++workload.framework=pytorch", "++workload.reader.data_loader=pytorch",
                     "++workload.dataset.format=jpeg"):
        assert override in args


def test_summary_reads_au_and_samples_per_second(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(DLIO_SUMMARY))
    summary = read_summary(str(path))
    assert summary["accelerators"] == 2
    assert summary["au_pct"] == pytest.approx(24.82)
    assert summary["au_pct_per_epoch"] == [pytest.approx(24.82)]
    assert summary["samples_per_s"] == pytest.approx(8.31)


def test_summary_without_training_metrics_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({**DLIO_SUMMARY, "metric": {}}))
    with pytest.raises(InvalidSpec, match="not a DLIO training summary"):
        read_summary(str(path))


def test_accelerators_kept_is_the_last_count_before_the_first_failure():
    assert accelerators_kept([_run(1, 97.0), _run(2, 93.0), _run(4, 71.0)]) == 2
    assert accelerators_kept([_run(4, 95.0), _run(1, 99.0), _run(2, 96.0)]) == 4  # order of runs does not matter
    assert accelerators_kept([_run(1, AU_TARGET - 0.1)]) == 0
    assert accelerators_kept([_run(1, 99.0), _run(2, 0.0, status="failed: DLIO exited")]) == 1


def test_search_stops_after_the_first_count_below_the_target():
    asked: list[int] = []

    def run_one(count: int) -> dict:
        asked.append(count)
        return _run(count, 95.0 if count < 4 else 60.0)

    runs = search_accelerators((4, 1, 8, 2), run_one)
    assert asked == [1, 2, 4]
    assert accelerators_kept(runs) == 2


def test_default_counts_stay_within_two_ranks_per_core():
    counts = MlperfConfig(uri="s3://bench/p/").counts
    assert counts[0] == 1 and max(counts) <= 2 * (os.cpu_count() or 1)
    assert MlperfConfig(uri="s3://bench/p", accelerators=(2, 1, 2)).counts == (1, 2)


@pytest.mark.parametrize("bad", [{"scale": "huge"}, {"workloads": ("bert",)}, {"workloads": ()},
                                 {"accelerators": (0,)}])
def test_config_refuses_bad_input(bad):
    with pytest.raises(InvalidSpec):
        MlperfConfig(uri="s3://bench/p/", **bad)


def test_missing_dlio_environment_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv(DLIO_VENV_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(InvalidSpec, match="scripts/setup_dlio.sh"):
        dlio_venv()


def test_kept_table_gives_each_route_its_ratio_to_local_disk():
    runs = [_run(1, 99.0), _run(2, 95.0), _run(4, 80.0),
            *({**_run(n, au), "route": "mount/s3fs", "store": "far"} for n, au in ((1, 96.0), (2, 70.0)))]
    rows = {(r["route"], r["store"]): r for r in kept_table(runs)}
    assert rows[("local-disk", "-")]["accelerators_kept"] == 2
    mount = rows[("mount/s3fs", "far")]
    assert mount["accelerators_kept"] == 1 and mount["x_local_disk"] == 0.5 and mount["au_pct"] == 96.0


def _result(runs: list[dict]) -> dict:
    return {"started": "2026-11-24T00:00:00+00:00", "seconds": 1.0, "au_target_pct": AU_TARGET,
              "machine": {"cpu_count": 2, "load_average": [1.0, 1.0, 1.0], "load_average_end": [1.0, 1.0, 1.0]},
              "stores": {"far": {"endpoint": "http://127.0.0.1:1", "latency_ms": 20.0, "rate_mb_s": 50.0}},
              "workloads": [{"name": "unet3d", "config": "unet3d_h100", "batch_size": 7, "computation_time": 0.323,
                             "samples_per_s_asked": 21.7, "files": 8, "record_bytes": 1024, "read_threads": 1,
                             "epochs": 1}],
              "runs": runs, "kept": kept_table(runs)}


RUNS = [_run(1, 99.0), _run(2, 80.0), {"workload": "unet3d", "route": "s3 (DLIO)", "store": "far",
                                      "status": "not possible: no S3 reader"}]


def test_report_section_speaks_mlperf_storage_terms():
    text = mlperf_markdown(_result(RUNS))
    assert "Accelerators kept at AU >= 90 %" in text
    assert "| unet3d | - | local-disk | 1 | 99.0 |" in text
    assert "s3 (DLIO): not possible" in text


def test_each_program_is_measured_plain_and_with_its_cache_warmed_ahead():
    assert mount_routes(("rclone", "s3fs"), True) == ["mount/rclone", "mount/rclone+warm", "mount/s3fs",
                                                      "mount/s3fs+warm"]
    assert mount_routes(("rclone",), False) == ["mount/rclone"]


def test_a_quick_run_keeps_to_the_defaults_and_mount_s3s_own_choice_at_two_accelerators():
    assert mount_routes(("mount-s3", "rclone", "s3fs"), True, quick=True) == [
        "mount/mount-s3", "mount/mount-s3+no-warm", "mount/rclone", "mount/s3fs", "mount/mount-s3+index"]
    assert MlperfConfig(uri="s3://bench/p/", scale="quick").counts == (2,)
    assert MlperfConfig(uri="s3://bench/p/", scale="quick", accelerators=(1, 2)).counts == (1, 2)


def test_mount_s3_warms_by_itself_so_its_other_choice_is_measured_without_the_warm():
    assert mount_routes(("mount-s3",), True) == ["mount/mount-s3", "mount/mount-s3+no-warm", "mount/mount-s3+index"]


def test_mount_s3_is_measured_once_more_mounted_from_a_list_of_the_objects():
    assert mount_routes(("mount-s3", "rclone"), False) == ["mount/mount-s3", "mount/rclone", "mount/mount-s3+index"]


def test_the_report_writes_the_table_the_runs_and_a_chart(tmp_path):
    paths = write_report(_result(RUNS), str(tmp_path), "mlperf")
    assert sorted(paths) == ["json", "md", "png"]
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.loads(open(paths["json"]).read())["files"]["png"] == paths["png"]
