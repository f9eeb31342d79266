//! Builds the client, the file system and the FUSE session, in that order, and nothing else.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use mountpoint_s3_client::S3CrtClient;
use mountpoint_s3_client::config::{AddressingStyle, S3ClientAuthConfig};
use mountpoint_s3_client::user_agent::UserAgent;
use mountpoint_s3_fs::data_cache::{CacheLimit, DataCacheConfig, DiskDataCacheConfig, ManagedCacheDir};
use mountpoint_s3_fs::fs::{CacheConfig, TimeToLive, UploadChecksumAlgorithm};
use mountpoint_s3_fs::fuse::config::{FuseOptions, FuseSessionConfig, MountPoint};
use mountpoint_s3_fs::fuse::session::FuseSession;
use mountpoint_s3_fs::logging::{LoggingConfig, prepare_log_file_name};
use mountpoint_s3_fs::memory::{CandidateSize, MINIMUM_MEM_LIMIT, PagedPool, effective_total_memory};
use mountpoint_s3_fs::s3::config::{ClientConfig, MemoryLimitSetting, PartConfig, Region, TargetThroughputSetting};
use mountpoint_s3_fs::s3::{Bucket, Prefix, S3Path, S3Personality};
use mountpoint_s3_fs::{MountpointConfig, Runtime, S3FilesystemConfig, Superblock, SuperblockConfig};

use crate::cli::{CliArgs, UploadChecksums};
use crate::manifest;

/// Off AWS there is no instance metadata to ask for a region; SigV4 needs one all the same.
const DEFAULT_REGION: &str = "us-east-1";
const CACHE_BLOCK_SIZE: u64 = 1024 * 1024;

pub fn logging_config(args: &CliArgs, to_stdout: bool) -> LoggingConfig {
    let default_filter = if args.no_log {
        "off".to_string()
    } else {
        let level = if args.debug { "debug" } else { "warn,mountpoint_s3_fs=info,mountpoint_s3_client=info" };
        let crt = if args.debug_crt { "debug" } else { "off" };
        let metrics = if args.log_metrics || args.debug { "info" } else { "off" };
        format!("{level},awscrt={crt},{}={metrics}", mountpoint_s3_fs::metrics::TARGET_NAME)
    };
    LoggingConfig {
        log_file: args.log_directory.as_deref().map(prepare_log_file_name),
        log_to_stdout: to_stdout,
        default_filter,
    }
}

/// Mounts and returns the running session; the caller prints the ready line and joins it.
pub fn mount(args: &CliArgs) -> anyhow::Result<FuseSession> {
    tracing::info!("{}", crate::VERSION_LINE);
    let memory_limit = match args.memory_target {
        Some(mib) => MemoryLimitSetting::User(mib as usize * 1024 * 1024),
        None => MemoryLimitSetting::Default(((effective_total_memory() as f64 * 0.95) as usize).max(MINIMUM_MEM_LIMIT)),
    };
    let client_config = client_config(args, memory_limit)?;
    let pool = PagedPool::config()
        .with_candidate_sizes([
            CandidateSize::prunable(CACHE_BLOCK_SIZE as usize),
            CandidateSize::prunable(client_config.part_config.read_size_bytes),
            CandidateSize::new(client_config.part_config.write_size_bytes),
        ])
        .with_memory_limit(memory_limit.bytes())
        .with_maintenance_interval(Duration::from_secs(60))
        .build();

    let bucket = Bucket::new(&args.bucket_name).with_context(|| format!("invalid bucket name {}", args.bucket_name))?;
    let prefix = Prefix::new(&args.prefix()).with_context(|| format!("invalid prefix {}", args.prefix()))?;
    let s3_path = S3Path::new(bucket, prefix);
    // A manifest mount never lists: the first request it makes is the first read.
    let validate = if args.manifest.is_some() { None } else { Some(&s3_path) };
    let client: S3CrtClient = client_config
        .create_client(pool.clone(), validate)
        .with_context(|| format!("cannot reach {}", s3_path.bucket_description()))?;
    let runtime = Runtime::new(client.event_loop_group());
    let personality = S3Personality::infer_from_bucket(&s3_path.bucket, &client.endpoint_config());

    let filesystem_config = filesystem_config(args, personality);
    let mut data_cache_config = data_cache_config(args);
    let cache_dir = match &mut data_cache_config.disk_cache_config {
        Some(disk) => {
            // A directory of its own under --cache, emptied now and removed when the session ends.
            let managed = ManagedCacheDir::new_from_parent_with_cache_key(&disk.cache_directory, None, true)
                .with_context(|| format!("cannot use cache directory {}", disk.cache_directory.display()))?;
            disk.cache_directory = managed.as_path_buf();
            Some(managed)
        }
        None => None,
    };
    let mountpoint_config = MountpointConfig::new(fuse_session_config(args)?, filesystem_config, data_cache_config)?;
    let mut session = match &args.manifest {
        Some(path) => {
            let mount = manifest::metablock(path, &s3_path, args.manifest_directory.as_deref())?;
            tracing::info!("serving the manifest's objects under {}/", mount.directory_name);
            let mut session = mountpoint_config.create_fuse_session(mount.metablock, client, runtime, pool)?;
            let store = mount.store;
            session.run_on_close(Box::new(move || drop(store)));
            session
        }
        None => {
            let cache_config = cache_config(args);
            let superblock = Superblock::new(
                client.clone(),
                s3_path,
                SuperblockConfig { cache_config, s3_personality: personality },
            );
            mountpoint_config.create_fuse_session(superblock, client, runtime, pool)?
        }
    };
    if let Some(managed) = cache_dir {
        session.run_on_close(Box::new(move || drop(managed)));
    }
    Ok(session)
}

