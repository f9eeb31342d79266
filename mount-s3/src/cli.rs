//! The command line: AWS's `mount-s3` names and meanings for every flag mountctl passes, a few of our own, and
//! the configuration of each part of Mountpoint built from them (one method per part, as AWS's CLI does).
//!
//! Doc comments are the `--help`. A flag AWS's CLI has but this build does not is refused (exit 2, one line),
//! never accepted and ignored: a user who asks for `--sse aws:kms` must not get an unencrypted upload.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::error::{ContextKind, ErrorKind};
use clap::{Parser, ValueEnum};
use fuser::MountOption;
use mountpoint_s3_client::config::{AddressingStyle, S3ClientAuthConfig};
use mountpoint_s3_client::user_agent::UserAgent;
use mountpoint_s3_fs::S3FilesystemConfig;
use mountpoint_s3_fs::data_cache::{CacheLimit, DataCacheConfig, DiskDataCacheConfig};
use mountpoint_s3_fs::fs::{CacheConfig, TimeToLive, UploadChecksumAlgorithm};
use mountpoint_s3_fs::fuse::config::MountPoint;
use mountpoint_s3_fs::logging::{LoggingConfig, prepare_log_file_name};
use mountpoint_s3_fs::memory::{MINIMUM_MEM_LIMIT, effective_total_memory};
use mountpoint_s3_fs::prefetch::PrefetcherConfig;
use mountpoint_s3_fs::s3::config::{ClientConfig, MemoryLimitSetting, PartConfig, Region, TargetThroughputSetting};
use mountpoint_s3_fs::s3::{Bucket, Prefix, S3Path, S3Personality};

use crate::ahead::{AheadConfig, WholeFirstGet};
use crate::build_info;
use crate::fuse_session::FuseMount;
use crate::keep_cache::KeepCache;

const BUCKET: &str = "Bucket options";
const CREDENTIALS: &str = "AWS credentials options";
const MOUNT: &str = "Mount options";
const CLIENT: &str = "Client options";
const LOGGING: &str = "Logging options";
const CACHING: &str = "Caching options";
const MOUNTCTL: &str = "mountctl's own options (not in AWS's mount-s3)";

/// Off AWS there is no instance metadata to ask for a region; SigV4 needs one all the same.
const DEFAULT_REGION: &str = "us-east-1";
/// The data cache's block size, which is also one of the memory pool's buffer sizes.
pub const CACHE_BLOCK_SIZE: u64 = 1024 * 1024;
const MIB: u64 = 1024 * 1024;
/// `--whole-first-get`'s default: objects up to this many MiB read from offset 0 come in one GET
/// (benchmarks/lab/whole_first_get.py, docs/mount-s3.md "The first GET sized by what is known").
const WHOLE_FIRST_GET_MIB: u64 = 16;

