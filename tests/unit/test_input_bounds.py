"""Values that were taken and failed later (or misbehaved) now get one line and exit 1 before anything starts."""

from __future__ import annotations

import errno
import socket

import pytest

from mountctl.cli import main as mountctl_main
from mountctl.errors import InvalidSpec, MountctlError
from mountctl.local_s3.far_proxy import FarProfile, render_config
from mountctl.observability.exporter import address_family, readiness
from resnet import main as resnet_main


def _one_line(capsys, status: int) -> str:
    err = capsys.readouterr().err
    assert status == 1, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("argv", [["status", "--timeout", "0"], ["status", "--timeout", "-2"],
                                  ["exporter", "--timeout", "0"], ["exporter", "--interval", "0"],
                                  ["exporter", "--timeout", "nan"]])
def test_a_bound_of_zero_or_less_is_refused(argv, capsys):
    with pytest.raises(SystemExit) as done:
        mountctl_main(argv)
    line = _one_line(capsys, done.value.code)
    assert "more than 0" in line or "not a number" in line or "at most" in line


def test_a_latency_past_the_bound_is_refused_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    line = _one_line(capsys, mountctl_main(["local-s3", "start", "--profile", "far", "--latency-ms", "20000"]))
    assert "latency_ms" in line and "10000" in line
    assert not (tmp_path / "home" / "local-s3" / "server.json").exists()


def test_a_latency_over_a_second_is_a_valid_profile():
    assert FarProfile(latency_ms=1500).latency_ms == 1500  # readiness allows for it (test_bad_input.py)


@pytest.mark.parametrize("rate", [1e-7, 0.0004])
def test_a_rate_that_would_round_to_nginx_unlimited_is_refused(rate, tmp_path, monkeypatch, capsys):
    with pytest.raises(InvalidSpec, match="at least 0.001"):
        FarProfile(rate_mb_s=rate)
    monkeypatch.setenv("MOUNTCTL_HOME", str(tmp_path / "home"))
    _one_line(capsys, mountctl_main(["local-s3", "start", "--profile", "far", "--rate-mb-s", str(rate)]))
    assert not (tmp_path / "home" / "local-s3" / "server.json").exists()


def test_the_smallest_rate_still_caps():
    conf = render_config(FarProfile(rate_mb_s=0.001), upstream="127.0.0.1:1", port=2, workdir="/w", modules_dir="/m")
    assert "limit_rate 1000;" in conf


def test_a_metrics_port_in_use_is_refused_before_the_mount_and_dataset(capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = _one_line(capsys, resnet_main(["train", "s3://no-server-asked/data/", "--metrics-port", str(port)]))
    assert f"--metrics-port {port} is in use" in line


def test_a_peer_named_twice_is_refused(capsys):
    line = _one_line(capsys, resnet_main(["bench", "s3://no-server-asked/bench/", "--peers", "litdata,litdata"]))
    assert "litdata more than once" in line


def test_an_ipv6_listen_address_on_an_ipv4_only_host_is_one_line(monkeypatch):
    """A fake: no IPv4-only host can be had on demand, so the kernel's EAFNOSUPPORT for AF_INET6 is stood in."""
    real_socket = socket.socket

    def ipv4_only(family: int = socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", ipv4_only)
    with pytest.raises(MountctlError, match="cannot listen on AF_INET6 addresses .* use 127.0.0.1:9464"):
        address_family("::1", 9464)
    assert address_family("127.0.0.1", 9464) == socket.AF_INET


def test_readiness_counts_only_broken_mounts():
    """'not-permitted' (root without allow_other) and 'busy' serve their owner: the node stays ready."""
    row = {"dir": "/a", "uri": "s3://a/", "backend": "rclone", "state": "mounted", "up": False}
    for state in ("not-permitted", "busy", "unprobed", "slow"):
        assert readiness([{**row, "health": {"state": state}}])[0], state
    for state in ("unresponsive", "dead", "unmounted"):
        assert not readiness([{**row, "health": {"state": state}}])[0], state
    assert not readiness([{**row, "state": "recovering", "health": {"state": "recovering"}}])[0]
