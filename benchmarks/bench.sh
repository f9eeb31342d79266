#!/usr/bin/env bash
# Benchmarks every source kind side by side on the embedded local S3:
#   1. set up (Debian mount programs, .venv) and start the local S3 server unless it is running;
#   2. run `python resnet.py bench s3://mountctl/bench/ ARGS...`: it makes (or reuses) synthetic
#      datasets under that prefix, measures the limits (local disk, raw GET), the loaders of every
#      source kind and mount program, and ResNet-50 training, and writes JSON, Markdown and PNG
#      under bench-results/ (or --out).
#   benchmarks/bench.sh --quick          a first look: the far store only (a proxy with S3's latency), ~8 min
#   benchmarks/bench.sh --quick --store both   the same in both stores (local: the endpoint itself)
#   benchmarks/bench.sh --store local    only the endpoint itself
#   benchmarks/bench.sh --accelerator gpu
# Stops the local S3 again if it started it, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

trap 'stop_local_s3_if_started 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
source scripts/local-s3.sh

python resnet.py bench s3://mountctl/bench/ "$@"