/// Mount an S3 bucket (or a prefix of it) as a local directory, with AWS's Mountpoint file system.
///
/// This mount-s3 is mountctl's front end on AWS's published crates (mountpoint-s3-fs, -client, -crt,
/// -fuser), unmodified: the same file system, S3 client and Common Runtime as AWS's own mount-s3, with
/// argument parsing of our own. Where AWS's mount-s3 is installed, mountctl uses that one instead.
#[derive(Parser, Debug)]
#[command(name = "mount-s3", version = build_info::VERSION, disable_version_flag = true)]
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

    /// Memory target in MiB that Mountpoint tries to stay within, at least 512 [default: 95% of the machine's
    /// memory]
    #[arg(long, value_parser = parse_memory_target, help_heading = CLIENT)]
    pub memory_target: Option<Mebibytes>,

    /// Part size in bytes for multi-part GET and PUT
    #[arg(long, default_value = "8388608", value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub part_size: u64,

    /// Part size in bytes for GET, instead of --part-size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub read_part_size: Option<u64>,

    /// Part size in bytes for multi-part PUT, instead of --part-size
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), help_heading = CLIENT)]
    pub write_part_size: Option<u64>,

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

    /// Maximum size of the cache directory in MiB; 0 turns the cache off [default: keep 5% of the disk free]
    #[arg(long, requires = "cache", value_parser = parse_mebibytes, help_heading = CACHING)]
    pub max_cache_size: Option<Mebibytes>,

    /// How long metadata may be served from cache: seconds, 'indefinite' or 'minimal'
    /// [default: 60 s with --cache, else 'minimal']
    #[arg(long, help_heading = CACHING)]
    pub metadata_ttl: Option<TimeToLive>,

    /// How long a missing key may be remembered: seconds, 'indefinite' or 'minimal'
    #[arg(long, help_heading = CACHING)]
    pub negative_metadata_ttl: Option<TimeToLive>,

    /// Serve exactly the objects of this list (one `key<TAB>etag<TAB>size` line each, keys relative to
    /// --prefix) with no LIST and no HEAD; each object is read pinned to its listed ETag. Read-only. The whole
    /// list is checked before anything is mounted.
    #[arg(long, help_heading = MOUNTCTL)]
    pub manifest: Option<PathBuf>,

    /// With --manifest: the one directory under the mount point that holds the objects
    /// [default: the last part of --prefix, or the bucket's name]
    #[arg(long, requires = "manifest", help_heading = MOUNTCTL)]
    pub manifest_directory: Option<String>,

    /// Size in bytes of the first GET of a file read in order [default: 1179648, the crates' 1 MiB + 128
    /// KiB]. 0 skips it: the first GET is then the whole file, fetched in parts.
    #[arg(long, help_heading = MOUNTCTL)]
    pub initial_request_size: Option<usize>,

    /// How fast the read-ahead window of a file read in order grows: it is multiplied by this each time it is
    /// consumed [default: 2, the crates']
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=64), help_heading = MOUNTCTL)]
    pub prefetch_window_multiplier: Option<u64>,

    /// Let the kernel drop a file's cached pages at every open, as AWS's mount-s3 does [default: keep them
    /// across opens while the object's ETag is unchanged, always with --manifest; never with O_DIRECT or for
    /// writing]
    #[arg(long, help_heading = MOUNTCTL)]
    pub no_keep_cache: bool,

    /// Do not read ahead across files (by default, a reader that reads a listed directory's objects in order
    /// gets the next ones fetched whole into memory before it opens them)
    #[arg(long, help_heading = MOUNTCTL)]
    pub no_read_ahead_files: bool,

    /// Do not list a directory after the first file looked up in it by a reader that did not list it (by
    /// default that listing answers the directory's later lookups for the metadata TTL, as after `ls`, and
    /// gives the read-ahead across files its order)
    #[arg(long, help_heading = MOUNTCTL)]
    pub no_list_on_lookup: bool,

    /// How many of the next objects in listing order are read ahead [default: 8]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64), help_heading = MOUNTCTL)]
    pub read_ahead_files: Option<u64>,

    /// MiB the read-ahead across files may hold; objects larger than this over --read-ahead-files are not
    /// read ahead [default: an eighth of the memory target]
    #[arg(long, value_parser = parse_mebibytes, help_heading = MOUNTCTL)]
    pub read_ahead_files_memory: Option<Mebibytes>,

    /// A file read from its first byte whose object is at most this many MiB is fetched whole by its first GET
    /// (held in the --read-ahead-files-memory budget), where the prefetcher would start with
    /// --initial-request-size and widen while the reader waits; a read that starts elsewhere still starts
    /// small. 0 turns it off [default: 16]
    #[arg(long, value_parser = parse_mebibytes, help_heading = MOUNTCTL)]
    pub whole_first_get: Option<Mebibytes>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UploadChecksums {
    Crc32c,
    Off,
}

/// A size given in MiB, known to fit in this machine's address space once in bytes.
///
/// The check is made where the flag is parsed: an unchecked `mib * 1024 * 1024` wrapped a huge
/// `--max-cache-size` round to a cache of 0 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mebibytes {
    mib: u64,
    bytes: usize,
}

impl Mebibytes {
    pub fn new(mib: u64) -> Option<Self> {
        let bytes = usize::try_from(mib.checked_mul(MIB)?).ok()?;
        Some(Self { mib, bytes })
    }

    pub fn mib(self) -> u64 {
        self.mib
    }

    pub fn bytes(self) -> usize {
        self.bytes
    }
}

/// The most MiB a size flag takes: as many bytes as a `usize` holds.
fn most_mebibytes() -> u64 {
    usize::MAX as u64 / MIB
}

fn parse_mebibytes(value: &str) -> Result<Mebibytes, String> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{value:?} is not a whole number of MiB"));
    }
    value
        .parse::<u64>()
        .ok()
        .and_then(Mebibytes::new)
        .ok_or_else(|| format!("{value} MiB is more than this machine can address (at most {} MiB)", most_mebibytes()))
}

