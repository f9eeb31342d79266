//! A mount of exactly the objects a list names: mountpoint-s3-fs's `manifest` feature (experimental, so the
//! crate is pinned), fed from the plain `key<TAB>etag<TAB>size` file that mountctl writes from its dataset
//! index. The file system then answers every lookup from a local SQLite store (no LIST, no HEAD), and every
//! read carries the listed ETag, so an object replaced since the index was made can never be read.
//!
//! The whole list is checked before anything is mounted, against every rule the crate's store applies (and
//! otherwise reports late, without a line number, or as a database constraint): a list it would refuse is
//! refused here in one line naming the line, the key and what to do.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context as _, anyhow};
use mountpoint_s3_client::checksums::crc32c;
use mountpoint_s3_fs::manifest::{ChannelManifest, InputManifestEntry, Manifest, ManifestMetablock, create_db};
use mountpoint_s3_fs::s3::S3Path;

use crate::cli::Refusal;

/// The store's sizes are SQLite integers: signed 64-bit.
const LARGEST_SIZE: u64 = i64::MAX as u64;
/// Rows written to the store per transaction.
const BATCH: usize = 10_000;

/// One line of the list, checked on its own (see [`check_line`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub line: usize,
    pub key: String,
    pub etag: String,
    pub size: u64,
}

/// What is wrong with one line, and what to do about it.
#[derive(Debug, PartialEq, Eq)]
struct Problem {
    what: String,
    remedy: &'static str,
}

const FIX_THE_LINE: &str = "each line must be key<TAB>etag<TAB>size (mountctl.write_object_list writes one)";
const NOT_A_PATH: &str = "the mount shows keys as paths and cannot show this one: leave it out, or mount its \
                          prefix without --manifest";
const LIST_ONCE: &str = "list each object once";

fn problem(what: String, remedy: &'static str) -> Problem {
    Problem { what, remedy }
}

/// The mount of a checked list: its store lives in a private temporary directory removed with the process.
pub struct ManifestMount {
    pub metablock: ManifestMetablock,
    pub directory_name: String,
    pub store: tempfile::TempDir,
}

/// Reads and checks the whole list (nothing is written): every line on its own, then the lines together.
pub fn read_object_list(path: &Path) -> anyhow::Result<Vec<ListedObject>> {
    let file = File::open(path).map_err(|e| {
        Refusal(format!(
            "cannot open object list {}: {e}; give the path of a key<TAB>etag<TAB>size file",
            path.display()
        ))
    })?;
    let refuse = |line: usize, problem: Problem| {
        Refusal(format!("object list {}, line {line}: {}; {}", path.display(), problem.what, problem.remedy))
    };
    let mut objects = Vec::new();
    for (index, bytes) in BufReader::new(file).split(b'\n').enumerate() {
        let number = index + 1;
        let bytes = bytes.with_context(|| format!("cannot read object list {}", path.display()))?;
        if bytes.is_empty() {
            continue;
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| refuse(number, problem("the line is not UTF-8".into(), "write the list as UTF-8 text")))?;
        objects.push(check_line(number, &text).map_err(|p| refuse(number, p))?);
    }
    if objects.is_empty() {
        return Err(Refusal(format!(
            "object list {} names no object; an object list needs at least one key<TAB>etag<TAB>size line",
            path.display()
        ))
        .into());
    }
    check_together(&objects).map_err(|(line, p)| refuse(line, p))?;
    Ok(objects)
}

/// One line on its own: three fields; a size in bytes; an ETag; a key the mount can show as a path.
fn check_line(number: usize, text: &str) -> Result<ListedObject, Problem> {
    if text.contains('\r') {
        return Err(problem(
            "the line holds a carriage return".into(),
            "end lines with \\n alone (no \\r\\n), and leave out keys holding \\r",
        ));
    }
    let fields: Vec<&str> = text.split('\t').collect();
    let [key, etag, size] = fields[..] else {
        return Err(problem(format!("expected key<TAB>etag<TAB>size, found {} field(s)", fields.len()), FIX_THE_LINE));
    };
    if size.is_empty() || !size.bytes().all(|b| b.is_ascii_digit()) {
        return Err(problem(format!("size {size:?} of key {key:?} is not a whole number of bytes"), FIX_THE_LINE));
    }
    let size = match size.parse::<u64>() {
        Ok(size) if size <= LARGEST_SIZE => size,
        _ => {
            return Err(problem(
                format!("size {size} of key {key:?} is more than {LARGEST_SIZE} bytes"),
                "give the object's size in bytes, as S3 lists it",
            ));
        }
    };
    check_key(key)?;
    if etag.is_empty() {
        return Err(problem(
            format!("key {key:?} has no ETag"),
            "index the dataset again so that each object's ETag is recorded",
        ));
    }
    Ok(ListedObject { line: number, key: key.to_string(), etag: etag.to_string(), size })
}

