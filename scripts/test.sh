#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite against a real local S3 and real FUSE mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check mountctl tests resnet.py examples
set +e
.venv/bin/python -m pytest -ra "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$code"
