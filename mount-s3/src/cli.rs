//! The command line: AWS's `mount-s3` names and meanings for every flag mountctl passes, nothing else.
//!
//! Doc comments are the `--help`. A flag AWS's CLI has but this build does not is refused (exit 2, one line),
//! never accepted and ignored: a user who asks for `--sse aws:kms` must not get an unencrypted upload.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use mountpoint_s3_fs::fs::TimeToLive;

const BUCKET: &str = "Bucket options";
const CREDENTIALS: &str = "AWS credentials options";
const MOUNT: &str = "Mount options";
const CLIENT: &str = "Client options";
const LOGGING: &str = "Logging options";
const CACHING: &str = "Caching options";
const MOUNTCTL: &str = "mountctl's own options (not in AWS's mount-s3)";

/// Mount an S3 bucket (or a prefix of it) as a local directory, with AWS's Mountpoint file system.
///
/// This mount-s3 is mountctl's front end on AWS's published crates (mountpoint-s3-fs, -client, -crt,
/// -fuser), unmodified: the same file system, S3 client and Common Runtime as AWS's own mount-s3, with
/// argument parsing of our own. Where AWS's mount-s3 is installed, mountctl uses that one instead.
#[derive(Parser, Debug)]
#[command(name = "mount-s3", version = crate::VERSION, disable_version_flag = true)]
pub struct CliArgs {
    /// Name of the bucket to mount
    pub bucket_name: String,

    /// Directory to mount the bucket at (it must exist and be empty of other mounts)
    pub mount_point: PathBuf,

    /// Print version information
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,

    /// Prefix inside the bucket to mount, ending in '/' [default: mount the whole bucket]
    #[arg(long, help_heading = BUCKET)]
    pub prefix: Option<String>,

    /// AWS region of the bucket [default: us-east-1 off AWS]
    #[arg(long, help_heading = BUCKET)]
    pub region: Option<String>,

    /// S3 endpoint URL [default: inferred from the region]
    #[arg(long, help_heading = BUCKET)]
    pub endpoint_url: Option<String>,

    /// Force path-style addressing (most stores other than AWS need it)
    #[arg(long, help_heading = BUCKET)]
    pub force_path_style: bool,

    /// Do not sign requests: for public buckets, or a store that needs no credentials
    #[arg(long, help_heading = CREDENTIALS)]
    pub no_sign_request: bool,

    /// Use a named profile from the AWS credentials file
    #[arg(long, help_heading = CREDENTIALS)]
    pub profile: Option<String>,

    /// Mount file system in read-only mode
    #[arg(long, help_heading = MOUNT)]
    pub read_only: bool,

    /// Allow delete operations on the file system
    #[arg(long, help_heading = MOUNT)]
    pub allow_delete: bool,

    /// Allow overwrite operations on the file system
    #[arg(long, help_heading = MOUNT)]
    pub allow_overwrite: bool,

    /// Automatically unmount on exit
    #[arg(long, help_heading = MOUNT)]
    pub auto_unmount: bool,

    /// Allow root user to access file system
    #[arg(long, help_heading = MOUNT)]
    pub allow_root: bool,

    /// Allow other users, including root, to access file system (needs user_allow_other in /etc/fuse.conf)
    #[arg(long, help_heading = MOUNT)]
    pub allow_other: bool,

    /// Owner UID of files [default: the current user's]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = MOUNT)]
    pub uid: Option<u32>,

    /// Owner GID of files [default: the current user's]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), help_heading = MOUNT)]
    pub gid: Option<u32>,

    /// Directory permissions, octal [default: 0755]
    #[arg(long, value_parser = parse_perm_bits, help_heading = MOUNT)]
    pub dir_mode: Option<u16>,

    /// File permissions, octal [default: 0644]
    #[arg(long, value_parser = parse_perm_bits, help_heading = MOUNT)]
    pub file_mode: Option<u16>,

    /// Run as a foreground process (mountctl always does)
    #[arg(short, long, help_heading = MOUNT)]
    pub foreground: bool,

    /// Target throughput in Gbps: how many requests the client keeps in flight [default: 10]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub maximum_throughput_gbps: Option<u64>,

    /// Number of FUSE daemon threads
    #[arg(long, default_value = "16", value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub max_threads: u64,