/// A key the mount can show as a file: not empty, not a folder marker, and every part between '/' a name a
/// directory can hold (not empty, not '.' or '..', no NUL).
fn check_key(key: &str) -> Result<(), Problem> {
    if key.is_empty() {
        return Err(problem("the key is empty".into(), FIX_THE_LINE));
    }
    if key.ends_with('/') {
        return Err(problem(
            format!("key {key:?} ends in '/': it is a folder marker, not an object"),
            "leave folder markers out of the list (folders appear from the keys under them)",
        ));
    }
    if key.starts_with('/') {
        return Err(problem(format!("key {key:?} starts with '/'"), NOT_A_PATH));
    }
    if key.contains('\0') {
        return Err(problem(format!("key {key:?} holds a NUL character"), NOT_A_PATH));
    }
    for part in key.split('/') {
        let what = match part {
            "" => "an empty part ('//')",
            "." => "a '.' part",
            ".." => "a '..' part",
            _ => continue,
        };
        return Err(problem(format!("key {key:?} has {what}"), NOT_A_PATH));
    }
    Ok(())
}

/// Both a file and a folder, or the same file twice, cannot be served: the store holds one entry per path.
#[derive(Clone, Copy)]
enum Seen {
    /// The index in the list of the object at this path.
    File(usize),
    /// The index of the first object found under this path.
    Folder(usize),
}

/// The lines together: no key twice, and no key that is also the folder of another (`a` and `a/b`).
/// Returns the line number of the later line of a pair, and what is wrong.
fn check_together(objects: &[ListedObject]) -> Result<(), (usize, Problem)> {
    let mut seen: HashMap<&str, Seen> = HashMap::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        let key = object.key.as_str();
        match seen.entry(key) {
            Entry::Vacant(slot) => {
                slot.insert(Seen::File(index));
            }
            Entry::Occupied(slot) => {
                let (what, remedy) = match *slot.get() {
                    Seen::File(first) => {
                        (format!("key {key:?} is listed again (first on line {})", objects[first].line), LIST_ONCE)
                    }
                    Seen::Folder(first) => (folder_and_file(key, &objects[first]), FOLDER_OR_FILE),
                };
                return Err((object.line, problem(what, remedy)));
            }
        }
        // Each folder above the key, deepest first: once one is known, so are all above it.
        let mut folder = key;
        while let Some(cut) = folder.rfind('/') {
            folder = &key[..cut];
            match seen.get(folder) {
                None => {
                    seen.insert(folder, Seen::Folder(index));
                }
                Some(Seen::Folder(_)) => break,
                Some(Seen::File(file)) => {
                    let file = &objects[*file];
                    let what = format!("key {key:?} is under {folder:?}, which line {} lists as an object", file.line);
                    return Err((object.line, problem(what, FOLDER_OR_FILE)));
                }
            }
        }
    }
    Ok(())
}

const FOLDER_OR_FILE: &str = "a path is either a file or a folder in a mount: leave one of the two lines out";

fn folder_and_file(key: &str, under: &ListedObject) -> String {
    format!("key {key:?} is also a folder: line {} lists {:?} under it", under.line, under.key)
}

/// The one directory under the mount root that holds the objects: the last part of the prefix, or the bucket.
/// (The crate puts each manifest "channel" in a directory of its own; we mount one.)
pub fn directory_name(s3_path: &S3Path, chosen: Option<&str>) -> Result<String, Refusal> {
    let name = match chosen {
        Some(name) => name.to_string(),
        None => {
            let prefix = s3_path.prefix.as_str().trim_end_matches('/');
            match prefix.rsplit('/').next() {
                Some(last) if !last.is_empty() => last.to_string(),
                _ => s3_path.bucket.as_str().to_string(),
            }
        }
    };
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(Refusal(format!(
            "--manifest-directory {name:?} is not a folder name (one name: no '/', not '.' or '..'); give one with \
             --manifest-directory NAME"
        )));
    }
    Ok(name)
}

