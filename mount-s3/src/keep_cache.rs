//! The kernel's page cache, kept across opens where the data cannot have changed under it.
//!
//! mountpoint-s3-fs answers `open` with no `FOPEN_KEEP_CACHE`, so the kernel drops a file's cached pages at every
//! open and every epoch of a loader crosses FUSE again. Its `fuse.rs` replies with the flags `S3Filesystem::open`
//! chose and has no hook to change them, but `S3Filesystem`'s operations are public: [`KeepCacheFs`] is our own
//! `fuser::Filesystem` over it, forwarding every operation, with one change to the reply of `open`
//! ([`PageCache::reply_flags`]):
//!
//! - a list mount (`--manifest`) pins every object to its listed ETag for the mount's life: always kept;
//! - a plain mount keeps an inode's pages while the open's ETag is the one they were read at. An open that sees
//!   another ETag drops the inode's pages through the kernel's notifier before it replies, then keeps again;
//! - never with `O_DIRECT` (the crates' `FOPEN_DIRECT_IO` stays), never for a handle that writes;
//! - `--no-keep-cache` turns it off: the crates' replies, unchanged.
//!
//! A remount starts with no pages: they belong to the old FUSE connection's inodes, which the kernel drops with it.
//!
//! The adapter also sees each read's offset, which the crates' prefetcher keeps to itself: while a read at offset 0
//! is answered, it tells the read-ahead that the handle's object is read from its start (ahead/first_get.rs). And
//! once it has answered the lookup of a file in a directory nobody listed, it lists that directory, so that the
//! next files' lookups there are answered from memory (list_on_lookup.rs).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use fuser::consts::{FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE};
use fuser::{
    Filesystem, KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use futures::executor::block_on;
use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_fs::S3Filesystem;
use mountpoint_s3_fs::fs::{DirectoryEntry, DirectoryReplier, Entry, Error, InodeNo, Opened, ToErrno};
use mountpoint_s3_fs::metrics::defs::{ATTR_FUSE_REQUEST, FUSE_IO_SIZE, FUSE_REQUEST_ERRORS};
use time::OffsetDateTime;

use crate::ahead::{FromStart, ReadAhead};
use crate::list_on_lookup::ListOnLookup;
use crate::opened_versions::{OpenedVersion, OpenedVersions};

/// When the kernel may keep a file's pages across opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepCache {
    /// Never: every open drops them (AWS's mount-s3; `--no-keep-cache`).
    Off,
    /// Always for reads: every object is pinned to one ETag for the mount's life (a list mount).
    Pinned,
    /// For reads while the inode's ETag is the one its pages were read at (a plain mount).
    WhileUnchanged,
}

/// Drops the kernel's cached pages of one inode (the kernel's notifier; a recorder in tests).
pub trait DropPages: Send + Sync {
    fn drop_pages(&self, ino: InodeNo) -> io::Result<()>;
}

impl DropPages for fuser::Notifier {
    fn drop_pages(&self, ino: InodeNo) -> io::Result<()> {
        // Offset 0 and length 0: every page of the inode (and its attributes).
        self.inval_inode(ino, 0, 0)
    }
}

/// The kernel's notifier, known only once the session exists, which is after the file system is built.
pub type KernelLink = Arc<OnceLock<Box<dyn DropPages>>>;

/// The decision at each open, and the ETag each inode's pages were read at.
pub struct PageCache {
    mode: KeepCache,
    read_at: Mutex<HashMap<InodeNo, Box<str>>>,
}

impl PageCache {
    pub fn new(mode: KeepCache) -> Self {
        Self { mode, read_at: Mutex::new(HashMap::new()) }
    }

    /// The flags to answer an open with: the crates' `chosen` ones, plus `FOPEN_KEEP_CACHE` where the inode's
    /// pages are of the version this open reads. `drop_pages` is called, before this returns, when they are not.
    ///
    /// Without `FOPEN_KEEP_CACHE` the kernel drops the inode's pages itself during this open, so every path that
    /// cannot vouch for them (no note of the version, a failed notifier) answers without it: the safe side.
    pub fn reply_flags(
        &self,
        ino: InodeNo,
        open_flags: i32,
        chosen: u32,
        version: Option<&OpenedVersion>,
        drop_pages: &dyn Fn(InodeNo) -> io::Result<()>,
    ) -> u32 {
        let reads_only = open_flags & libc::O_ACCMODE == libc::O_RDONLY;
        let Some(version) = version else { return chosen };
        if self.mode == KeepCache::Off || chosen & FOPEN_DIRECT_IO != 0 || !reads_only || version.writes {
            return chosen;
        }
        if self.mode == KeepCache::Pinned {
            return chosen | FOPEN_KEEP_CACHE;
        }
        // A file written here and not yet uploaded has no version to keep pages of.
        let Some(etag) = &version.etag else { return chosen };
        let before = self.read_at.lock().expect("page cache lock").insert(ino, etag.clone());
        match before {
            Some(before) if before == *etag => chosen | FOPEN_KEEP_CACHE,
            // The first open of this inode since the kernel last forgot it: any pages it holds are dropped by this
            // open, and later opens of the same version keep what this one reads.
            None => chosen,
            Some(before) => match drop_pages(ino) {
                Ok(()) => {
                    tracing::debug!(ino, %before, now = %etag, "object changed: dropped its cached pages");
                    chosen | FOPEN_KEEP_CACHE
                }
                Err(error) => {
                    tracing::warn!(
                        ino,
                        "cannot drop the cached pages of a changed object ({error}); this open drops them"
                    );
                    chosen
                }
            },
        }
    }