fn client_config(args: &CliArgs, memory_limit: MemoryLimitSetting) -> anyhow::Result<ClientConfig> {
    let region = match &args.region {
        Some(region) => Region::new_user_specified(region.clone()),
        None => Region::new_inferred(DEFAULT_REGION.to_string()),
    };
    let auth_config = if args.no_sign_request {
        S3ClientAuthConfig::NoSigning
    } else if let Some(profile) = &args.profile {
        S3ClientAuthConfig::Profile(profile.clone())
    } else {
        S3ClientAuthConfig::Default
    };
    let throughput_target = match args.maximum_throughput_gbps {
        Some(gbps) => TargetThroughputSetting::User { gbps: gbps as f64 },
        None => TargetThroughputSetting::Default,
    };
    Ok(ClientConfig {
        region,
        endpoint_url: args.endpoint_url.clone(),
        addressing_style: if args.force_path_style { AddressingStyle::Path } else { AddressingStyle::Automatic },
        dual_stack: false,
        transfer_acceleration: false,
        auth_config,
        requester_pays: false,
        expected_bucket_owner: None,
        throughput_target,
        bind: None,
        part_config: PartConfig::with_read_write_sizes(
            args.read_part_size.unwrap_or(args.part_size) as usize,
            args.write_part_size.unwrap_or(args.part_size) as usize,
        )
        .validate(memory_limit)?,
        user_agent: UserAgent::new(Some(format!("mountpoint-s3/{} mountctl", crate::FS_VERSION))),
        tls_config: None,
    })
}

/// AWS's rule: with a data cache metadata may be a minute old, without one as fresh as the kernel allows.
fn cache_config(args: &CliArgs) -> CacheConfig {
    let ttl = args.metadata_ttl.unwrap_or(if args.cache.is_some() {
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
    if let Some(negative) = args.negative_metadata_ttl {
        config = config.with_negative_metadata_ttl(negative);
    }
    config
}

fn filesystem_config(args: &CliArgs, personality: S3Personality) -> S3FilesystemConfig {
    let mut config = S3FilesystemConfig {
        read_only: args.read_only || args.manifest.is_some(),
        allow_delete: args.allow_delete,
        allow_overwrite: args.allow_overwrite,
        s3_personality: personality,
        cache_config: cache_config(args),
        ..Default::default()
    };
    if let Some(size) = args.initial_request_size {
        config.prefetcher_config.initial_request_size = size;
    }
    if let Some(multiplier) = args.prefetch_window_multiplier {
        config.prefetcher_config.sequential_prefetch_multiplier = multiplier as usize;
    }
    if args.manifest.is_some() {
        // The manifest is the truth for the whole mount: nothing it lists can change under it.
        config.cache_config = CacheConfig::new(TimeToLive::Indefinite);
    }
    if let Some(uid) = args.uid {
        config.uid = uid;
    }
    if let Some(gid) = args.gid {
        config.gid = gid;
    }
    if let Some(mode) = args.dir_mode {
        config.dir_mode = mode;
    }
    if let Some(mode) = args.file_mode {
        config.file_mode = mode;
    }
    config.upload_checksum_algorithm = match args.upload_checksums {
        Some(UploadChecksums::Crc32c) => Some(UploadChecksumAlgorithm::Crc32c),
        Some(UploadChecksums::Off) => None,
        None if personality.supports_additional_checksums() => Some(UploadChecksumAlgorithm::Crc32c),
        None => None,
    };
    config
}

fn data_cache_config(args: &CliArgs) -> DataCacheConfig {
    let disk_cache_config = match (&args.cache, args.max_cache_size) {
        (None, _) | (Some(_), Some(0)) => None,
        (Some(dir), size) => Some(DiskDataCacheConfig {
            cache_directory: dir.clone(),
            block_size: CACHE_BLOCK_SIZE,
            limit: match size {
                Some(mib) => CacheLimit::TotalSize { max_size: (mib * 1024 * 1024) as usize },
                None => CacheLimit::default(),
            },
        }),
    };
    DataCacheConfig { disk_cache_config, express_cache_config: None }
}

fn fuse_session_config(args: &CliArgs) -> anyhow::Result<FuseSessionConfig> {
    let mount_point = MountPoint::new(&args.mount_point)
        .map_err(|e| anyhow!("{e}"))
        .context("cannot mount there")?;
    let options = FuseOptions {
        read_only: args.read_only || args.manifest.is_some(),
        auto_unmount: args.auto_unmount,
        allow_root: args.allow_root,
        allow_other: args.allow_other,
        clone_fd: false,
    };
    FuseSessionConfig::new(mount_point, options, args.max_threads as usize)
}