/// Writes the checked list into the crate's store, in a private temporary directory.
pub fn metablock(
    objects: Vec<ListedObject>,
    s3_path: &S3Path,
    directory_name: String,
) -> anyhow::Result<ManifestMount> {
    let store = tempfile::Builder::new()
        .prefix("mount-s3-manifest-")
        .tempdir()
        .context("cannot create a directory for the object list's store")?;
    let db_path = store.path().join("manifest.db");
    let entries = objects.into_iter().map(|object| {
        let line = object.line;
        entry(object).map_err(|e| {
            // Every rule the crate applies is checked above; this would be a rule of a newer crate.
            tracing::error!("line {line} of the object list: {e}");
            e
        })
    });
    let channel = ChannelManifest { directory_name: directory_name.clone(), s3_path: s3_path.clone(), entries };
    create_db(&db_path, vec![channel], BATCH)
        .map_err(|e| anyhow!("{}", error_chain(&e)))
        .context("cannot build the object list's store")?;
    let manifest = Manifest::new(&db_path).context("cannot open the object list's store")?;
    let metablock = ManifestMetablock::new(manifest).context("cannot read the object list's store")?;
    Ok(ManifestMount { metablock, directory_name, store })
}

/// The crate checks each entry against a CRC32C of its fields (key, ETag, size as 8 big-endian bytes): computed
/// here, since the entry comes from mountctl's list rather than a manifest file of AWS's format.
fn entry(object: ListedObject) -> Result<InputManifestEntry, mountpoint_s3_fs::manifest::InputManifestError> {
    let mut hasher = crc32c::Hasher::new();
    hasher.update(object.key.as_bytes());
    hasher.update(object.etag.as_bytes());
    hasher.update(&object.size.to_be_bytes());
    InputManifestEntry::new(object.key, object.etag, object.size as usize, hasher.finalize())
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

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use mountpoint_s3_fs::s3::{Bucket, Prefix};

    use super::*;

    const ETAG: &str = "\"3bebe4037c8f040e0e573e191d34b2c6\"";

    fn list(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn lines(keys: &[&str]) -> String {
        keys.iter().map(|key| format!("{key}\t{ETAG}\t10\n")).collect()
    }

    /// The one line a list is refused with.
    fn refusal(text: &str) -> String {
        let file = list(text);
        let error = read_object_list(file.path()).expect_err("the list must be refused");
        let refusal = error.downcast_ref::<Refusal>().expect("a refusal (exit 2), not a failure");
        assert!(!refusal.0.contains('\n'), "{}", refusal.0);
        refusal.0.replace(&file.path().display().to_string(), "LIST")
    }

    fn s3_path(prefix: &str) -> S3Path {
        S3Path::new(Bucket::new("bucket").unwrap(), Prefix::new(prefix).unwrap())
    }

    #[test]
    fn a_list_as_mountctl_writes_it_is_read_whole() {
        let file = list(&format!("a/0.tar\t{ETAG}\t1024\n\nb c/1.tar\t\"x\"\t0\nz\te\t{LARGEST_SIZE}"));
        let objects = read_object_list(file.path()).unwrap();
        let keys: Vec<_> = objects.iter().map(|o| (o.line, o.key.as_str(), o.size)).collect();
        assert_eq!(keys, [(1, "a/0.tar", 1024), (3, "b c/1.tar", 0), (4, "z", LARGEST_SIZE)]);
        assert_eq!(objects[0].etag, ETAG);
    }

    #[test]
    fn a_key_listed_twice_is_refused_naming_both_lines() {
        let line = refusal(&lines(&["shard-0.tar", "shard-1.tar", "shard-0.tar"]));
        assert_eq!(
            line,
            "object list LIST, line 3: key \"shard-0.tar\" is listed again (first on line 1); list each object once"
        );
    }

    #[test]
    fn a_key_that_is_also_a_folder_is_refused_in_either_order() {
        let line = refusal(&lines(&["a", "a/b"]));
        assert!(
            line.starts_with("object list LIST, line 2: key \"a/b\" is under \"a\", which line 1 lists as an object;")
        );
        let line = refusal(&lines(&["x/a/b", "x/a"]));
        assert!(line.starts_with("object list LIST, line 2: key \"x/a\" is also a folder: line 1 lists \"x/a/b\""));
        assert!(line.ends_with("leave one of the two lines out"), "{line}");
        let line = refusal(&lines(&["d/e/f", "d/e/g", "d"]));
        assert!(line.starts_with("object list LIST, line 3: key \"d\" is also a folder"), "{line}");
    }

    #[test]
    fn keys_the_mount_cannot_show_as_paths_are_refused_with_their_line() {
        for (key, says) in [
            ("a//b", "has an empty part ('//')"),
            ("./x", "has a '.' part"),
            ("../x", "has a '..' part"),
            ("a/./b", "has a '.' part"),
            ("a/..", "has a '..' part"),
            ("/a", "starts with '/'"),
            ("a\0b", "holds a NUL character"),
            ("a/", "ends in '/': it is a folder marker"),
        ] {
            let line = refusal(&lines(&["fine", key]));
            assert!(line.starts_with(&format!("object list LIST, line 2: key {key:?} {says}")), "{key:?}: {line}");
        }
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number_and_not_as_a_channel() {
        for (text, says) in [
            ("only-a-key\n", "expected key<TAB>etag<TAB>size, found 1 field(s)"),
            ("k\te\t1\textra\n", "found 4 field(s)"),
            ("k\te\tten\n", "size \"ten\" of key \"k\" is not a whole number of bytes"),
            ("k\te\t-1\n", "is not a whole number"),
            ("k\te\t+1\n", "is not a whole number"),
            ("k\te\t\n", "size \"\" of key \"k\""),
            ("k\te\t9223372036854775808\n", "is more than 9223372036854775807 bytes"),
            ("k\te\t99999999999999999999\n", "is more than"),
            ("k\t\t1\n", "key \"k\" has no ETag"),
            ("\te\t1\n", "the key is empty"),
            ("k\te\t1\r\n", "carriage return"),
            ("   \n", "found 1 field(s)"),
        ] {
            let line = refusal(&format!("{}{text}", lines(&["first"])));
            assert!(line.starts_with("object list LIST, line 2: "), "{text:?}: {line}");
            assert!(line.contains(says), "{text:?}: {line}");
            assert!(!line.contains("channel"), "{line}");
        }
    }

    #[test]
    fn a_line_that_is_not_utf8_is_refused() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"ok\te\t1\n\xff\te\t1\n").unwrap();
        let error = read_object_list(file.path()).unwrap_err();
        assert!(error.to_string().contains("line 2: the line is not UTF-8"), "{error}");
    }

    #[test]
    fn an_empty_or_missing_list_is_refused() {
        assert!(refusal("").ends_with("names no object; an object list needs at least one key<TAB>etag<TAB>size line"));
        assert!(refusal("\n\n").contains("names no object"));
        let error = read_object_list(Path::new("/nonexistent/list.tsv")).unwrap_err();
        assert!(error.downcast_ref::<Refusal>().is_some() && error.to_string().contains("cannot open object list"));
    }

    #[test]
    fn the_objects_folder_is_the_prefixs_last_part_or_the_bucket_or_the_chosen_name() {
        assert_eq!(directory_name(&s3_path("data/train/"), None).unwrap(), "train");
        assert_eq!(directory_name(&s3_path(""), None).unwrap(), "bucket");
        assert_eq!(directory_name(&s3_path("data/"), Some("imgs")).unwrap(), "imgs");
        for bad in ["", ".", "..", "a/b"] {
            let refusal = directory_name(&s3_path(""), Some(bad)).unwrap_err();
            assert!(refusal.0.contains("is not a folder name"), "{bad:?}: {refusal}");
        }
    }

    #[test]
    fn every_list_the_checks_pass_is_taken_by_the_crates_store() {
        let text = lines(&["a/b/c", "a/b/d", "a/e", "f", "g h/ i", "..x/y.", "a/b/.hidden"]);
        let file = list(&text);
        let objects = read_object_list(file.path()).unwrap();
        let mount = metablock(objects, &s3_path("data/"), "data".into()).expect("the crate's store takes it");
        assert_eq!(mount.directory_name, "data");
    }

    /// The rules above are the crate's: a key it refuses, and a pair of keys its store cannot hold, fail there
    /// too (in the store, late); this says the two agree where they can be compared directly.
    #[test]
    fn what_the_checks_refuse_the_crate_refuses_too() {
        for key in ["a//b", "./x", "../x", "/a", "a\0b"] {
            let object = ListedObject { line: 1, key: key.into(), etag: ETAG.into(), size: 1 };
            assert!(entry(object).is_err(), "{key:?}");
        }
        for keys in [&["a", "a/b"][..], &["a/b", "a"][..], &["a", "a"][..]] {
            let objects: Vec<_> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| ListedObject { line: i + 1, key: (*k).into(), etag: ETAG.into(), size: 1 })
                .collect();
            assert!(check_together(&objects).is_err(), "{keys:?}");
            assert!(metablock(objects, &s3_path(""), "d".into()).is_err(), "{keys:?}");
        }
    }
}
