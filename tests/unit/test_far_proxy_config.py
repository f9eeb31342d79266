"""The far store's profile is validated at construction and rendered into an nginx configuration that keeps to its workdir."""

from __future__ import annotations

import os

import pytest

from mountctl.errors import InvalidSpec
from mountctl.local_s3.far_proxy import FarProfile, FarProxy, render_config


def _render(profile: FarProfile, workdir: str = "/w/far") -> str:
    return render_config(profile, upstream="127.0.0.1:8333", port=18000, workdir=workdir,
                         modules_dir="/usr/lib/nginx/modules")


def test_the_default_profile_models_s3_in_the_same_region():
    profile = FarProfile()
    assert 10 <= profile.latency_ms <= 100 and 50 <= profile.rate_mb_s <= 100


@pytest.mark.parametrize("fields", [{"latency_ms": -1}, {"rate_mb_s": -0.5}, {"latency_ms": float("nan")},
                                    {"rate_mb_s": float("inf")}, {"latency_ms": "20"}, {"rate_mb_s": True},
                                    {"latency_ms": 120_000}])
def test_a_profile_out_of_range_is_refused_at_construction(fields):
    with pytest.raises(InvalidSpec, match="far profile"):
        FarProfile(**fields)


def test_profile_fields_are_keyword_only():
    with pytest.raises(TypeError):
        FarProfile(20, 50)  # type: ignore[misc]


def test_latency_becomes_a_lua_sleep_loaded_after_the_ndk():
    conf = _render(FarProfile(latency_ms=25, rate_mb_s=50))
    assert "ngx.sleep(0.025000)" in conf
    assert conf.index("ndk_http_module.so") < conf.index("ngx_http_lua_module.so")
    assert "load_module /usr/lib/nginx/modules/ndk_http_module.so;" in conf


def test_without_latency_no_lua_module_is_needed():
    conf = _render(FarProfile(latency_ms=0, rate_mb_s=50))
    assert "lua" not in conf and "load_module" not in conf


def test_the_rate_cap_is_in_bytes_of_1e6_per_mb_and_needs_buffering():
    conf = _render(FarProfile(latency_ms=20, rate_mb_s=12.5))
    assert "limit_rate 12500000;" in conf
    assert "proxy_buffering on;" in conf and "proxy_max_temp_file_size 0;" in conf
    assert "limit_rate 0;" in _render(FarProfile(rate_mb_s=0))


def test_host_passes_unchanged_and_upstream_connections_are_kept_alive():
    conf = _render(FarProfile())
    assert "proxy_set_header Host $http_host;" in conf
    assert "server 127.0.0.1:8333;" in conf and "keepalive 64;" in conf
    assert 'proxy_set_header Connection "";' in conf and "proxy_http_version 1.1;" in conf


def test_uploads_and_headers_of_any_size_pass():
    conf = _render(FarProfile())
    assert "client_max_body_size 0;" in conf and "large_client_header_buffers 8 64k;" in conf
    assert "proxy_request_buffering off;" in conf


def test_every_path_nginx_writes_is_under_the_workdir_and_nothing_logs_access():
    conf = _render(FarProfile(), workdir="/w/far")
    for directive in ("pid", "lock_file", "error_log", "client_body_temp_path", "proxy_temp_path",
                      "fastcgi_temp_path", "uwsgi_temp_path", "scgi_temp_path"):
        lines = [line.split() for line in conf.splitlines() if line.split()[:1] == [directive]]
        assert lines and all(line[1].startswith("/w/far/") for line in lines), directive
    assert "access_log off;" in conf and "daemon off;" in conf
    assert "listen 127.0.0.1:18000;" in conf


def test_as_root_the_workers_stay_the_current_user():
    conf = _render(FarProfile())
    assert ("user root" in conf) == (os.geteuid() == 0)


@pytest.mark.parametrize("url", ["https://s3.amazonaws.com", "127.0.0.1:8333", "http://127.0.0.1:8333/bucket"])
def test_the_upstream_must_be_a_plain_http_endpoint(url, tmp_path):
    with pytest.raises(InvalidSpec, match="upstream"):
        FarProxy(url, str(tmp_path))


def test_a_proxy_that_never_started_has_no_endpoint_and_stops_as_a_no_op(tmp_path):
    proxy = FarProxy("http://127.0.0.1:8333", str(tmp_path / "far"))
    assert proxy.endpoint_url is None
    proxy.stop()
    assert not (tmp_path / "far").exists()


def test_a_missing_nginx_names_the_debian_packages_and_setup(tmp_path, monkeypatch):
    """A stand-in for a machine without nginx: this one has it, so the lookup is made to find nothing."""
    from mountctl.errors import LocalS3Error
    from mountctl.local_s3 import far_proxy

    monkeypatch.setattr(far_proxy, "find_nginx", lambda: None)
    with pytest.raises(LocalS3Error, match="nginx-light.*libnginx-mod-http-lua.*scripts/setup.sh"):
        FarProxy("http://127.0.0.1:8333", str(tmp_path / "far")).start()
    assert not (tmp_path / "far").exists()


def test_a_missing_lua_module_is_named_before_nginx_runs(tmp_path, monkeypatch):
    """A stand-in for nginx without its Lua module: the modules directory is pointed at an empty one."""
    from mountctl.errors import LocalS3Error
    from mountctl.local_s3 import far_proxy

    monkeypatch.setattr(far_proxy, "_modules_dir", lambda nginx: str(tmp_path))
    with pytest.raises(LocalS3Error, match="Lua module.*libnginx-mod-http-lua"):
        FarProxy("http://127.0.0.1:8333", str(tmp_path / "far"), nginx="/bin/false").start()
    assert not (tmp_path / "far").exists()