    /// The kernel forgot the inode (and its pages with it): nothing to compare the next open with.
    pub fn forget(&self, ino: InodeNo) {
        self.read_at.lock().expect("page cache lock").remove(&ino);
    }
}

/// The crates' `S3Filesystem` as a `fuser::Filesystem`, with [`PageCache`]'s answer to `open`.
pub struct KeepCacheFs<Client>
where
    Client: ObjectClient + Clone + Send + Sync + 'static,
{
    fs: S3Filesystem<Client>,
    opened: OpenedVersions,
    pages: PageCache,
    kernel: KernelLink,
    from_start: Option<ReadsFromStart>,
    listings: Option<ListOnLookup>,
    read_only: bool,
}

/// With the whole first GET on: the read-ahead to tell of reads from offset 0, and each read handle's key.
struct ReadsFromStart {
    ahead: Arc<ReadAhead>,
    keys: Mutex<HashMap<u64, Box<str>>>,
}

impl<Client> KeepCacheFs<Client>
where
    Client: ObjectClient + Clone + Send + Sync + 'static,
{
    /// `fs` must have been built on a [`crate::opened_versions::Witnessed`] metablock writing to `opened`.
    pub fn new(
        fs: S3Filesystem<Client>,
        opened: OpenedVersions,
        mode: KeepCache,
        kernel: KernelLink,
        from_start: Option<Arc<ReadAhead>>,
        listings: Option<ListOnLookup>,
        read_only: bool,
    ) -> Self {
        let from_start = from_start.map(|ahead| ReadsFromStart { ahead, keys: Mutex::default() });
        Self { fs, opened, pages: PageCache::new(mode), kernel, from_start, listings, read_only }
    }

    /// The crates' flush, or on a read-only mount ENOSYS, which the kernel takes as "send no FLUSH again" on this
    /// connection: each close() then stops waiting a round trip to this program. There a read handle's flush only
    /// marks the handle closed for the check against a writer opening the file, and no writer can open; the
    /// release that follows every close frees the handle as before.
    pub async fn flush(&self, ino: InodeNo, fh: u64, lock_owner: u64, pid: u32) -> Result<(), libc::c_int> {
        if self.read_only {
            return Err(libc::ENOSYS);
        }
        self.fs.flush(ino, fh, lock_owner, pid).await.map_err(|error| failed("flush", &error))
    }

    /// The crates' lookup (answered before [`Self::after_lookup`]).
    pub async fn lookup(&self, parent: InodeNo, name: &OsStr) -> Result<Entry, Error> {
        self.fs.lookup(parent, name).await
    }

    /// The crates' file system underneath.
    #[cfg(test)]
    pub(crate) fn crates(&self) -> &S3Filesystem<Client> {
        &self.fs
    }

    /// After a lookup in `parent` was answered with `entry`: a file's directory is listed unless it needs none
    /// (list_on_lookup.rs). The entries listed, 0 when nothing was.
    pub async fn after_lookup(&self, parent: InodeNo, entry: &Entry) -> usize {
        match &self.listings {
            Some(listings) if entry.attr.kind == fuser::FileType::RegularFile => {
                listings.after_file_lookup(&self.fs, parent).await
            }
            _ => 0,
        }
    }

    /// The crates' opendir; a directory a reader lists needs no listing of ours.
    pub async fn opendir(&self, ino: InodeNo, flags: i32) -> Result<Opened, Error> {
        let opened = self.fs.opendir(ino, flags).await?;
        if let Some(listings) = &self.listings {
            listings.listed_by_reader(ino);
        }
        Ok(opened)
    }

    /// The crates' open, answered with [`PageCache::reply_flags`].
    pub async fn open(&self, ino: InodeNo, flags: i32, pid: u32) -> Result<Opened, Error> {
        let opened = self.fs.open(ino, flags.into(), pid).await?;
        let version = self.opened.take(opened.fh);
        if let (Some(from_start), Some(version)) = (&self.from_start, &version)
            && let (false, Some(key)) = (version.writes, &version.key)
        {
            from_start.keys.lock().expect("read handles lock").insert(opened.fh, key.clone());
        }
        let drop_pages = |ino| match self.kernel.get() {
            Some(kernel) => kernel.drop_pages(ino),
            None => Err(io::Error::other("the FUSE session has no notifier yet")),
        };
        let reply = self.pages.reply_flags(ino, flags, opened.flags, version.as_ref(), &drop_pages);
        Ok(Opened { fh: opened.fh, flags: reply })
    }

    /// The crates' forget, and the inode's noted version with it.
    pub async fn forget(&self, ino: InodeNo, nlookup: u64) {
        self.fs.forget(ino, nlookup).await;
        self.pages.forget(ino);
    }

    /// The crates' read; one at offset 0 is noted as a read of the object from its start while it is answered.
    pub async fn read(
        &self,
        ino: InodeNo,
        fh: u64,
        offset: i64,
        size: u32,
        flags: i32,
        lock: Option<u64>,
    ) -> Result<Bytes, Error> {
        let _from_start = if offset == 0 { self.reading_from_start(fh) } else { None };
        self.fs.read(ino, fh, offset, size, flags, lock).await
    }

    fn reading_from_start(&self, fh: u64) -> Option<FromStart> {
        let from_start = self.from_start.as_ref()?;
        let keys = from_start.keys.lock().expect("read handles lock");
        Some(from_start.ahead.reading_from_start(keys.get(&fh)?))
    }

    /// The crates' release, and the handle's key with it.
    pub async fn release(
        &self,
        ino: InodeNo,
        fh: u64,
        flags: i32,
        lock_owner: Option<u64>,
        flush: bool,
    ) -> Result<(), Error> {
        if let Some(from_start) = &self.from_start {
            from_start.keys.lock().expect("read handles lock").remove(&fh);
        }
        self.fs.release(ino, fh, flags, lock_owner, flush).await
    }
}

