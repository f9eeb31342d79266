#!/usr/bin/env bash
# Builds .venv-dlio: DLIO (MLPerf Storage's engine) in an environment of its own, for
# `resnet.py bench --suite mlperf`. Safe to run again (a stamp of the pins skips a finished install).
# --install-only installs the packages and stops before the import check (scripts/setup.sh runs it beside
# .venv's own install, then runs this again with --quiet for the check: --quiet prints nothing when all is done).
#
# Why its own environment: dlio-benchmark 2.0.0 declares tensorflow, nvidia-dali and torch as
# hard dependencies and pins pydftracer; installed into .venv they would move pins that mountctl's
# own packages rely on. So DLIO goes in with --no-deps and its real run-time needs are listed here.
#
# TensorFlow: dlio_benchmark/main.py imports it unconditionally (profiler_factory -> tf_profiler),
# although the PyTorch path never calls it. tensorflow-cpu is the real package, without CUDA
# (a 274 MB wheel against 600+ MB for `tensorflow` with its CUDA extras); a stand-in module would be
# a fake, and editing DLIO is ruled out. See docs/mlperf.md.
#
# Torch: DLIO's PyTorch reader needs torch; PyPI's torch wheel is CUDA-built and pulls several GB of
# nvidia-* wheels. .venv already holds exactly that torch, so .venv-dlio reads .venv's site-packages
# after its own (a .pth file: Python's documented way to add a directory to sys.path). DLIO's own
# pins win over .venv's; torch, torchvision and their dependencies come from .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-dlio
base_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null) \
  && [ -x .venv/bin/uv ] || { echo "setup_dlio: .venv (or its uv) is missing or broken; run scripts/setup.sh first" >&2; exit 1; }

pins=(
  dlio-benchmark==2.0.0
  pydftracer==1.0.2          # required: DLIO's fallback without it fails in Profile.__init__
  mpich==5.0.2               # MPI from PyPI: libmpi.so and mpirun inside the venv
  mpi4py==4.1.2
  tensorflow-cpu==2.21.0     # only to satisfy the unconditional import (see above)
  hydra-core==1.3.2
  omegaconf==2.3.0
  pandas==2.3.3
  numpy==2.4.6               # the same numpy as .venv, whose torch shares this process
  h5py==3.14.0
  psutil==7.2.2
  PyYAML==6.0.3
  pillow==13.0.0
)
# Two stamps: the packages are installed (--install-only, which scripts/setup.sh runs beside .venv's own
# install), and the environment passed its import check (which needs .venv's torch).
stamp=$venv/.pins.sha256
installed=$venv/.installed.sha256
want=$(printf '%s\n' "${pins[@]}" "$base_site" | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  # scripts/setup.sh's two runs (--install-only, --quiet) say nothing when there is nothing to do
  case "${1:-}" in --install-only|--quiet) ;; *) echo "setup_dlio: ready, already up to date ($venv/bin/dlio_benchmark)" ;; esac
  exit 0
fi

python=${PYTHON:-python3}
if [ ! -f "$installed" ] || [ "$(cat "$installed")" != "$want" ]; then
  echo "setup_dlio: installing DLIO 2.0.0, MPICH and tensorflow-cpu into $venv (expect about 1 min on a fresh machine; about 1.5 GB)"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # The .pth goes in after uv has run, so that uv never sees (or uninstalls from) .venv's packages.
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -f "$site/zz_mountctl_venv.pth"
  uv=(.venv/bin/uv pip install -q --python "$venv/bin/python" --compile-bytecode)  # see scripts/setup.sh
  "${uv[@]}" "${pins[@]:1}"
  # --no-deps leaves DLIO's declared tensorflow/dali/torch out on purpose.
  "${uv[@]}" --no-deps dlio-benchmark==2.0.0
  echo "$base_site" > "$site/zz_mountctl_venv.pth"
  echo "$want" > "$installed"
  echo "setup_dlio: DLIO's packages installed in $SECONDS s"
fi
[ "${1:-}" = "--install-only" ] && exit 0

echo "setup_dlio: checking that DLIO imports (expect 5-20 s)"
TF_CPP_MIN_LOG_LEVEL=3 TF_ENABLE_ONEDNN_OPTS=0 "$venv/bin/python" -c "import dlio_benchmark.main, mpi4py.MPI, torch, numpy, pandas, hydra" \
  || { echo "setup_dlio: DLIO's environment did not import; see uv's output above" >&2; exit 1; }
[ -x "$venv/bin/mpirun" ] || { echo "setup_dlio: mpirun is missing from $venv/bin (the mpich wheel)" >&2; exit 1; }
echo "$want" > "$stamp"
echo "setup_dlio: ready after $((SECONDS / 60)) min $((SECONDS % 60)) s ($venv/bin/dlio_benchmark, $venv/bin/mpirun)"
