#!/usr/bin/env bash
# The GPU run (docs/gpu.md): ResNet-50 in bf16 through mountpoint, s3io and fsspec on one GPU, beside the
# synthetic-data ceiling, the loader alone and JPEG decode on CPU and GPU; one table, JSON and logs under $OUT.
#
#   bash .gpu/run.sh               on the GPU machine, from the checkout that holds .gpu/ (7 minutes at most)
#   bash .gpu/run.sh --cpu         the same steps on a CPU with a tiny dataset (tests/test_gpu_pack.py)
#   options: --out DIR (default $OUT, else gpu-results/), --images N, --budget-s S, --sources a,b
#
# It needs only the checkout, this pack and a Python with torch, torchvision and lightning (PYTHON, default
# python3): the pack's wheels go into a temporary directory first on PYTHONPATH, its binaries beside them on
# PATH. rclone serves S3 on 127.0.0.1 from a temporary directory with keys made here, passed by environment
# only. Whatever it starts (the S3 server, mounts, training) is stopped on exit, Ctrl-C or SIGTERM.
set -euo pipefail
pack=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$pack")
python=${PYTHON:-python3}
mode=gpu
out=${OUT:-}
driver_args=()
say() { echo "run.sh: $*"; }
die() { echo "run.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) mode=cpu; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
    --images|--budget-s|--sources) [ $# -ge 2 ] || die "$1 needs a value"; driver_args+=("$1" "$2"); shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown option $1 (bash .gpu/run.sh --help)" ;;
  esac
done
out=${out:-$repo/gpu-results}
[ -f "$pack/MANIFEST.json" ] || die "$pack holds no pack: run \`bash scripts/gpu.sh pack\` where setup.sh has run"
[ -f "$repo/resnet.py" ] || die "$repo is not the mountctl checkout (.gpu must sit at its root, beside resnet.py)"
command -v "$python" >/dev/null || die "no $python: set PYTHON to a Python with torch, torchvision and lightning"
export MOUNTCTL_GPU_STARTED=$(date +%s.%N)

# FUSE first, in the run's first second: the mountpoint source needs /dev/fuse; the other two do not.
made_dev_fuse=""
fuse_problem() {
  grep -qw fuse /proc/filesystems 2>/dev/null || { echo "the kernel lists no fuse file system in /proc/filesystems"; return; }
  if [ ! -e /dev/fuse ] && [ "$(id -u)" = 0 ] && mknod -m 0666 /dev/fuse c 10 229 2>/dev/null; then
    made_dev_fuse=1  # removed again on exit
  fi
  [ -c /dev/fuse ] || { echo "/dev/fuse is missing"; return; }
  (exec 3<>/dev/fuse) 2>/dev/null || echo "/dev/fuse cannot be opened ($(id -un) may not use it)"
}
fuse=$(fuse_problem)
[ -z "$fuse" ] || say "FUSE: the mount cannot run on this machine ($fuse); running s3io and fsspec only"

# The run's directory (0700): keys, the server's data, mounts, caches, logs, and the children's TMPDIR. DataLoader
# workers pass tensors through Unix sockets under TMPDIR (pymp-*/listener-*), whose paths have at most 107 bytes:
# under a long TMPDIR (a test's tmp_path) they fail with "AF_UNIX path too long" and the loader hangs, so a
# TMPDIR longer than 40 characters is passed over for /tmp.
base=${TMPDIR:-/tmp}
[ ${#base} -le 40 ] || base=/tmp
work=$(mktemp -d "$base/mountctl-gpu.XXXXXX")
driver_pid=""
server_pid=""
unpacked=""
mounted_under() {  # mount points under $1, deepest first (read from mountinfo: a dead FUSE mount fails stat)
  awk -v root="$1/" 'index($5, root) == 1 {print $5}' /proc/self/mountinfo | sort -r
}
cleanup() {
  local status=$? group left
  trap - EXIT INT TERM
  set +e
  if [ -n "$driver_pid" ]; then  # the driver stops its current step (its own process group) on SIGTERM
    kill -TERM -- "-$driver_pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$driver_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$driver_pid" 2>/dev/null
  fi
  group=$(cat "$work/step.pgid" 2>/dev/null)
  [ -n "$group" ] && kill -KILL -- "-$group" 2>/dev/null
  # Mounts the run's MOUNTCTL_HOME still lists are unmounted by mountctl (it stops their supervisors), then
  # anything left mounted under the run's directory. Not `mountctl cleanup`: it also stops this user's orphaned
  # servers elsewhere on the machine, which are not the run's to stop.
  if [ -n "$unpacked" ]; then
    timeout 120 "$python" - <<'PY' 2>&1 | sed 's/^/run.sh: /'
import json, subprocess, sys
mountctl = [sys.executable, "-m", "mountctl"]
listed = subprocess.run(mountctl + ["status", "--json"], capture_output=True, text=True, timeout=30).stdout
for row in json.loads(listed or "{}").get("mounts", []):
    done = subprocess.run(mountctl + ["unmount", row["dir"], "--timeout", "20"], capture_output=True, text=True,
                          timeout=40)
    print(f"unmounted {row['dir']}, left mounted by a step" if done.returncode == 0
          else f"could not unmount {row['dir']}: {done.stderr.strip()}")
PY
  fi
  for dir in $(mounted_under "$work"); do
    timeout 20 fusermount3 -uz "$dir" 2>/dev/null || timeout 20 umount -l "$dir" 2>/dev/null
  done
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null
    for _ in $(seq 20); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$server_pid" 2>/dev/null
  fi
  [ -n "$made_dev_fuse" ] && rm -f /dev/fuse
  left=$(mounted_under "$work")
  if [ -z "$left" ]; then
    rm -rf "$work"
  else
    echo "run.sh: left $work in place: still mounted there: $left (fusermount3 -uz DIR as root)" >&2
    status=1
  fi
  say "finished in $(awk -v s="$MOUNTCTL_GPU_STARTED" -v e="$(date +%s.%N)" 'BEGIN {printf "%.0f", e - s}') s (exit $status)"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$work/site" "$work/home" "$work/tmp" "$work/s3" "$work/logs" "$out"

"$python" "$pack/unpack.py" --pack "$pack" --target "$work/site" --bin "$work"
export PATH="$work/bin:$PATH"
export LD_LIBRARY_PATH="$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # holds libfuse3.so.3 alone
export PYTHONPATH="$work/site:$repo${PYTHONPATH:+:$PYTHONPATH}"
export MOUNTCTL_HOME="$work/home" TMPDIR="$work/tmp" PYTHONUNBUFFERED=1
unpacked=1  # mountctl can run now, and clean up after itself
if [ -z "$fuse" ] && ! problem=$(mount-s3 --version 2>&1 >/dev/null); then
  fuse="mount-s3 does not start here: $(echo "$problem" | tail -1)"
  say "FUSE: the mount cannot run on this machine ($fuse); running s3io and fsspec only"
fi

# The S3 server: rclone serve s3 over a local directory, on a loopback port of its own, keys made now. They reach the
# clients and the server by environment only; the file beside them (0600) is for a person debugging the run.
umask 077
keys=$("$python" -c 'import secrets; print("GPU" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30))')
read -r access secret <<<"$keys"
printf 'AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n' "$access" "$secret" > "$work/s3-keys.env"
umask 022
# Port 0: the kernel gives rclone a free port at its bind, so no other process can take it first; s3_ready.py reads
# the port from rclone's log, checks that the listener there is rclone's own socket and that it refuses unsigned
# requests.
: > "$work/rclone.conf"
RCLONE_AUTH_KEY="\"$access,$secret\"" RCLONE_CONFIG="$work/rclone.conf" \
  rclone serve s3 --addr "127.0.0.1:0" --log-file "$work/logs/rclone.log" "$work/s3" &
server_pid=$!
if ! ready=$("$python" "$pack/s3_ready.py" --pid "$server_pid" --log "$work/logs/rclone.log" --timeout-s 20); then
  tail -5 "$work/logs/rclone.log" 2>/dev/null | sed 's/^/run.sh: rclone: /' >&2
  die "rclone serve s3 did not come up as this run's own S3 server within 20 s (the line above says why)"
fi
read -r port refusal <<<"$ready"
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID="$access" AWS_SECRET_ACCESS_KEY="$secret"
unset AWS_ENDPOINT_URL_S3 AWS_PROFILE AWS_DEFAULT_PROFILE AWS_SESSION_TOKEN
say "S3: rclone serve s3 on 127.0.0.1:$port ($(rclone version 2>/dev/null | head -1)), its own listener, an unsigned request refused ($refusal), data in $work/s3"

# The driver runs in a process group of its own, so that cleanup can stop it and whatever step it runs.
setsid "$python" "$pack/drive.py" --mode "$mode" --out "$out" --work "$work" --s3-dir "$work/s3" \
  --fuse-problem "$fuse" --pack "$pack" --repo "$repo" "${driver_args[@]}" &
driver_pid=$!
set +e
wait "$driver_pid"
status=$?
set -e
driver_pid=""
exit "$status"