/// Logs and counts a failed operation as the crates' `fuse.rs` does (mountctl's supervisor reads S3's refusals in
/// that log, e.g. "403 Forbidden"), and gives its errno.
fn failed(operation: &'static str, error: &Error) -> libc::c_int {
    let errno = error.to_errno();
    metrics::counter!(FUSE_REQUEST_ERRORS, ATTR_FUSE_REQUEST => operation).increment(1);
    if errno == libc::ENOENT {
        tracing::debug!("{operation} failed with errno {errno}: {error:#}");
    } else {
        tracing::warn!("{operation} failed with errno {errno}: {error:#}");
    }
    errno
}

/// The bytes of one read or write, in the crates' own metrics.
fn io_size(kind: &'static str, bytes: usize) {
    metrics::counter!("fuse.total_bytes", "type" => kind).increment(bytes as u64);
    metrics::histogram!(FUSE_IO_SIZE, ATTR_FUSE_REQUEST => kind).record(bytes as f64);
}

fn to_offset(time: TimeOrNow) -> OffsetDateTime {
    match time {
        TimeOrNow::SpecificTime(time) => OffsetDateTime::from(time),
        TimeOrNow::Now => OffsetDateTime::now_utc(),
    }
}

/// Adds the crates' directory entries to a `readdir` reply.
struct Entries<'a>(&'a mut ReplyDirectory);

impl DirectoryReplier for Entries<'_> {
    fn add(&mut self, entry: DirectoryEntry) -> bool {
        self.0.add(entry.ino, entry.offset, entry.attr.kind, entry.name)
    }
}

/// Adds the crates' directory entries, attributes included, to a `readdirplus` reply.
struct EntriesPlus<'a>(&'a mut ReplyDirectoryPlus);

impl DirectoryReplier for EntriesPlus<'_> {
    fn add(&mut self, entry: DirectoryEntry) -> bool {
        self.0.add(entry.ino, entry.offset, entry.name, &entry.ttl, &entry.attr, entry.generation)
    }
}

