#!/usr/bin/env bash
# Builds mountctl's mount-s3 (mount-s3/: our front end on AWS's published Mountpoint crates) into
# .venv/libexec/mount-s3, off PATH: AWS's own mount-s3, where installed, always wins (mountctl/programs.py).
# The build cache lives outside the clone (MOUNTCTL_BUILD_CACHE, default ~/.cache/mountctl): the CRT's C
# sources take most of a cold build, and a second clone, CI or a re-run on the same machine reuse it.
# Safe to run again: nothing is built while the installed binary matches the crate's sources.
# `--check` only answers whether it does (exit 0) or a build is due (exit 1); `--missing` prints the Debian
# packages the build needs and this machine lacks (scripts/setup.sh installs them), one word each, or nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# What bindgen (in mountpoint-s3-crt-sys) loads: libclang itself (`libclang.so`, `libclang.so.1`,
# `libclang-14.so.1`), never `libclang-cpp.so.14`, the C++ interface a fresh image ships, which a probe for
# `libclang*.so*` mistakes for it. bindgen also parses C headers with clang's own `stddef.h`
# (libclang-common-N-dev): libclang-dev brings both.
has_libclang() {
  { compgen -G "/usr/lib/llvm-*/lib/libclang.so*" || compgen -G "/usr/lib/*/libclang.so*" \
      || compgen -G "/usr/lib/*/libclang-[0-9]*.so*" || compgen -G "/usr/lib/llvm-*/lib/libclang-[0-9]*.so*"; } >/dev/null \
    && compgen -G "/usr/lib/llvm-*/lib/clang/*/include/stddef.h" >/dev/null
}
missing_packages() {
  command -v cmake >/dev/null || echo cmake
  command -v pkg-config >/dev/null || echo pkg-config
  # pkg-config itself may be missing: the header says whether libfuse3-dev is in.
  [ -e /usr/include/fuse3/fuse.h ] || echo libfuse3-dev
  has_libclang || echo libclang-dev
}
if [ "${1:-}" = "--missing" ]; then
  missing_packages
  exit 0
fi
cache=${MOUNTCTL_BUILD_CACHE:-$HOME/.cache/mountctl}
target=$cache/mount-s3-target
dest=.venv/libexec/mount-s3
stamp=.venv/libexec/.mount-s3.sha256
# Every source file, in every folder of src/ (a change in src/ahead/ must rebuild too), in a fixed order.
want=$( (cat mount-s3/Cargo.toml mount-s3/Cargo.lock mount-s3/build.rs
         find mount-s3/src -name '*.rs' -print0 | LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -d' ' -f1)
if [ -x "$dest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
[ "${1:-}" = "--check" ] && exit 1  # not current: a build is due
fail() { echo "build_mount_s3: $*" >&2; exit 1; }
cargo=$(command -v cargo || true)
[ -n "$cargo" ] || { [ -x "$HOME/.cargo/bin/cargo" ] && cargo=$HOME/.cargo/bin/cargo; }
[ -n "$cargo" ] || fail "cargo is not installed: install Rust 1.95 or newer (https://rustup.rs), then run scripts/setup.sh again"
mapfile -t missing < <(missing_packages)
[ ${#missing[@]} -eq 0 ] || fail "building mount-s3 needs ${missing[*]}: apt-get install ${missing[*]} (scripts/setup.sh does)"
mkdir -p "$cache"
if [ -x "$target/release/mount-s3" ]; then
  echo "setup: building mount-s3 (the crates are cached in $target; expect under a minute)"
else
  echo "setup: building mount-s3 from AWS's Mountpoint crates (expect 5-15 min on a fresh 2-core machine, beside the other installs; once: cached in $target)"
fi
log=$cache/mount-s3-build.log
started=$SECONDS
if ! CARGO_TARGET_DIR=$target "$cargo" build --release --locked --manifest-path mount-s3/Cargo.toml >"$log" 2>&1; then
  tail -n 25 "$log" >&2
  fail "cargo build failed (the whole log: $log); a missing C library or tool is named above"
fi
install -D -m 0755 "$target/release/mount-s3" "$dest"
echo "$want" > "$stamp"
took=$((SECONDS - started))
echo "setup: mount-s3 built in $((took / 60)) min $((took % 60)) s: $("$dest" --version)"
