#!/usr/bin/env bash
# Sets everything up, then checks: lint, types, the fast unit layer, and the end-to-end suite
# against a real local S3 and real FUSE mounts. Extra arguments go to the end-to-end pytest run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

# mount-s3's own tests (its parsers, flag refusals and object-list checks) and clippy, in the target directory
# scripts/build_mount_s3.sh builds into and its release profile, so the CRT is not compiled again.
crate_started=$SECONDS
crate_target=${MOUNTCTL_BUILD_CACHE:-$HOME/.cache/mountctl}/mount-s3-target
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
crate_log=$(mktemp)
if ! CARGO_TARGET_DIR=$crate_target "$cargo" test --release --locked --manifest-path mount-s3/Cargo.toml \
    >"$crate_log" 2>&1; then
  cat "$crate_log" >&2; rm -f "$crate_log"
  echo "test.sh: mount-s3's cargo test failed (above)" >&2; exit 1
fi
grep "^test result:" "$crate_log" | sed 's/^/test.sh: mount-s3 cargo test: /'
if "$cargo" clippy --version >/dev/null 2>&1; then
  if ! CARGO_TARGET_DIR=$crate_target "$cargo" clippy --release --locked --all-targets \
      --manifest-path mount-s3/Cargo.toml -- -D warnings >"$crate_log" 2>&1; then
    cat "$crate_log" >&2; rm -f "$crate_log"
    echo "test.sh: clippy found problems in mount-s3 (above)" >&2; exit 1
  fi
else
  echo "test.sh: clippy is not installed (rustup component add clippy): mount-s3 not linted"
fi
rm -f "$crate_log"
echo "test.sh: mount-s3's cargo test and clippy took $((SECONDS - crate_started)) s"

.venv/bin/ruff check mountctl benchmarks tests resnet.py examples

run_pytest() {
  set +e
  .venv/bin/python -m pytest "$@"
  local code=$?
  set -e
  if [ "$code" -eq 5 ]; then
    echo "test.sh: pytest collected no tests for: $*; that is a failure" >&2
    return 1
  fi
  return "$code"
}

# mypy and the unit layer run side by side, mypy's report printed after.  The unit layer spends about half its
# time in the waits its timing tests need, so it runs on two xdist workers, which overlap them (23-24 s beside
# mypy on 2 cores, against 27-30 s in one process; `MOUNTCTL_UNIT_WORKERS=0` runs it in this process).
started=$SECONDS
types_log=$(mktemp)
.venv/bin/mypy > "$types_log" 2>&1 &
types=$!
trap 'kill "$types" 2>/dev/null || true; rm -f "$types_log"' EXIT  # stopped early: no mypy left running
unit_code=0
unit_workers=${MOUNTCTL_UNIT_WORKERS:-2}
run_pytest -q -m unit -p no:cacheprovider -n "$unit_workers" --dist loadfile tests/unit \
  || unit_code=$?  # the folder: no end-to-end file imported
types_code=0
wait "$types" || types_code=$?
cat "$types_log"
echo "test.sh: types and unit layer took $((SECONDS - started)) s"
[ "$types_code" -eq 0 ] || { echo "test.sh: mypy failed (above)" >&2; exit "$types_code"; }
[ "$unit_code" -eq 0 ] || exit "$unit_code"
# The end-to-end tests spend much of their time waiting (on S3 round trips, mounts, child processes), so they
# run in parallel (pytest-xdist): two workers per CPU (at most 8), each file whole on one worker
# (MOUNTCTL_TEST_WORKERS overrides; 0 runs them in this process).  On 2 cores 4 workers keep both busy for all
# but the last minute (768-830 s; 3 workers took 880-920 s).
# The slowest tests are listed at the end, so each CI log shows where its time went.
cpus=$(nproc)
workers=${MOUNTCTL_TEST_WORKERS:-$(( cpus * 2 < 8 ? cpus * 2 : 8 ))}
run_pytest -ra -m "not unit" --durations=25 -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
