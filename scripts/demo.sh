#!/usr/bin/env bash
# Sets everything up, then runs the main job on the embedded local S3:
#   1. start the local S3 server (SeaweedFS on 127.0.0.1) and point the AWS variables at it;
#   2. upload a few objects, mount the bucket with every installed mount program, read through it;
#   3. make a small synthetic ImageNet-style dataset and train ResNet-50 briefly with each
#      source kind (mountpoint, s3io, fsspec) through the far store (a proxy with S3's latency and
#      per-connection rate), printing images/s per kind.
# Everything it starts it stops again, also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"

mnt=$(mktemp -d /tmp/mountctl-demo-XXXXXX)
finish() {
  mountctl unmount "$mnt/m" >/dev/null 2>&1 || true
  rm -rf "$mnt"
  stop_local_s3_if_started 2>/dev/null || true
}
trap finish EXIT
trap 'exit 130' INT TERM
source scripts/local-s3.sh

echo "== mounting s3://mountctl/demo/ with each mount program"
python - <<'PY'
import boto3
s3 = boto3.client("s3")
for i in range(3):
    s3.put_object(Bucket="mountctl", Key=f"demo/file-{i}.txt", Body=f"hello from object {i}\n".encode())
PY
# Ask mountctl which programs it can run (as `mountctl doctor` does), not `command -v`: its own mount-s3 lives in
# .venv/libexec, off PATH, so that AWS's, when installed, wins. mount-s3 first: it is auto's first choice.
installed=" $(python -c 'import mountctl; print(*mountctl.installed_backends())') "
for backend in mount-s3 rclone s3fs; do
  if [[ "$installed" != *" $backend "* ]]; then echo "-- $backend: not installed (mountctl doctor says why), skipped"; continue; fi
  mountctl mount s3://mountctl/demo/ "$mnt/m" --backend "$backend"
  echo "-- $backend: ls shows: $(ls "$mnt/m" | tr '\n' ' ')"
  echo "-- $backend: cat file-1.txt: $(cat "$mnt/m/file-1.txt")"
  mountctl status
  mountctl unmount "$mnt/m"
done

echo "== training ResNet-50 from S3 with each source kind"
python resnet.py demo s3://mountctl/demo-shards/
