//! Which build this is. The Mountpoint crates' version comes from Cargo.lock through build.rs, so it is written
//! in one place only: the pin in Cargo.toml.

/// The mountpoint-s3-fs version this program is built from.
pub const FS_VERSION: &str = env!("MOUNTPOINT_S3_FS_VERSION");

/// What `--version` prints after the program's name. mountctl reads the line's start (`mount-s3 built from `)
/// to tell this build from AWS's `mount-s3 1.x`: keep that wording.
pub const VERSION: &str = concat!(
    "built from mountpoint-s3-fs ",
    env!("MOUNTPOINT_S3_FS_VERSION"),
    " (mountctl front end ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

/// The whole `--version` line, also the first line of every log.
pub const VERSION_LINE: &str = concat!(
    "mount-s3 built from mountpoint-s3-fs ",
    env!("MOUNTPOINT_S3_FS_VERSION"),
    " (mountctl front end ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_one_cargo_lock_pins() {
        let lock = include_str!("../Cargo.lock");
        let entry = format!("name = \"mountpoint-s3-fs\"\nversion = \"{FS_VERSION}\"\n");
        assert!(lock.contains(&entry), "Cargo.lock has no {entry:?}");
        assert_eq!(VERSION_LINE, format!("mount-s3 {VERSION}"));
    }
}
