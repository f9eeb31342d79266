//! The file system and FUSE session around our page-cache adapter: what the crates'
//! `MountpointConfig::create_fuse_session` does, which only ever serves their own `S3FuseFilesystem`.
//!
//! The steps are the crates' own, through their public calls: the prefetcher (with the disk cache when there is
//! one), `S3Filesystem` on the metablock, a `fuser::Session`, the crates' multi-threaded `FuseSession`, and the
//! interrupt handler. One step is ours: the session's notifier is handed to the adapter before any request is
//! served, so that an open can drop the pages of a changed object. With the read-ahead across files or
//! the whole first GET on (ahead/), the prefetcher reads through its `AheadCache`, in front of the disk cache if
//! there is one.

use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use fuser::{MountOption, Session, SessionACL};
use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_fs::data_cache::{DataCache, DataCacheConfig, DiskDataCache};
use mountpoint_s3_fs::fuse::config::MountPoint;
use mountpoint_s3_fs::fuse::session::FuseSession;
use mountpoint_s3_fs::memory::PagedPool;
use mountpoint_s3_fs::metablock::Metablock;
use mountpoint_s3_fs::prefetch::Prefetcher;
use mountpoint_s3_fs::{Runtime, S3Filesystem, S3FilesystemConfig};

use crate::ahead::{AheadCache, ReadAhead};
use crate::cli::CACHE_BLOCK_SIZE;
use crate::keep_cache::{DropPages, KeepCache, KeepCacheFs, KernelLink};
use crate::list_on_lookup::ListOnLookup;
use crate::opened_versions::{OpenedVersions, Witnessed};

/// Where and how to mount: the mount point, the options for the kernel, and the worker threads.
pub struct FuseMount {
    pub mount_point: MountPoint,
    pub options: Vec<MountOption>,
    pub max_threads: usize,
}

/// Everything the file system is built from.
pub struct Parts<Client> {
    pub client: Client,
    pub runtime: Runtime,
    pub pool: PagedPool,
    pub data_cache: DataCacheConfig,
    pub filesystem: S3FilesystemConfig,
    pub keep_cache: KeepCache,
    /// The read-ahead across files and the whole first GET (ahead/), and the bucket they read, when either is on.
    pub read_ahead: Option<(Arc<ReadAhead>, String)>,
    /// A directory listed at the first file looked up in it (list_on_lookup.rs), when on.
    pub list_on_lookup: Option<ListOnLookup>,
}

/// Builds the file system on `metablock` and mounts it; the session serves until unmounted or interrupted.
pub fn create<Client>(
    parts: Parts<Client>,
    metablock: impl Metablock + 'static,
    mount: FuseMount,
) -> anyhow::Result<FuseSession>
where
    Client: ObjectClient + Clone + Send + Sync + 'static,
{
    let (adapter, kernel) = filesystem(parts, metablock);
    let session = match mount.mount_point {
        MountPoint::Directory(path) => {
            Session::new(adapter, &path, &mount.options).context("Failed to create FUSE session")?
        }
        MountPoint::FileDescriptor(fd) => Session::from_fd(adapter, fd, acl(&mount.options)),
    };
    let notifier: Box<dyn DropPages> = Box::new(session.notifier());
    if kernel.set(notifier).is_err() {
        unreachable!("the session's notifier is handed over once");
    }
    let session =
        FuseSession::from_session(session, mount.max_threads, false).context("Failed to start FUSE session")?;
    ctrlc::set_handler(session.shutdown_fn()).context("failed to set interrupt handler")?;
    Ok(session)
}

/// The adapter over `S3Filesystem`, and the link through which it will reach the kernel.
pub(crate) fn filesystem<Client>(
    parts: Parts<Client>,
    metablock: impl Metablock + 'static,
) -> (KeepCacheFs<Client>, KernelLink)
where
    Client: ObjectClient + Clone + Send + Sync + 'static,
{
    // The adapter tells the read-ahead which reads start at offset 0: for the whole first GET, and so that the
    // read ahead across files leaves an object its own reader is already fetching.
    let from_start = parts.read_ahead.as_ref().map(|(ahead, _)| ahead.clone());
    let prefetcher = match (parts.read_ahead, parts.data_cache.disk_cache_config) {
        // The read-ahead is a data cache the prefetcher asks first, in front of the disk cache if there is one.
        (Some((ahead, bucket)), disk) => {
            let behind = disk
                .map(|disk| Arc::new(DiskDataCache::new(disk, parts.pool.clone())) as Arc<dyn DataCache + Send + Sync>);
            let cache =
                AheadCache::new(ahead, parts.client.clone(), bucket, parts.runtime.clone(), CACHE_BLOCK_SIZE, behind);
            Prefetcher::caching_builder(cache, parts.client.clone())
        }
        (None, Some(disk)) => {
            Prefetcher::caching_builder(DiskDataCache::new(disk, parts.pool.clone()), parts.client.clone())
        }
        (None, None) => Prefetcher::default_builder(parts.client.clone()),
    };
    let opened = OpenedVersions::default();
    let metablock = Witnessed::new(metablock, opened.clone());
    let read_only = parts.filesystem.read_only;
    let fs = S3Filesystem::new(parts.client, prefetcher, parts.pool, parts.runtime, metablock, parts.filesystem);
    let kernel: KernelLink = Arc::new(OnceLock::new());
    let adapter =
        KeepCacheFs::new(fs, opened, parts.keep_cache, kernel.clone(), from_start, parts.list_on_lookup, read_only);
    (adapter, kernel)
}

/// Who may use a mount made on a FUSE descriptor someone else mounted: fuser's own rule for its mounts.
fn acl(options: &[MountOption]) -> SessionACL {
    if options.contains(&MountOption::AllowRoot) {
        SessionACL::RootAndOwner
    } else if options.contains(&MountOption::AllowOther) {
        SessionACL::All
    } else {
        SessionACL::Owner
    }
}