fn parse_memory_target(value: &str) -> Result<Mebibytes, String> {
    let target = parse_mebibytes(value)?;
    let least = MINIMUM_MEM_LIMIT as u64 / MIB;
    if target.mib() < least {
        return Err(format!("{value} MiB is below {least} MiB, the least memory target Mountpoint takes"));
    }
    Ok(target)
}

fn parse_perm_bits(value: &str) -> Result<u16, String> {
    let bits = u16::from_str_radix(value, 8).map_err(|_| format!("{value} is not an octal mode such as 0644"))?;
    if bits > 0o777 {
        return Err(format!("{value} has bits beyond 0777"));
    }
    Ok(bits)
}

/// A request this program will not carry out as asked: the command line or a file it names is wrong.
///
/// It ends the program with exit status 2 and its one line, as a refused flag does; every other error is a
/// failure (exit status 1).
#[derive(Debug)]
pub struct Refusal(pub String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

/// What clap's error becomes: `None` for `--help` and `--version` (printed, exit 0), else one line to refuse
/// the command line with.
pub fn refusal_line(error: &clap::Error) -> Option<String> {
    match error.kind() {
        ErrorKind::DisplayVersion | ErrorKind::DisplayHelp | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            None
        }
        ErrorKind::UnknownArgument => {
            let flag = error.get(ContextKind::InvalidArg).map(|v| v.to_string()).unwrap_or_default();
            Some(format!(
                "unsupported option {flag}: this mount-s3 ({}) does not take it; see `mount-s3 --help`",
                build_info::VERSION
            ))
        }
        _ => {
            // clap's message runs to the first blank line (a missing flag is named on the line after the
            // first); usage and hints follow it.
            let rendered = error.render().to_string();
            let message: Vec<&str> = rendered.lines().map(str::trim).take_while(|line| !line.is_empty()).collect();
            let message = message.join(" ");
            let message = message.trim_start_matches("error: ");
            let message = if message.is_empty() { "invalid arguments" } else { message };
            Some(format!("{message} (see `mount-s3 --help`)"))
        }
    }
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

    /// The line printed once the file system is mounted.
    pub fn ready_line(&self) -> String {
        format!("{} is mounted at {}", self.bucket_description(), self.mount_point.display())
    }

    pub fn s3_path(&self) -> Result<S3Path, Refusal> {
        let bucket = Bucket::new(&self.bucket_name)
            .map_err(|e| Refusal(format!("{:?} is not a bucket name: {e}", self.bucket_name)))?;
        let prefix = Prefix::new(&self.prefix()).map_err(|e| Refusal(format!("--prefix {:?}: {e}", self.prefix())))?;
        Ok(S3Path::new(bucket, prefix))
    }

    /// A mount from a list of objects can only be read: nothing it serves may change under it.
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.manifest.is_some()
    }

    pub fn logging_config(&self, to_stdout: bool) -> LoggingConfig {
        let default_filter = if self.no_log {
            "off".to_string()
        } else {
            let level = if self.debug { "debug" } else { "warn,mountpoint_s3_fs=info,mountpoint_s3_client=info" };
            let crt = if self.debug_crt { "debug" } else { "off" };
            let metrics = if self.log_metrics || self.debug { "info" } else { "off" };
            format!("{level},awscrt={crt},{}={metrics}", mountpoint_s3_fs::metrics::TARGET_NAME)
        };
        LoggingConfig {
            log_file: self.log_directory.as_deref().map(prepare_log_file_name),
            log_to_stdout: to_stdout,
            default_filter,
        }
    }

    pub fn memory_limit(&self) -> MemoryLimitSetting {
        match self.memory_target {
            Some(target) => MemoryLimitSetting::User(target.bytes()),
            None => {
                MemoryLimitSetting::Default(((effective_total_memory() as f64 * 0.95) as usize).max(MINIMUM_MEM_LIMIT))
            }
        }
    }

    pub fn client_config(&self, memory_limit: MemoryLimitSetting) -> anyhow::Result<ClientConfig> {
        let region = match &self.region {
            Some(region) => Region::new_user_specified(region.clone()),
            None => Region::new_inferred(DEFAULT_REGION.to_string()),
        };
        let auth_config = if self.no_sign_request {
            S3ClientAuthConfig::NoSigning
        } else if let Some(profile) = &self.profile {
            S3ClientAuthConfig::Profile(profile.clone())
        } else {
            S3ClientAuthConfig::Default
        };
        let throughput_target = match self.maximum_throughput_gbps {
            Some(gbps) => TargetThroughputSetting::User { gbps: gbps as f64 },
            None => TargetThroughputSetting::Default,
        };
        Ok(ClientConfig {
            region,
            endpoint_url: self.endpoint_url.clone(),
            addressing_style: if self.force_path_style { AddressingStyle::Path } else { AddressingStyle::Automatic },
            dual_stack: false,
            transfer_acceleration: false,
            auth_config,
            requester_pays: false,
            expected_bucket_owner: None,
            throughput_target,
            bind: None,
            part_config: PartConfig::with_read_write_sizes(
                self.read_part_size.unwrap_or(self.part_size) as usize,
                self.write_part_size.unwrap_or(self.part_size) as usize,
            )
            .validate(memory_limit)?,
            user_agent: UserAgent::new(Some(format!("mountpoint-s3/{} mountctl", build_info::FS_VERSION))),
            tls_config: None,
        })
    }

    /// The crates' prefetcher, with our two flags where given.
    pub fn prefetcher_config(&self) -> PrefetcherConfig {
        let mut config = PrefetcherConfig::default();
        if let Some(size) = self.initial_request_size {
            config.initial_request_size = size;
        }
        if let Some(multiplier) = self.prefetch_window_multiplier {
            config.sequential_prefetch_multiplier = multiplier as usize;
        }
        config
    }

    /// The read-ahead across files and the whole first GET (crate::ahead), unless both are off.
    pub fn read_ahead_config(&self, memory_target: u64) -> Option<AheadConfig> {
        let width = if self.no_read_ahead_files { 0 } else { self.read_ahead_files.unwrap_or(8) as usize };
        let budget = self.read_ahead_files_memory.map(|memory| memory.bytes() as u64);
        // The prefetcher's first GET already fetches an object in one request when it covers the object and the
        // object is one part; past a part the whole first GET's parts all start at once, the CRT's do not.
        let read_part = self.read_part_size.unwrap_or(self.part_size);
        let whole_first = WholeFirstGet {
            up_to: self.whole_first_get.map_or(WHOLE_FIRST_GET_MIB * MIB, |size| size.bytes() as u64),
            above: (self.prefetcher_config().initial_request_size as u64).min(read_part),
        };
        Some(AheadConfig::sized_from(memory_target, width, budget, whole_first)).filter(AheadConfig::does_anything)
    }

    /// How long the kernel may keep metadata. AWS's rule: with a data cache a minute, without one as fresh as
    /// the kernel allows; a list of objects is the truth for the whole mount, so its metadata never expires.
    pub fn cache_config(&self) -> CacheConfig {
        if self.manifest.is_some() {
            return CacheConfig::new(TimeToLive::Indefinite);
        }
        let ttl = self.metadata_ttl.unwrap_or(if self.cache.is_some() {
            TimeToLive::Duration(Duration::from_secs(60))
        } else {
            TimeToLive::Minimal
        });
        // '--metadata-ttl 0' means 'minimal' in AWS's CLI, which also says so.
        let ttl = match ttl {
            TimeToLive::Duration(d) if d.is_zero() => TimeToLive::Minimal,
            other => other,
        };
        let mut config = CacheConfig::new(ttl);
        if let Some(negative) = self.negative_metadata_ttl {
            config = config.with_negative_metadata_ttl(negative);
        }
        config
    }

    /// How long a directory listed after a lookup in it (list_on_lookup.rs) answers its later lookups: the
    /// metadata TTL; forever where it is listed only for the read-ahead's order (`--metadata-ttl 0`); None where
    /// nothing is listed (`--no-list-on-lookup`, or neither the metadata cache nor the read-ahead is on).
    pub fn list_on_lookup(&self) -> Option<Duration> {
        let cache = self.cache_config();
        if self.no_list_on_lookup {
            None
        } else if cache.serve_lookup_from_cache {
            Some(cache.file_ttl)
        } else if !self.no_read_ahead_files {
            Some(Duration::MAX)
        } else {
            None
        }
    }

    pub fn filesystem_config(&self, personality: S3Personality) -> S3FilesystemConfig {
        let mut config = S3FilesystemConfig {
            read_only: self.is_read_only(),
            allow_delete: self.allow_delete,
            allow_overwrite: self.allow_overwrite,
            s3_personality: personality,
            cache_config: self.cache_config(),
            prefetcher_config: self.prefetcher_config(),
            ..Default::default()
        };
        if let Some(uid) = self.uid {
            config.uid = uid;
        }
        if let Some(gid) = self.gid {
            config.gid = gid;
        }
        if let Some(mode) = self.dir_mode {
            config.dir_mode = mode;
        }
        if let Some(mode) = self.file_mode {
            config.file_mode = mode;
        }
        config.upload_checksum_algorithm = match self.upload_checksums {
            Some(UploadChecksums::Crc32c) => Some(UploadChecksumAlgorithm::Crc32c),
            Some(UploadChecksums::Off) => None,
            None if personality.supports_additional_checksums() => Some(UploadChecksumAlgorithm::Crc32c),
            None => None,
        };
        config
    }

    /// The disk data cache under --cache (none with `--max-cache-size 0`, as in AWS's CLI).
    pub fn data_cache_config(&self) -> DataCacheConfig {
        let disk_cache_config = match (&self.cache, self.max_cache_size) {
            (None, _) => None,
            (Some(_), Some(size)) if size.mib() == 0 => None,
            (Some(dir), size) => Some(DiskDataCacheConfig {
                cache_directory: dir.clone(),
                block_size: CACHE_BLOCK_SIZE,
                limit: match size {
                    Some(size) => CacheLimit::TotalSize { max_size: size.bytes() },
                    None => CacheLimit::default(),
                },
            }),
        };
        DataCacheConfig { disk_cache_config, express_cache_config: None }
    }

    /// When the kernel may keep a file's pages across opens (keep_cache.rs).
    pub fn keep_cache(&self) -> KeepCache {
        if self.no_keep_cache {
            KeepCache::Off
        } else if self.manifest.is_some() {
            KeepCache::Pinned
        } else {
            KeepCache::WhileUnchanged
        }
    }

    /// The mount point and the kernel's mount options: the crates' `FuseSessionConfig::new` rules, which we
    /// cannot take from it (its fields are private to the crate, and our session is built around our adapter).
    pub fn fuse_mount(&self) -> anyhow::Result<FuseMount> {
        let mount_point = MountPoint::new(&self.mount_point)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot mount at {}", self.mount_point.display()))?;
        if matches!(mount_point, MountPoint::FileDescriptor(_)) && self.auto_unmount {
            return Err(Refusal(
                "--auto-unmount does nothing on a FUSE file descriptor: leave it out, and unmount from the \
                 process that mounted it"
                    .into(),
            )
            .into());
        }
        let mut options =
            vec![MountOption::DefaultPermissions, MountOption::FSName("mountpoint-s3".into()), MountOption::NoAtime];
        for (wanted, option) in [
            (self.is_read_only(), MountOption::RO),
            (self.auto_unmount, MountOption::AutoUnmount),
            (self.allow_root, MountOption::AllowRoot),
            (self.allow_other, MountOption::AllowOther),
        ] {
            if wanted {
                options.push(option);
            }
        }
        Ok(FuseMount { mount_point, options, max_threads: self.max_threads as usize })
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    fn parse(flags: &[&str]) -> Result<CliArgs, clap::Error> {
        let argv = ["mount-s3", "my-bucket", "/mnt/data"].iter().chain(flags);
        CliArgs::try_parse_from(argv)
    }

    fn refused(flags: &[&str]) -> String {
        let error = parse(flags).expect_err("the command line must be refused");
        refusal_line(&error).expect("a refusal, not --help or --version")
    }

    #[test]
    fn the_command_definition_is_consistent() {
        CliArgs::command().debug_assert();
    }

    #[test]
    fn every_flag_mountctl_passes_is_taken() {
        // As mountctl/mounts/backends/mount_s3.py builds it, read-write with a cache, a memory bound, ownership and
        // no credentials, off AWS.
        let args = parse(&[
            "--foreground",
            "--region",
            "us-east-1",
            "--log-directory",
            "/tmp/logs",
            "--prefix",
            "train/",
            "--allow-delete",
            "--endpoint-url",
            "http://127.0.0.1:8333",
            "--force-path-style",
            "--upload-checksums",
            "off",
            "--cache",
            "/tmp/cache",
            "--max-cache-size",
            "2048",
            "--metadata-ttl",
            "60",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--allow-other",
            "--no-sign-request",
            "--read-part-size",
            "5242880",
            "--memory-target",
            "512",
        ])
        .expect("mountctl's command line");
        assert!(args.foreground && args.allow_delete && args.force_path_style && args.no_sign_request);
        assert_eq!(args.max_cache_size.map(Mebibytes::bytes), Some(2048 * 1024 * 1024));
        assert_eq!(args.memory_target.map(Mebibytes::bytes), Some(512 * 1024 * 1024));
        assert_eq!(args.prefix(), "train/");
        assert_eq!(args.ready_line(), "prefix train/ of bucket my-bucket is mounted at /mnt/data");
        let read_only_list = parse(&["--read-only", "--manifest", "/tmp/x.tsv", "--manifest-directory", "train"]);
        assert!(read_only_list.expect("a list mount's flags").is_read_only());
    }

    #[test]
    fn sizes_in_mib_are_converted_to_bytes() {
        assert_eq!(parse_mebibytes("0").map(Mebibytes::bytes), Ok(0));
        assert_eq!(parse_mebibytes("1").map(Mebibytes::bytes), Ok(1 << 20));
        assert_eq!(parse_mebibytes("0100").map(Mebibytes::bytes), Ok(100 << 20));
        let most = most_mebibytes();
        assert_eq!(parse_mebibytes(&most.to_string()).map(Mebibytes::mib), Ok(most));
    }

    #[test]
    fn sizes_in_mib_that_would_overflow_are_refused() {
        for value in [(most_mebibytes() + 1).to_string(), u64::MAX.to_string(), "99999999999999999999999".into()] {
            let error = parse_mebibytes(&value).expect_err(&value);
            assert!(error.contains("more than this machine can address"), "{error}");
        }
        for value in ["", "-1", "+5", "1.5", "1G", " 5"] {
            let error = parse_mebibytes(value).expect_err(value);
            assert!(error.contains("not a whole number of MiB"), "{error}");
        }
    }

    #[test]
    fn a_huge_cache_size_is_refused_in_one_line_not_wrapped_to_zero() {
        let line = refused(&["--cache", "/tmp/c", "--max-cache-size", "17592186044416"]);
        assert!(line.contains("--max-cache-size") && line.contains("more than this machine can address"), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }

    #[test]
    fn a_memory_target_below_mountpoints_least_is_refused() {
        let line = refused(&["--memory-target", "511"]);
        assert!(line.contains("--memory-target") && line.contains("512 MiB"), "{line}");
        let line = refused(&["--memory-target", "18446744073709551615"]);
        assert!(line.contains("more than this machine can address"), "{line}");
    }

    #[test]
    fn a_flag_of_awss_cli_that_this_build_lacks_is_refused_by_name() {
        let line = refused(&["--sse", "aws:kms"]);
        assert!(line.starts_with("unsupported option --sse: this mount-s3 (built from mountpoint-s3-fs "), "{line}");
    }

    #[test]
    fn malformed_values_are_refused_in_one_line() {
        for (flags, names) in [
            (&["--dir-mode", "0999"][..], "0999"),
            (&["--file-mode", "01777"][..], "beyond 0777"),
            (&["--uid", "0"][..], "--uid"),
            (&["--prefetch-window-multiplier", "1"][..], "--prefetch-window-multiplier"),
            (&["--max-cache-size", "10"][..], "--cache"),
            (&["--manifest-directory", "x"][..], "--manifest"),
        ] {
            let line = refused(flags);
            assert!(line.contains(names) && line.ends_with("(see `mount-s3 --help`)"), "{flags:?}: {line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn help_and_version_are_not_refusals() {
        for flag in ["--help", "--version", "-v"] {
            let error = CliArgs::try_parse_from(["mount-s3", flag]).expect_err(flag);
            assert_eq!(refusal_line(&error), None, "{flag}");
        }
    }

    #[test]
    fn a_cache_size_of_zero_turns_the_cache_off() {
        let off = parse(&["--cache", "/tmp/c", "--max-cache-size", "0"]).unwrap();
        assert!(off.data_cache_config().disk_cache_config.is_none());
        let on = parse(&["--cache", "/tmp/c", "--max-cache-size", "3"]).unwrap();
        let disk = on.data_cache_config().disk_cache_config.expect("a disk cache");
        assert!(matches!(disk.limit, CacheLimit::TotalSize { max_size } if max_size == 3 << 20));
    }

    #[test]
    fn pages_are_kept_by_default_pinned_on_a_list_mount_and_never_with_no_keep_cache() {
        assert_eq!(parse(&[]).unwrap().keep_cache(), KeepCache::WhileUnchanged);
        assert_eq!(parse(&["--manifest", "/tmp/x.tsv"]).unwrap().keep_cache(), KeepCache::Pinned);
        let off = parse(&["--manifest", "/tmp/x.tsv", "--no-keep-cache"]).unwrap();
        assert_eq!(off.keep_cache(), KeepCache::Off);
    }

    #[test]
    fn a_directory_is_listed_on_lookup_for_the_metadata_ttl_or_for_the_order_alone_or_not_at_all() {
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(parse(&["--metadata-ttl", "3600"]).unwrap().list_on_lookup(), hour);
        assert_eq!(parse(&["--metadata-ttl", "0"]).unwrap().list_on_lookup(), Some(Duration::MAX), "order only");
        assert_eq!(parse(&["--metadata-ttl", "0", "--no-read-ahead-files"]).unwrap().list_on_lookup(), None);
        assert_eq!(parse(&["--metadata-ttl", "3600", "--no-list-on-lookup"]).unwrap().list_on_lookup(), None);
    }

    #[test]
    fn the_read_ahead_across_files_is_on_by_default_sized_from_the_memory_target() {
        let target = 1024 * MIB;
        let default = parse(&[]).unwrap().read_ahead_config(target).expect("on by default");
        assert_eq!((default.width, default.budget, default.largest), (8, 128 * MIB, 16 * MIB));
        let tuned = parse(&["--read-ahead-files", "2", "--read-ahead-files-memory", "64"]).unwrap();
        let tuned = tuned.read_ahead_config(target).unwrap();
        assert_eq!((tuned.width, tuned.budget, tuned.largest), (2, 64 * MIB, 32 * MIB));
        let across_off = parse(&["--no-read-ahead-files"]).unwrap().read_ahead_config(target).expect("first GET");
        assert_eq!(across_off.width, 0, "nothing read ahead across files");
        assert!(parse(&["--read-ahead-files", "0"]).is_err());
    }

    #[test]
    fn the_whole_first_get_covers_what_the_prefetchers_first_get_does_not_up_to_its_flag() {
        let target = 1024 * MIB;
        let above = PrefetcherConfig::default().initial_request_size as u64;
        let default = parse(&[]).unwrap().read_ahead_config(target).unwrap().whole_first;
        assert_eq!(default, WholeFirstGet { up_to: WHOLE_FIRST_GET_MIB * MIB, above });
        let tuned = parse(&["--whole-first-get", "4", "--initial-request-size", "0"]).unwrap();
        assert_eq!(tuned.read_ahead_config(target).unwrap().whole_first, WholeFirstGet { up_to: 4 * MIB, above: 0 });
        let off = parse(&["--whole-first-get", "0"]).unwrap().read_ahead_config(target).unwrap();
        assert!(!off.whole_first.is_on());
        // Both off: no data cache of ours in front of the prefetcher at all.
        let neither = parse(&["--whole-first-get", "0", "--no-read-ahead-files"]).unwrap();
        assert!(neither.read_ahead_config(target).is_none());
        // A first GET of the crates' as wide as the bound still leaves the objects of several parts, whose parts
        // the whole first GET starts at once; with parts as large as the bound, nothing is left.
        let wide = parse(&["--initial-request-size", &(16 * MIB).to_string(), "--read-part-size", "5242880"]).unwrap();
        assert_eq!(wide.read_ahead_config(target).unwrap().whole_first.above, 5 * MIB);
        let one_part = parse(&[
            "--initial-request-size",
            &(16 * MIB).to_string(),
            "--part-size",
            &(16 * MIB).to_string(),
            "--no-read-ahead-files",
        ])
        .unwrap();
        assert!(one_part.read_ahead_config(target).is_none());
    }

    #[test]
    fn our_prefetcher_flags_change_only_what_they_name() {
        let default = PrefetcherConfig::default();
        let args = parse(&["--initial-request-size", "0", "--prefetch-window-multiplier", "8"]).unwrap();
        let tuned = args.prefetcher_config();
        assert_eq!((tuned.initial_request_size, tuned.sequential_prefetch_multiplier), (0, 8));
        assert_eq!(tuned.max_read_window_size, default.max_read_window_size);
        let plain = parse(&[]).unwrap().prefetcher_config();
        assert_eq!(plain.initial_request_size, default.initial_request_size);
    }
}
