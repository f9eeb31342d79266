//! Hands the program the version of AWS's Mountpoint crates it is built from, read from Cargo.lock.
//!
//! Cargo.toml pins the crates; Cargo.lock says what was resolved. Reading the lock here means the version
//! is written in one place only (the pin): `--version`, the log's first line and the client's user agent
//! all follow it, and no copy can go stale.

use std::path::Path;

/// The crate whose version names the build (`mount-s3 built from mountpoint-s3-fs X.Y.Z`).
const NAMED_CRATE: &str = "mountpoint-s3-fs";

fn main() {
    // Read when the script runs, not when it was compiled: a target directory shared between checkouts keeps a
    // compiled script whose compile-time path may be another checkout's, or gone.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for build scripts");
    let lock_path = Path::new(&manifest_dir).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock_path.display());
    println!("cargo:rerun-if-changed=build.rs");
    let lock = std::fs::read_to_string(&lock_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; it is committed beside Cargo.toml", lock_path.display()));
    let version = locked_version(&lock, NAMED_CRATE).unwrap_or_else(|| {
        panic!("{} names no package {NAMED_CRATE}: is it still a dependency in Cargo.toml?", lock_path.display())
    });
    println!("cargo:rustc-env=MOUNTPOINT_S3_FS_VERSION={version}");
}

/// The `version` of the `[[package]]` named `name` in a Cargo.lock (its entries are `name = "..."` followed by
/// `version = "..."`; a crate locked at two versions is not expected here, and the first would win).
fn locked_version<'a>(lock: &'a str, name: &str) -> Option<&'a str> {
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == wanted {
            let next = lines.next()?.trim();
            return next.strip_prefix("version = \"")?.strip_suffix('"');
        }
    }
    None
}