// Operations the crates do not implement are left to fuser's defaults, which answer as the crates do (ENOSYS;
// EPERM for link and symlink).
impl<Client> Filesystem for KeepCacheFs<Client>
where
    Client: ObjectClient + Clone + Send + Sync + 'static,
{
    fn init(&self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        block_on(self.fs.init(config))
    }

    fn lookup(&self, _req: &Request<'_>, parent: InodeNo, name: &OsStr, reply: ReplyEntry) {
        match block_on(KeepCacheFs::lookup(self, parent, name)) {
            Ok(entry) => {
                reply.entry(&entry.ttl, &entry.attr, entry.generation);
                // Answered first: the reader's open goes on while this thread lists the directory.
                block_on(self.after_lookup(parent, &entry));
            }
            Err(e) => reply.error(failed("lookup", &e)),
        }
    }

    fn getattr(&self, _req: &Request<'_>, ino: InodeNo, _fh: Option<u64>, reply: ReplyAttr) {
        match block_on(self.fs.getattr(ino)) {
            Ok(attr) => reply.attr(&attr.ttl, &attr.attr),
            Err(e) => reply.error(failed("getattr", &e)),
        }
    }

    fn forget(&self, _req: &Request<'_>, ino: InodeNo, nlookup: u64) {
        block_on(KeepCacheFs::forget(self, ino, nlookup));
    }

    fn open(&self, req: &Request<'_>, ino: InodeNo, flags: i32, reply: ReplyOpen) {
        match block_on(KeepCacheFs::open(self, ino, flags, req.pid())) {
            Ok(opened) => reply.opened(opened.fh, opened.flags),
            Err(e) => reply.error(failed("open", &e)),
        }
    }

    fn read(
        &self,
        _req: &Request<'_>,
        ino: InodeNo,
        fh: u64,
        offset: i64,
        size: u32,
        flags: i32,
        lock: Option<u64>,
        reply: ReplyData,
    ) {
        match block_on(KeepCacheFs::read(self, ino, fh, offset, size, flags, lock)) {
            Ok(data) => {
                io_size("read", data.len());
                reply.data(&data);
            }
            Err(e) => reply.error(failed("read", &e)),
        }
    }

    fn opendir(&self, _req: &Request<'_>, ino: InodeNo, flags: i32, reply: ReplyOpen) {
        match block_on(KeepCacheFs::opendir(self, ino, flags)) {
            Ok(opened) => reply.opened(opened.fh, opened.flags),
            Err(e) => reply.error(failed("opendir", &e)),
        }
    }

    fn readdir(&self, _req: &Request<'_>, ino: InodeNo, fh: u64, offset: i64, mut reply: ReplyDirectory) {
        match block_on(self.fs.readdir(ino, fh, offset, Entries(&mut reply))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("readdir", &e)),
        }
    }

    fn readdirplus(&self, _req: &Request<'_>, ino: InodeNo, fh: u64, offset: i64, mut reply: ReplyDirectoryPlus) {
        match block_on(self.fs.readdirplus(ino, fh, offset, EntriesPlus(&mut reply))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("readdirplus", &e)),
        }
    }

    fn releasedir(&self, _req: &Request<'_>, ino: InodeNo, fh: u64, flags: i32, reply: ReplyEmpty) {
        match block_on(self.fs.releasedir(ino, fh, flags)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("releasedir", &e)),
        }
    }

    fn fsync(&self, _req: &Request<'_>, ino: InodeNo, fh: u64, datasync: bool, reply: ReplyEmpty) {
        match block_on(self.fs.fsync(ino, fh, datasync)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("fsync", &e)),
        }
    }

    fn flush(&self, req: &Request<'_>, ino: InodeNo, fh: u64, lock_owner: u64, reply: ReplyEmpty) {
        match block_on(KeepCacheFs::flush(self, ino, fh, lock_owner, req.pid())) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    /// No ioctl is supported: ENOTTY at once, as for a regular file on a local disk, where fuser's default would
    /// log a warning. Python's `open()` asks `isatty()` of every file it opens (TCGETS), so a loader's every open
    /// would have written a line to the mount's log: a million lines an epoch on ImageNet.
    fn ioctl(
        &self,
        _req: &Request<'_>,
        _ino: InodeNo,
        _fh: u64,
        _flags: u32,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(libc::ENOTTY);
    }

    fn release(
        &self,
        _req: &Request<'_>,
        ino: InodeNo,
        fh: u64,
        flags: i32,
        lock_owner: Option<u64>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        match block_on(KeepCacheFs::release(self, ino, fh, flags, lock_owner, flush)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("release", &e)),
        }
    }

    fn mknod(
        &self,
        _req: &Request<'_>,
        parent: InodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        match block_on(self.fs.mknod(parent, name, mode as libc::mode_t, umask, rdev)) {
            Ok(entry) => reply.entry(&entry.ttl, &entry.attr, entry.generation),
            Err(e) => reply.error(failed("mknod", &e)),
        }
    }

    fn mkdir(&self, _req: &Request<'_>, parent: InodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        match block_on(self.fs.mkdir(parent, name, mode as libc::mode_t, umask)) {
            Ok(entry) => reply.entry(&entry.ttl, &entry.attr, entry.generation),
            Err(e) => reply.error(failed("mkdir", &e)),
        }
    }

    fn write(
        &self,
        _req: &Request<'_>,
        ino: InodeNo,
        fh: u64,
        offset: i64,
        data: &[u8],
        write_flags: u32,
        flags: i32,
        lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        match block_on(self.fs.write(ino, fh, offset, data, write_flags, flags, lock_owner)) {
            Ok(written) => {
                io_size("write", written as usize);
                reply.written(written);
            }
            Err(e) => reply.error(failed("write", &e)),
        }
    }

    fn rmdir(&self, _req: &Request<'_>, parent: InodeNo, name: &OsStr, reply: ReplyEmpty) {
        match block_on(self.fs.rmdir(parent, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("rmdir", &e)),
        }
    }

    fn unlink(&self, _req: &Request<'_>, parent: InodeNo, name: &OsStr, reply: ReplyEmpty) {
        match block_on(self.fs.unlink(parent, name)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("unlink", &e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request<'_>,
        ino: InodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        match block_on(self.fs.setattr(ino, atime.map(to_offset), mtime.map(to_offset), size, flags)) {
            Ok(attr) => reply.attr(&attr.ttl, &attr.attr),
            Err(e) => reply.error(failed("setattr", &e)),
        }
    }

    fn rename(
        &self,
        _req: &Request<'_>,
        parent: InodeNo,
        name: &OsStr,
        newparent: InodeNo,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        match block_on(self.fs.rename(parent, name, newparent, newname, flags.into())) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(failed("rename", &e)),
        }
    }

    fn statfs(&self, _req: &Request<'_>, ino: InodeNo, reply: ReplyStatfs) {
        match block_on(self.fs.statfs(ino)) {
            Ok(s) => reply.statfs(
                s.total_blocks,
                s.free_blocks,
                s.available_blocks,
                s.total_inodes,
                s.free_inodes,
                s.block_size,
                s.maximum_name_length,
                s.fragment_size,
            ),
            Err(e) => reply.error(failed("statfs", &e)),
        }
    }
}

/// The adapter's tests. `PageCache` alone; then the adapter on the crates' real `S3Filesystem` and `Superblock` (or
/// a list mount's store) over `mountpoint-s3-client`'s in-memory mock client (its `mock` feature, a dev-dependency
/// only: no S3 server can be made to answer inside `cargo test`); then every forwarded operation through a real
/// FUSE mount of the adapter, made by the kernel, in a temporary directory.
#[cfg(test)]
pub(crate) mod tests {
    use std::fs::{self, OpenOptions};
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::OpenOptionsExt as _;
    use std::path::Path;
    use std::time::Duration;

    use futures::executor::ThreadPool;
    use mountpoint_s3_client::mock_client::{MockClient, MockObject, Operation};
    use mountpoint_s3_client::types::ETag;
    use mountpoint_s3_fs::data_cache::DataCacheConfig;
    use mountpoint_s3_fs::fs::{CacheConfig, TimeToLive};
    use mountpoint_s3_fs::memory::{CandidateSize, PagedPool};
    use mountpoint_s3_fs::metablock::Metablock;
    use mountpoint_s3_fs::s3::{Bucket, Prefix, S3Path, S3Personality};
    use mountpoint_s3_fs::{Runtime, S3FilesystemConfig, Superblock, SuperblockConfig};

    use mountpoint_s3_fs::prefetch::PrefetcherConfig;

    use super::*;
    use crate::ahead::{AheadConfig, WholeFirstGet};
    use crate::fuse_session::{Parts, filesystem};
    use crate::manifest::{self, ListedObject};

    const BUCKET: &str = "bucket";
    const PART: usize = 1024 * 1024;

    fn read(etag: &str) -> OpenedVersion {
        OpenedVersion { etag: Some(etag.into()), writes: false, key: None }
    }

