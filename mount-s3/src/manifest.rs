//! A mount of exactly the objects a manifest lists: mountpoint-s3-fs's `manifest` feature (experimental in
//! 0.11.0, so the crate is pinned), fed from a plain `key<TAB>etag<TAB>size` file that mountctl writes from its
//! dataset index. The file system then answers every lookup from a local SQLite store (no LIST, no HEAD), and
//! every read carries the listed ETag, so an object replaced since the index was made can never be read.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context as _, anyhow};
use mountpoint_s3_client::checksums::crc32c;
use mountpoint_s3_fs::manifest::{
    ChannelManifest, InputManifestEntry, InputManifestError, Manifest, ManifestMetablock, create_db,
};
use mountpoint_s3_fs::s3::S3Path;

/// The manifest's store lives in a private temporary directory removed with the process.
pub struct ManifestMount {
    pub metablock: ManifestMetablock,
    pub directory_name: String,
    pub store: tempfile::TempDir,
}

/// The one directory under the mount root that holds the objects: the last part of the prefix, or the bucket.
/// (The crate puts each manifest "channel" in a directory of its own; we mount one.)
pub fn directory_name(s3_path: &S3Path) -> String {
    let prefix = s3_path.prefix.as_str().trim_end_matches('/');
    match prefix.rsplit('/').next() {
        Some(last) if !last.is_empty() => last.to_string(),
        _ => s3_path.bucket.as_str().to_string(),
    }
}

pub fn metablock(path: &Path, s3_path: &S3Path, directory: Option<&str>) -> anyhow::Result<ManifestMount> {
    let file = File::open(path).with_context(|| format!("cannot open manifest {}", path.display()))?;
    let entries =
        BufReader::new(file).lines().enumerate().filter(|(_, line)| !matches!(line, Ok(l) if l.is_empty())).map(
            |(n, line)| parse_line(n + 1, line.map_err(|e| InputManifestError::CsvOpenError(path.to_path_buf(), e))?),
        );
    let store = tempfile::Builder::new()
        .prefix("mount-s3-manifest-")
        .tempdir()
        .context("cannot create a directory for the manifest's store")?;
    let db_path = store.path().join("manifest.db");
    let directory_name = directory.map(str::to_string).unwrap_or_else(|| directory_name(s3_path));
    let channel = ChannelManifest { directory_name: directory_name.clone(), s3_path: s3_path.clone(), entries };
    create_db(&db_path, vec![channel], 10_000)
        .map_err(|e| anyhow!("{}", error_chain(&e)))
        .with_context(|| format!("manifest {} is not usable", path.display()))?;
    let manifest = Manifest::new(&db_path).context("cannot open the manifest's store")?;
    let metablock = ManifestMetablock::new(manifest).context("cannot read the manifest's store")?;
    Ok(ManifestMount { metablock, directory_name, store })
}

fn parse_line(number: usize, line: String) -> Result<InputManifestEntry, InputManifestError> {
    let fields: Vec<&str> = line.split('\t').collect();
    let [key, etag, size] = fields[..] else {
        return Err(InputManifestError::InvalidChannel(format!(
            "line {number}: expected key<TAB>etag<TAB>size, got {} field(s)",
            fields.len()
        )));
    };
    let size: u64 = size
        .parse()
        .map_err(|_| InputManifestError::InvalidChannel(format!("line {number}: size {size:?} is not a number")))?;
    // The crate checks each entry against a CRC32C of its fields (key, ETag, size as 8 big-endian bytes):
    // computed here, since the entry comes from mountctl's index rather than a manifest file of AWS's format.
    let mut hasher = crc32c::Hasher::new();
    hasher.update(key.as_bytes());
    hasher.update(etag.as_bytes());
    hasher.update(&size.to_be_bytes());
    InputManifestEntry::new(key, etag, size as usize, hasher.finalize())
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}
