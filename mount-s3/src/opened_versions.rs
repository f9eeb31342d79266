//! `Witnessed`: the crates' own metablock (the bucket's `Superblock`, or a list mount's store), every call
//! forwarded unchanged, except that each file handle it opens leaves a note of the object version (ETag) and the
//! mode (read or write) that the open resolved to, and the object's key.
//!
//! Why: `S3Filesystem::open` answers with a handle number and reply flags only, and keeps the version the handle
//! reads inside the crate. The page-cache adapter (keep_cache.rs) needs that version to know whether the
//! kernel's pages of the inode were read from the same one, and the key to tell the data cache which object a
//! read from offset 0 is for (ahead/first_get.rs). The metablock is the one public seam that sees them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mountpoint_s3_client::types::ETag;
use mountpoint_s3_fs::fs::{InodeError, InodeKind, InodeNo, OpenFlags};
use mountpoint_s3_fs::memory::WriteHandleLimiter;
use mountpoint_s3_fs::metablock::{
    AddDirEntry, Lookup, Metablock, NewHandle, PendingUploadHook, ReadWriteMode, S3Location, WriteMode,
};
use time::OffsetDateTime;

/// What one open of a file resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedVersion {
    /// The object's ETag as the handle reads it; `None` for a file not yet uploaded.
    pub etag: Option<Box<str>>,
    /// The handle writes (a new upload), so there is no version to keep pages of.
    pub writes: bool,
    /// The object's full key (prefix included), as the prefetcher names it.
    pub key: Option<Box<str>>,
}

/// The notes, by file handle, shared between the metablock that writes them and the adapter that takes them.
#[derive(Debug, Clone, Default)]
pub struct OpenedVersions(Arc<Mutex<HashMap<u64, OpenedVersion>>>);

impl OpenedVersions {
    fn note(&self, fh: u64, version: OpenedVersion) {
        self.0.lock().expect("opened versions lock").insert(fh, version);
    }

    /// The note of handle `fh`, removed: each open reads its own note once. (An open that fails after its
    /// handle was made leaves one behind; that costs a few bytes, never a wrong answer, as handles are unique.)
    pub fn take(&self, fh: u64) -> Option<OpenedVersion> {
        self.0.lock().expect("opened versions lock").remove(&fh)
    }
}

/// A metablock that notes each opened handle's version in [`OpenedVersions`], and otherwise is `inner`.
pub struct Witnessed {
    inner: Box<dyn Metablock>,
    opened: OpenedVersions,
}

impl Witnessed {
    pub fn new(inner: impl Metablock + 'static, opened: OpenedVersions) -> Self {
        Self { inner: Box::new(inner), opened }
    }
}

#[async_trait]
impl Metablock for Witnessed {
    async fn open_handle(
        &self,
        ino: InodeNo,
        fh: u64,
        write_mode: &WriteMode,
        flags: OpenFlags,
        write_handle_limiter: Option<&WriteHandleLimiter>,
    ) -> Result<NewHandle, InodeError> {
        let handle = self.inner.open_handle(ino, fh, write_mode, flags, write_handle_limiter).await?;
        let writes = matches!(handle.mode, ReadWriteMode::Write);
        let key = handle.lookup.s3_location().ok().map(|location| location.full_key().as_ref().into());
        self.opened.note(fh, OpenedVersion { etag: handle.lookup.stat().etag.clone(), writes, key });
        Ok(handle)
    }

    // Everything below is forwarded as it is.

    async fn lookup(&self, parent_ino: InodeNo, name: &OsStr) -> Result<Lookup, InodeError> {
        self.inner.lookup(parent_ino, name).await
    }

    async fn getattr(&self, ino: InodeNo, force_revalidate_if_remote: bool) -> Result<Lookup, InodeError> {
        self.inner.getattr(ino, force_revalidate_if_remote).await
    }

    async fn setattr(
        &self,
        ino: InodeNo,
        atime: Option<OffsetDateTime>,
        mtime: Option<OffsetDateTime>,
    ) -> Result<Lookup, InodeError> {
        self.inner.setattr(ino, atime, mtime).await
    }

    async fn create(&self, dir: InodeNo, name: &OsStr, kind: InodeKind) -> Result<Lookup, InodeError> {
        self.inner.create(dir, name, kind).await
    }

    async fn forget(&self, ino: InodeNo, n: u64) {
        self.inner.forget(ino, n).await
    }

    async fn inc_file_size(&self, ino: InodeNo, len: usize) -> Result<usize, InodeError> {
        self.inner.inc_file_size(ino, len).await
    }

    async fn finish_writing(&self, ino: InodeNo, etag: Option<ETag>, fh: u64) -> Result<Lookup, InodeError> {
        self.inner.finish_writing(ino, etag, fh).await
    }

    async fn finish_reading(&self, ino: InodeNo, fh: u64) -> Result<(), InodeError> {
        self.inner.finish_reading(ino, fh).await
    }

    async fn flush_reader(&self, ino: InodeNo, fh: u64) -> Result<(), InodeError> {
        self.inner.flush_reader(ino, fh).await
    }

    async fn flush_writer(
        &self,
        ino: InodeNo,
        fh: u64,
        pending_upload_hook: PendingUploadHook,
    ) -> Result<Option<PendingUploadHook>, InodeError> {
        self.inner.flush_writer(ino, fh, pending_upload_hook).await
    }

    async fn release_writer(
        &self,
        ino: InodeNo,
        fh: u64,
        pending_upload_hook: PendingUploadHook,
        location: &S3Location,
    ) -> Result<(), InodeError> {
        self.inner.release_writer(ino, fh, pending_upload_hook, location).await
    }

    async fn try_reactivate_handle(&self, ino: InodeNo, fh: u64, mode: ReadWriteMode) -> Result<bool, InodeError> {
        self.inner.try_reactivate_handle(ino, fh, mode).await
    }

    async fn new_readdir_handle(&self, dir_ino: InodeNo) -> Result<u64, InodeError> {
        self.inner.new_readdir_handle(dir_ino).await
    }

    async fn readdir<'a>(
        &self,
        parent: InodeNo,
        fh: u64,
        offset: i64,
        is_readdirplus: bool,
        add: AddDirEntry<'a>,
    ) -> Result<(), InodeError> {
        self.inner.readdir(parent, fh, offset, is_readdirplus, add).await
    }

    async fn releasedir(&self, fh: u64) -> Result<(), InodeError> {
        self.inner.releasedir(fh).await
    }

    async fn rename(
        &self,
        src_parent_ino: InodeNo,
        src_name: &OsStr,
        dst_parent_ino: InodeNo,
        dst_name: &OsStr,
        allow_overwrite: bool,
    ) -> Result<(), InodeError> {
        self.inner.rename(src_parent_ino, src_name, dst_parent_ino, dst_name, allow_overwrite).await
    }

    async fn rmdir(&self, parent_ino: InodeNo, name: &OsStr) -> Result<(), InodeError> {
        self.inner.rmdir(parent_ino, name).await
    }

    async fn unlink(&self, parent_ino: InodeNo, name: &OsStr) -> Result<(), InodeError> {
        self.inner.unlink(parent_ino, name).await
    }
}