    /// Records which inodes it was asked to drop the pages of; fails when told to.
    #[derive(Clone, Default)]
    pub(crate) struct Recorder {
        dropped: Arc<Mutex<Vec<InodeNo>>>,
        fail: bool,
    }

    impl Recorder {
        fn dropped(&self) -> Vec<InodeNo> {
            self.dropped.lock().unwrap().clone()
        }

        fn call(&self) -> impl Fn(InodeNo) -> io::Result<()> + '_ {
            move |ino| self.drop_pages(ino)
        }
    }

    impl DropPages for Recorder {
        fn drop_pages(&self, ino: InodeNo) -> io::Result<()> {
            self.dropped.lock().unwrap().push(ino);
            if self.fail { Err(io::Error::other("refused")) } else { Ok(()) }
        }
    }

    #[test]
    fn a_list_mount_keeps_the_pages_of_every_read_open_the_first_included() {
        let pages = PageCache::new(KeepCache::Pinned);
        let kernel = Recorder::default();
        for _ in 0..2 {
            assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call()), FOPEN_KEEP_CACHE);
        }
        assert!(kernel.dropped().is_empty());
    }

    #[test]
    fn a_plain_mount_keeps_pages_from_the_second_open_of_the_same_version() {
        let pages = PageCache::new(KeepCache::WhileUnchanged);
        let kernel = Recorder::default();
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call()), 0);
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call()), FOPEN_KEEP_CACHE);
        assert_eq!(pages.reply_flags(6, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call()), 0, "another inode");
        assert!(kernel.dropped().is_empty());
    }

    #[test]
    fn an_open_of_a_new_etag_drops_the_old_pages_before_it_keeps_again() {
        let pages = PageCache::new(KeepCache::WhileUnchanged);
        let kernel = Recorder::default();
        pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call());
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e2")), &kernel.call()), FOPEN_KEEP_CACHE);
        assert_eq!(kernel.dropped(), [5]);
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e2")), &kernel.call()), FOPEN_KEEP_CACHE);
        assert_eq!(kernel.dropped(), [5], "dropped once, at the change");
    }

    #[test]
    fn when_the_pages_cannot_be_dropped_the_open_does_not_keep_them() {
        let pages = PageCache::new(KeepCache::WhileUnchanged);
        let kernel = Recorder { fail: true, ..Default::default() };
        pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call());
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e2")), &kernel.call()), 0);
        assert_eq!(kernel.dropped(), [5]);
    }

    #[test]
    fn after_the_kernel_forgets_an_inode_its_next_open_starts_over() {
        let pages = PageCache::new(KeepCache::WhileUnchanged);
        let kernel = Recorder::default();
        pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call());
        pages.forget(5);
        assert_eq!(pages.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e2")), &kernel.call()), 0);
        assert!(kernel.dropped().is_empty());
    }

    #[test]
    fn o_direct_writers_unknown_versions_and_the_flag_off_never_keep() {
        let kernel = Recorder::default();
        for mode in [KeepCache::Pinned, KeepCache::WhileUnchanged] {
            let pages = PageCache::new(mode);
            for _ in 0..2 {
                let direct = pages.reply_flags(5, libc::O_RDONLY, FOPEN_DIRECT_IO, Some(&read("e1")), &kernel.call());
                assert_eq!(direct, FOPEN_DIRECT_IO, "{mode:?}");
                let writer = OpenedVersion { etag: None, writes: true, key: None };
                assert_eq!(pages.reply_flags(6, libc::O_WRONLY, 0, Some(&writer), &kernel.call()), 0, "{mode:?}");
                assert_eq!(pages.reply_flags(7, libc::O_RDWR, 0, Some(&read("e1")), &kernel.call()), 0, "{mode:?}");
                assert_eq!(pages.reply_flags(8, libc::O_RDONLY, 0, None, &kernel.call()), 0, "{mode:?}");
            }
        }
        let off = PageCache::new(KeepCache::Off);
        for _ in 0..2 {
            assert_eq!(off.reply_flags(5, libc::O_RDONLY, 0, Some(&read("e1")), &kernel.call()), 0);
        }
        assert!(kernel.dropped().is_empty());
    }

    /// The metadata TTL of a test's mount, and whether it lists a directory after a lookup in it.
    #[derive(Clone, Copy)]
    pub(crate) struct Lookups {
        pub(crate) ttl: Duration,
        pub(crate) list: bool,
    }

    impl Lookups {
        const MINUTE: Lookups = Lookups { ttl: Duration::from_secs(60), list: false };

        fn cache_config(self) -> CacheConfig {
            CacheConfig::new(TimeToLive::Duration(self.ttl))
        }
    }

    /// The adapter on the crates' file system, over the mock client, with `kernel` for the notifier.
    pub(crate) fn adapter(
        client: &MockClient,
        metablock: impl Metablock + 'static,
        mode: KeepCache,
        read_only: bool,
        kernel: Recorder,
        read_ahead: Option<Arc<ReadAhead>>,
        lookups: Lookups,
    ) -> KeepCacheFs<MockClient> {
        let pool =
            PagedPool::config().with_candidate_sizes([CandidateSize::new(PART)]).with_minimum_memory_limit().build();
        let parts = Parts {
            client: client.clone(),
            runtime: Runtime::new(ThreadPool::builder().pool_size(1).create().unwrap()),
            pool,
            data_cache: DataCacheConfig::default(),
            filesystem: S3FilesystemConfig {
                cache_config: lookups.cache_config(),
                read_only,
                allow_delete: true,
                allow_overwrite: true,
                ..Default::default()
            },
            keep_cache: mode,
            read_ahead: read_ahead.map(|ahead| (ahead, BUCKET.to_string())),
            list_on_lookup: lookups.list.then(|| ListOnLookup::new(lookups.ttl)),
        };
        let (adapter, link) = filesystem(parts, metablock);
        assert!(link.set(Box::new(kernel)).is_ok());
        adapter
    }

    fn s3_path() -> S3Path {
        S3Path::new(Bucket::new(BUCKET).unwrap(), Prefix::new("").unwrap())
    }

    pub(crate) fn client_with(objects: &[(&str, &[u8])]) -> MockClient {
        client_with_parts(objects, PART)
    }

    fn client_with_parts(objects: &[(&str, &[u8])], part_size: usize) -> MockClient {
        // Backpressure as the CRT client has it: the prefetcher needs it.
        let config = MockClient::config().bucket(BUCKET).part_size(part_size).enable_backpressure(true);
        let client = config.initial_read_window_size(256 * 1024).build();
        for (key, body) in objects {
            client.add_object(key, MockObject::from_bytes(body, ETag::from_object_bytes(body)));
        }
        client
    }

    fn superblock(client: &MockClient) -> Superblock<MockClient> {
        superblock_with(client, Lookups::MINUTE)
    }

    pub(crate) fn superblock_with(client: &MockClient, lookups: Lookups) -> Superblock<MockClient> {
        let config = SuperblockConfig { cache_config: lookups.cache_config(), s3_personality: S3Personality::Standard };
        Superblock::new(client.clone(), s3_path(), config)
    }

    fn plain(client: &MockClient, kernel: Recorder) -> KeepCacheFs<MockClient> {
        adapter(client, superblock(client), KeepCache::WhileUnchanged, false, kernel, None, Lookups::MINUTE)
    }

    /// A plain read-only mount (mountctl's default), nothing read ahead.
    fn read_only_plain(client: &MockClient) -> KeepCacheFs<MockClient> {
        adapter(client, superblock(client), KeepCache::WhileUnchanged, true, Recorder::default(), None, Lookups::MINUTE)
    }

    /// A plain mount with the whole first GET on for objects up to `up_to` bytes, nothing read ahead across files.
    fn whole_first_get(client: &MockClient, up_to: u64) -> (KeepCacheFs<MockClient>, Arc<ReadAhead>) {
        let whole_first = WholeFirstGet { up_to, above: PrefetcherConfig::default().initial_request_size as u64 };
        let ahead = ReadAhead::new(AheadConfig::sized_from(1 << 30, 0, None, whole_first));
        let fs = adapter(
            client,
            superblock(client),
            KeepCache::WhileUnchanged,
            true,
            Recorder::default(),
            Some(ahead.clone()),
            Lookups::MINUTE,
        );
        (fs, ahead)
    }

    /// Reads `length` bytes of `ino` from `offset` through the adapter, in the kernel's 128 KiB requests.
    fn read_range(fs: &KeepCacheFs<MockClient>, ino: InodeNo, offset: u64, length: u64) -> Vec<u8> {
        let opened = block_on(fs.open(ino, libc::O_RDONLY, 1)).expect("open");
        let mut bytes = Vec::new();
        while (bytes.len() as u64) < length {
            let at = offset + bytes.len() as u64;
            let size = (128 * 1024).min(length - bytes.len() as u64) as u32;
            let data = block_on(fs.read(ino, opened.fh, at as i64, size, 0, None)).expect("read");
            if data.is_empty() {
                break;
            }
            bytes.extend_from_slice(&data);
        }
        block_on(fs.release(ino, opened.fh, libc::O_RDONLY, None, true)).expect("release");
        bytes
    }

    /// Opens `ino` with `flags`, closes it again, and gives the flags the open answered with.
    fn open_and_close(fs: &KeepCacheFs<MockClient>, ino: InodeNo, flags: i32) -> u32 {
        let opened = block_on(fs.open(ino, flags, 1)).expect("open");
        block_on(fs.fs.release(ino, opened.fh, flags, None, true)).expect("release");
        opened.flags
    }

    fn ino_of(fs: &KeepCacheFs<MockClient>, parent: InodeNo, name: &str) -> InodeNo {
        block_on(fs.fs.lookup(parent, OsStr::new(name))).expect("lookup").attr.ino
    }

    #[test]
    fn a_read_only_mount_asks_the_kernel_for_no_flush_and_a_read_write_one_flushes() {
        let client = client_with(&[("a.jpg", b"one")]);
        let read_only = read_only_plain(&client);
        let ino = ino_of(&read_only, 1, "a.jpg");
        let opened = block_on(read_only.open(ino, libc::O_RDONLY, 1)).expect("open");
        assert_eq!(block_on(read_only.flush(ino, opened.fh, 0, 1)), Err(libc::ENOSYS));
        // With no flush before it, the release frees the handle, and the file opens and reads again.
        block_on(read_only.release(ino, opened.fh, libc::O_RDONLY, None, false)).expect("release");
        assert_eq!(read_range(&read_only, ino, 0, 3), b"one");

        let read_write = plain(&client, Recorder::default());
        let ino = ino_of(&read_write, 1, "a.jpg");
        let opened = block_on(read_write.open(ino, libc::O_RDONLY, 1)).expect("open");
        assert_eq!(block_on(read_write.flush(ino, opened.fh, 0, 1)), Ok(()), "a writable mount flushes as before");
        block_on(read_write.release(ino, opened.fh, libc::O_RDONLY, None, true)).expect("release");
    }

    #[test]
    fn the_adapter_keeps_a_plain_mounts_pages_from_the_second_open() {
        let client = client_with(&[("a.jpg", b"one")]);
        let kernel = Recorder::default();
        let fs = plain(&client, kernel.clone());
        let ino = ino_of(&fs, 1, "a.jpg");
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), 0);
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
        assert!(kernel.dropped().is_empty());
    }

    #[test]
    fn the_adapter_keeps_a_list_mounts_pages_from_the_first_open() {
        let client = client_with(&[("train/a.jpg", b"one")]);
        let listed = vec![ListedObject {
            line: 1,
            key: "a.jpg".into(),
            etag: ETag::from_object_bytes(b"one").as_str().into(),
            size: 3,
        }];
        let prefix = S3Path::new(Bucket::new(BUCKET).unwrap(), Prefix::new("train/").unwrap());
        let mount = manifest::metablock(listed, &prefix, "train".into()).expect("a list mount");
        let fs = adapter(&client, mount.metablock, KeepCache::Pinned, true, Recorder::default(), None, Lookups::MINUTE);
        let directory = ino_of(&fs, 1, "train");
        let ino = ino_of(&fs, directory, "a.jpg");
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
    }

    #[test]
    fn the_adapter_answers_o_direct_with_direct_io_and_no_kept_pages() {
        let client = client_with(&[("a.jpg", b"one")]);
        let fs = plain(&client, Recorder::default());
        let ino = ino_of(&fs, 1, "a.jpg");
        for _ in 0..2 {
            assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY | libc::O_DIRECT), FOPEN_DIRECT_IO);
        }
    }

    #[test]
    fn the_adapter_drops_the_pages_of_an_inode_overwritten_here_then_keeps_the_new_ones() {
        let client = client_with(&[("a.jpg", b"one")]);
        let kernel = Recorder::default();
        let fs = plain(&client, kernel.clone());
        let ino = ino_of(&fs, 1, "a.jpg");
        open_and_close(&fs, ino, libc::O_RDONLY);
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
        // An overwrite (--allow-overwrite) uploads a new version under the same inode: a new ETag.
        let flags = libc::O_WRONLY | libc::O_TRUNC;
        let writer = block_on(fs.open(ino, flags, 1)).expect("open for overwriting");
        assert_eq!(writer.flags, 0, "a writer never keeps pages");
        block_on(fs.fs.write(ino, writer.fh, 0, b"two!", 0, flags, None)).expect("write");
        block_on(fs.fs.release(ino, writer.fh, flags, None, true)).expect("upload");
        assert_eq!(ino_of(&fs, 1, "a.jpg"), ino, "the same inode");
        assert!(kernel.dropped().is_empty());
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
        assert_eq!(kernel.dropped(), [ino], "the old version's pages, dropped before the open answered");
        assert_eq!(open_and_close(&fs, ino, libc::O_RDONLY), FOPEN_KEEP_CACHE);
        assert_eq!(kernel.dropped(), [ino]);
    }

    /// Parts of 8 MiB, as the CRT client's default: a 3 MiB object is one part, so one GET is one request.
    const CLIENT_PART: usize = 8 * PART;

    #[test]
    fn a_file_read_from_offset_0_costs_one_get_and_a_read_elsewhere_is_not_widened() {
        let body: Vec<u8> = (0..3 * PART).map(|i| (i % 251) as u8).collect();
        let client = client_with_parts(&[("shard.tar", &body), ("other.tar", &body)], CLIENT_PART);
        let (fs, ahead) = whole_first_get(&client, 4 * PART as u64);
        let gets = client.new_counter(Operation::GetObject);
        let ino = ino_of(&fs, 1, "shard.tar");
        assert_eq!(read_range(&fs, ino, 0, body.len() as u64), body);
        assert_eq!(gets.count(), 1, "the whole object in the first GET");
        assert_eq!(ahead.held(), 0, "served whole, nothing is left in memory");
        // A 64 KiB read in the middle of an object (map-style) is the prefetcher's own small first GET.
        let other = ino_of(&fs, 1, "other.tar");
        let middle = 2 * PART as u64;
        assert_eq!(read_range(&fs, other, middle, 64 * 1024), body[middle as usize..middle as usize + 64 * 1024]);
        assert_eq!(gets.count(), 2);
        assert_eq!(ahead.held(), 0, "nothing fetched whole for a read that did not start at offset 0");
    }

    #[test]
    fn on_a_list_mount_a_file_read_from_offset_0_costs_one_get_too() {
        // The note names the object by its full key (the prefix and the listed key), as the prefetcher does.
        let body = vec![3u8; 3 * PART];
        let client = client_with_parts(&[("train/shard.tar", &body)], CLIENT_PART);
        let etag = ETag::from_object_bytes(&body).as_str().to_string();
        let listed = vec![ListedObject { line: 1, key: "shard.tar".into(), etag, size: body.len() as u64 }];
        let prefix = S3Path::new(Bucket::new(BUCKET).unwrap(), Prefix::new("train/").unwrap());
        let mount = manifest::metablock(listed, &prefix, "train".into()).expect("a list mount");
        let whole_first = WholeFirstGet { up_to: 4 * PART as u64, above: PART as u64 };
        let ahead = ReadAhead::new(AheadConfig::sized_from(1 << 30, 0, None, whole_first));
        let fs = adapter(
            &client,
            mount.metablock,
            KeepCache::Pinned,
            true,
            Recorder::default(),
            Some(ahead.clone()),
            Lookups::MINUTE,
        );
        let gets = client.new_counter(Operation::GetObject);
        let directory = ino_of(&fs, 1, "train");
        let ino = ino_of(&fs, directory, "shard.tar");
        assert_eq!(read_range(&fs, ino, 0, body.len() as u64), body);
        assert_eq!(gets.count(), 1);
        assert_eq!(ahead.held(), 0);
    }

    #[test]
    fn without_the_whole_first_get_a_file_read_from_offset_0_costs_the_prefetchers_requests() {
        // The case above with the flag off (`--whole-first-get 0`): the crates' 1.125 MiB first GET, then more.
        let body = vec![7u8; 3 * PART];
        let client = client_with_parts(&[("shard.tar", &body)], CLIENT_PART);
        let fs = read_only_plain(&client);
        let gets = client.new_counter(Operation::GetObject);
        let ino = ino_of(&fs, 1, "shard.tar");
        assert_eq!(read_range(&fs, ino, 0, body.len() as u64), body);
        assert!(gets.count() >= 2, "{} GETs", gets.count());
    }

    /// The adapter mounted by the kernel in a temporary directory, unmounted when dropped.
    pub(crate) struct Mounted {
        _session: fuser::BackgroundSession,
        pub(crate) dir: tempfile::TempDir,
        pub(crate) client: MockClient,
    }

    impl Mounted {
        fn new(objects: &[(&str, &[u8])]) -> Self {
            let client = client_with(objects);
            let fs = plain(&client, Recorder::default());
            Self::of(fs, client)
        }

        /// `fs` (built on `client`) mounted by the kernel.
        pub(crate) fn of(fs: KeepCacheFs<MockClient>, client: MockClient) -> Self {
            let dir = tempfile::tempdir().expect("a mount point");
            let options = [MountOption::FSName("mountctl-keep-cache-test".into()), MountOption::DefaultPermissions];
            let session = fuser::Session::new(fs, dir.path(), &options).expect("a FUSE mount (needs /dev/fuse)");
            Self { _session: session.spawn().expect("the session's thread"), dir, client }
        }

        pub(crate) fn path(&self, name: &str) -> std::path::PathBuf {
            self.dir.path().join(name)
        }

        fn gets(&self) -> mountpoint_s3_client::mock_client::OperationCounter<'_> {
            self.client.new_counter(Operation::GetObject)
        }
    }

    use fuser::MountOption;

    fn contents(path: &Path) -> Vec<u8> {
        let mut bytes = Vec::new();
        fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)).expect("read");
        bytes
    }

    #[test]
    fn lookup_and_getattr_are_forwarded() {
        let mount = Mounted::new(&[("a.jpg", b"12345")]);
        assert_eq!(fs::metadata(mount.path("a.jpg")).expect("stat").len(), 5);
        assert_eq!(fs::metadata(mount.path("missing")).map_err(|e| e.kind()).err(), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn open_read_flush_and_release_are_forwarded_and_a_second_read_comes_from_the_kept_pages() {
        let mount = Mounted::new(&[("a.jpg", b"12345")]);
        let gets = mount.gets();
        assert_eq!(contents(&mount.path("a.jpg")), b"12345");
        assert_eq!(contents(&mount.path("a.jpg")), b"12345");
        assert_eq!(gets.count(), 1, "the second open kept the first one's pages");
    }

    #[test]
    fn opendir_readdir_and_releasedir_are_forwarded() {
        let mount = Mounted::new(&[("a.jpg", b"1"), ("d/b.jpg", b"2")]);
        let mut names: Vec<String> = fs::read_dir(mount.dir.path())
            .expect("opendir")
            .map(|entry| entry.expect("readdir").file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a.jpg", "d"]);
    }

    #[test]
    fn mknod_write_fsync_and_the_upload_at_release_are_forwarded() {
        let mount = Mounted::new(&[]);
        let mut file = OpenOptions::new().write(true).create_new(true).open(mount.path("new.bin")).expect("create");
        file.write_all(b"written").expect("write");
        file.sync_all().expect("fsync");
        drop(file);
        assert!(mount.client.contains_key("new.bin"));
        assert_eq!(contents(&mount.path("new.bin")), b"written");
    }

    #[test]
    fn mkdir_rmdir_and_unlink_are_forwarded() {
        let mount = Mounted::new(&[("gone.jpg", b"1")]);
        fs::create_dir(mount.path("fresh")).expect("mkdir");
        fs::remove_dir(mount.path("fresh")).expect("rmdir");
        fs::remove_file(mount.path("gone.jpg")).expect("unlink");
        assert!(!mount.client.contains_key("gone.jpg"));
    }

    #[test]
    fn setattr_statfs_and_rename_are_forwarded_with_the_crates_answers() {
        let mount = Mounted::new(&[("a.jpg", b"1")]);
        let stats = nix_statfs(mount.dir.path());
        assert!(stats > 0, "statfs answered with a block size");
        // The crates refuse to change a remote object's times, and S3 has no rename here.
        let file = OpenOptions::new().read(true).open(mount.path("a.jpg")).expect("open");
        assert!(file.set_modified(std::time::SystemTime::now()).is_err());
        assert!(fs::rename(mount.path("a.jpg"), mount.path("b.jpg")).is_err());
        assert!(mount.client.contains_key("a.jpg"));
    }

    fn nix_statfs(path: &Path) -> u64 {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid NUL-terminated path and a zeroed struct the call fills.
        assert_eq!(unsafe { libc::statvfs(c_path.as_ptr(), &mut out) }, 0, "statfs");
        out.f_bsize
    }

    #[test]
    fn a_file_opened_with_o_direct_is_read_past_the_pages_every_time() {
        let mount = Mounted::new(&[("a.jpg", b"12345")]);
        let gets = mount.gets();
        for _ in 0..2 {
            let mut file =
                OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(mount.path("a.jpg")).unwrap();
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes).expect("read");
            assert_eq!(bytes, b"12345");
        }
        assert_eq!(gets.count(), 2);
    }
}