    /// Memory target in MiB that Mountpoint tries to stay within [default: 95% of the machine's memory]
    #[arg(long, value_parser = clap::value_parser!(u64).range(512..), help_heading = CLIENT)]
    pub memory_target: Option<u64>,

    /// Part size in bytes for multi-part GET and PUT
    #[arg(long, default_value = "8388608", value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub part_size: u64,

    /// Part size in bytes for GET, instead of --part-size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub read_part_size: Option<u64>,

    /// Part size in bytes for multi-part PUT, instead of --part-size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub write_part_size: Option<u64>,

    /// Size in bytes of the first GET of a file read in order (ours, not AWS's flag) [default: 1179648, the
    /// crates' 1 MiB + 128 KiB]. 0 skips it: the first GET is then the whole file, fetched in parts.
    #[arg(long, help_heading = CLIENT)]
    pub initial_request_size: Option<usize>,

    /// How fast the read-ahead window of a file read in order grows: it is multiplied by this each time it is
    /// consumed (ours, not AWS's flag) [default: 2, the crates']
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=64), help_heading = CLIENT)]
    pub prefetch_window_multiplier: Option<u64>,

    /// Checksum algorithm for uploads: crc32c, or off for a store that does not support checksums
    #[arg(long, help_heading = CLIENT)]
    pub upload_checksums: Option<UploadChecksums>,

    /// Write log files to this directory [default: no log file]
    #[arg(short, long, help_heading = LOGGING)]
    pub log_directory: Option<PathBuf>,

    /// Enable debug logging for Mountpoint
    #[arg(short, long, help_heading = LOGGING)]
    pub debug: bool,

    /// Enable debug logging for the AWS Common Runtime
    #[arg(long, help_heading = LOGGING)]
    pub debug_crt: bool,

    /// Disable all logging
    #[arg(long, help_heading = LOGGING)]
    pub no_log: bool,

    /// Log summarized performance metrics
    #[arg(long, help_heading = LOGGING)]
    pub log_metrics: bool,

    /// Cache object content in this directory (a new directory under it is used, and removed at exit)
    #[arg(long, help_heading = CACHING)]
    pub cache: Option<PathBuf>,

    /// Maximum size of the cache directory in MiB [default: keep 5% of the disk free]
    #[arg(long, requires = "cache", help_heading = CACHING)]
    pub max_cache_size: Option<u64>,

    /// How long metadata may be served from cache: seconds, 'indefinite' or 'minimal'
    /// [default: 60 s with --cache, else 'minimal']
    #[arg(long, help_heading = CACHING)]
    pub metadata_ttl: Option<TimeToLive>,

    /// How long a missing key may be remembered: seconds, 'indefinite' or 'minimal'
    #[arg(long, help_heading = CACHING)]
    pub negative_metadata_ttl: Option<TimeToLive>,

    /// Serve exactly the objects of this manifest (one `key<TAB>etag<TAB>size` line each, keys relative to
    /// --prefix) with no LIST and no HEAD; each object is read pinned to its listed ETag. Read-only.
    #[arg(long, help_heading = MOUNTCTL)]
    pub manifest: Option<PathBuf>,

    /// With --manifest: the one directory under the mount point that holds the objects
    /// [default: the last part of --prefix, or the bucket's name]
    #[arg(long, requires = "manifest", help_heading = MOUNTCTL)]
    pub manifest_directory: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UploadChecksums {
    Crc32c,
    Off,
}

fn parse_perm_bits(value: &str) -> Result<u16, String> {
    let bits = u16::from_str_radix(value, 8).map_err(|_| format!("{value} is not an octal mode such as 0644"))?;
    if bits > 0o777 {
        return Err(format!("{value} has bits beyond 0777"));
    }
    Ok(bits)
}

impl CliArgs {
    /// The prefix as Mountpoint wants it: empty, or ending in '/'.
    pub fn prefix(&self) -> String {
        match self.prefix.as_deref() {
            None | Some("") => String::new(),
            Some(p) if p.ends_with('/') => p.to_string(),
            Some(p) => format!("{p}/"),
        }
    }

    /// "bucket B" or "prefix P of bucket B", as AWS's ready line words it.
    pub fn bucket_description(&self) -> String {
        let prefix = self.prefix();
        if prefix.is_empty() {
            format!("bucket {}", self.bucket_name)
        } else {
            format!("prefix {} of bucket {}", prefix, self.bucket_name)
        }
    }
}
