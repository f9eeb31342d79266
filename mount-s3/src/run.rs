//! `run`: mount in the foreground, or start the daemon and wait for its word, or be that daemon; and `mount`,
//! which builds the client, the file system and the FUSE session (fuse_session.rs, around our page-cache
//! adapter), in that order, and nothing else.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use mountpoint_s3_client::S3CrtClient;
use mountpoint_s3_fs::data_cache::ManagedCacheDir;
use mountpoint_s3_fs::fuse::session::FuseSession;
use mountpoint_s3_fs::logging::init_logging;
use mountpoint_s3_fs::memory::{CandidateSize, PagedPool};
use mountpoint_s3_fs::s3::S3Personality;
use mountpoint_s3_fs::{Runtime, Superblock, SuperblockConfig, metrics};

use crate::ahead::{Listing, ReadAhead, page_cache_guess};
use crate::build_info;
use crate::cli::{CACHE_BLOCK_SIZE, CliArgs};
use crate::daemon::{self, StatusSocket};
use crate::keep_cache::KeepCache;
use crate::list_on_lookup::ListOnLookup;
use crate::{fuse_session, manifest};

/// Mounts as `args` ask: in this process with --foreground; else in a daemon of its own, returning once the
/// daemon has mounted (or said why not). `status` is set in that daemon: the socket it reports on.
pub fn run(args: CliArgs, status: Option<StatusSocket>) -> anyhow::Result<()> {
    match status {
        Some(status) => daemon_child(&args, status),
        None if args.foreground => foreground(&args),
        None => daemon::start(&args),
    }
}

/// The daemon of a background mount: mounts, tells the command that started it, then serves until unmounted.
fn daemon_child(args: &CliArgs, status: StatusSocket) -> anyhow::Result<()> {
    let reporter = status.watch_parent()?;
    let started = (|| {
        let logging = init_logging(args.logging_config(false)).context("cannot start logging")?;
        let metrics = metrics::install(None).context("cannot start metrics")?;
        let session = mount(args, &|| reporter.begin_changes())?;
        anyhow::Ok((session, logging, metrics))
    })();
    let (session, _logging, _metrics) = match started {
        Ok(started) => started,
        Err(error) => return Err(reporter.failed(error)),
    };
    if let Err(error) = daemon::go_quiet().and_then(|()| reporter.mounted()) {
        // The command that started us ended (or cannot be told): nobody knows of this mount, so it goes.
        tracing::warn!("{error:#}; unmounting");
        session.shutdown_fn()();
        if let Err(unmount) = session.join() {
            tracing::error!("{unmount:#}");
        }
        return Err(reporter.failed(error.context("the mount was undone")));
    }
    drop(reporter);
    session.join()
}

fn foreground(args: &CliArgs) -> anyhow::Result<()> {
    let _logging = init_logging(args.logging_config(true)).context("cannot start logging")?;
    let _metrics = metrics::install(None).context("cannot start metrics")?;
    let session = mount(args, &|| Ok(()))?;
    // Whoever started us may have closed our stdout: the mount stands all the same.
    if let Err(error) = writeln!(std::io::stdout(), "{}", args.ready_line()) {
        tracing::warn!("cannot print the ready line ({error}); mounted all the same");
    }
    session.join()
}

/// Mounts and returns the running session; the caller says so and joins it.
///
/// `before_changes` is called once everything that only reads (the arguments, the object list, the bucket
/// check over the network) has passed and before anything is written or mounted: the daemon stops there if
/// the command that started it has gone.
pub fn mount(args: &CliArgs, before_changes: &dyn Fn() -> anyhow::Result<()>) -> anyhow::Result<FuseSession> {
    tracing::info!("{}", build_info::VERSION_LINE);
    let s3_path = args.s3_path()?;
    // A bad object list is refused before the network is touched.
    let listed = match &args.manifest {
        Some(path) => {
            let directory = manifest::directory_name(&s3_path, args.manifest_directory.as_deref())?;
            Some((manifest::read_object_list(path)?, directory))
        }
        None => None,
    };
    let memory_limit = args.memory_limit();
    let client_config = args.client_config(memory_limit)?;
    let fuse_mount = args.fuse_mount()?;
    let pool = PagedPool::config()
        .with_candidate_sizes([
            CandidateSize::prunable(CACHE_BLOCK_SIZE as usize),
            CandidateSize::prunable(client_config.part_config.read_size_bytes),
            CandidateSize::new(client_config.part_config.write_size_bytes),
        ])
        .with_memory_limit(memory_limit.bytes())
        .with_maintenance_interval(Duration::from_secs(60))
        .build();

    // A mount from a list never lists: the first request it makes is the first read.
    let validate = if listed.is_some() { None } else { Some(&s3_path) };
    let client: S3CrtClient = client_config
        .create_client(pool.clone(), validate)
        .with_context(|| format!("cannot reach {}", s3_path.bucket_description()))?;
    before_changes()?;

    let runtime = Runtime::new(client.event_loop_group());
    let personality = S3Personality::infer_from_bucket(&s3_path.bucket, &client.endpoint_config());
    let mut data_cache_config = args.data_cache_config();
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
    // Where the kernel keeps pages across opens, what it most likely holds is not read ahead (kernel_held.rs).
    let kernel_keeps = if args.keep_cache() == KeepCache::Off { 0 } else { page_cache_guess() };
    let read_ahead = args
        .read_ahead_config(memory_limit.bytes() as u64)
        .map(|config| ReadAhead::new(config.kernel_keeping(kernel_keeps)));
    // A list mount's lookups never reach S3: nothing to list for them.
    let list_on_lookup = args.list_on_lookup().filter(|_| listed.is_none()).map(ListOnLookup::new);
    let parts = fuse_session::Parts {
        // It remembers the order of what it lists, for the read-ahead across files (when that is on).
        client: Listing::new(client, read_ahead.clone()),
        runtime,
        pool,
        data_cache: data_cache_config,
        filesystem: args.filesystem_config(personality),
        keep_cache: args.keep_cache(),
        read_ahead: read_ahead.clone().map(|ahead| (ahead, s3_path.bucket.to_string())),
        list_on_lookup,
    };
    let mut session = match listed {
        Some((objects, directory)) => {
            if let Some(ahead) = &read_ahead {
                // A list mount's order: its objects as listed, keys under the prefix.
                let prefix = args.prefix();
                ahead.know_order(objects.iter().map(|o| (format!("{prefix}{}", o.key), o.etag.as_str(), o.size)));
            }
            let mount = manifest::metablock(objects, &s3_path, directory)?;
            tracing::info!("serving the listed objects under {}/", mount.directory_name);
            let mut session = fuse_session::create(parts, mount.metablock, fuse_mount)?;
            let store = mount.store;
            session.run_on_close(Box::new(move || drop(store)));
            session
        }
        None => {
            let superblock = Superblock::new(
                parts.client.clone(),
                s3_path,
                SuperblockConfig { cache_config: args.cache_config(), s3_personality: personality },
            );
            fuse_session::create(parts, superblock, fuse_mount)?
        }
    };
    if let Some(managed) = cache_dir {
        session.run_on_close(Box::new(move || drop(managed)));
    }
    Ok(session)
}
