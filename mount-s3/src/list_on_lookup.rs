//! A directory listed at the first file looked up in it, once that lookup is answered.
//!
//! A reader that opens files by name (a list of paths, a loader driven by its index, `shard-{000..047}.tar`)
//! never lists their directory. Each of its opens then costs a lookup, which the crates answer with two requests
//! sent together (a HEAD of the name and a LIST of `name/`, for a directory of that name), one round trip before
//! the file's first GET. After `ls` the same opens cost nothing: the crates' readdir keeps every entry it lists,
//! with the mount's metadata TTL, and a lookup answers from it.
//!
//! So once the adapter has answered the lookup of a file in a directory nobody listed, the FUSE thread that
//! answered it lists that directory through the crates' own `opendir`/`readdir`/`releasedir`, as `ls` would,
//! at most [`MOST_ENTRIES`] entries. The later lookups there are answered from memory, by exactly the rules a
//! lookup after `ls` has today: an entry is trusted for the metadata TTL counted from the listing, and a name the
//! listing did not hold is looked up in S3 as before. When the TTL has passed, the next file looked up there has
//! the directory listed again. The listing's LIST goes through the read-ahead's client wrapper
//! (ahead/listing.rs), which so learns the directory's order: the read-ahead across files then serves a reader
//! by name as it serves one that listed.
//!
//! Nothing is listed on a list mount (its lookups never reach S3), nor when neither the metadata cache nor the
//! read-ahead across files is on (`--metadata-ttl 0 --no-read-ahead-files`), nor with `--no-list-on-lookup`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_fs::S3Filesystem;
use mountpoint_s3_fs::fs::{DirectoryEntry, DirectoryReplier, Error, InodeNo};

/// Entries listed at most for one directory (ten of S3's pages).
pub const MOST_ENTRIES: usize = 10_000;
/// Directories listed at once at most: each holds a FUSE thread for its few round trips.
const AT_ONCE: usize = 4;
/// Directories remembered as listed; past this many no more are listed.
const MOST_DIRECTORIES: usize = 10_000;
/// Entries taken from one readdir call (the crates fetch them from S3 a page of 1,000 at a time).
const PER_CALL: usize = 1_000;

/// Which directories were listed and when; `relist_after` is how long a listing answers lookups (the TTL).
pub struct ListOnLookup {
    relist_after: Duration,
    state: Mutex<Listings>,
}

#[derive(Default)]
struct Listings {
    listed_at: HashMap<InodeNo, Instant>,
    running: usize,
}

impl ListOnLookup {
    /// `relist_after`: the metadata TTL, or `Duration::MAX` where the listing is only for the read-ahead's order.
    pub fn new(relist_after: Duration) -> Self {
        Self { relist_after, state: Mutex::default() }
    }

    fn listings(&self) -> std::sync::MutexGuard<'_, Listings> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether to list `directory` now: not when it was listed within `relist_after` (by us or by a reader), nor
    /// while `AT_ONCE` listings run, nor past `MOST_DIRECTORIES`. A true must be followed by [`Self::ended`].
    fn claim(&self, directory: InodeNo, now: Instant) -> bool {
        let mut listings = self.listings();
        let fresh = listings.listed_at.get(&directory).is_some_and(|at| now.duration_since(*at) < self.relist_after);
        let full = listings.listed_at.len() >= MOST_DIRECTORIES && !listings.listed_at.contains_key(&directory);
        if fresh || full || listings.running >= AT_ONCE {
            return false;
        }
        listings.listed_at.insert(directory, now);
        listings.running += 1;
        true
    }

    /// A claimed listing ended; when it failed, a later lookup may list the directory again.
    fn ended(&self, directory: InodeNo, ok: bool) {
        let mut listings = self.listings();
        listings.running = listings.running.saturating_sub(1);
        if !ok {
            listings.listed_at.remove(&directory);
        }
    }

    /// A reader opened `directory` to list it: the crates keep what its readdir returns, so it needs no listing.
    pub fn listed_by_reader(&self, directory: InodeNo) {
        let mut listings = self.listings();
        if listings.listed_at.len() < MOST_DIRECTORIES || listings.listed_at.contains_key(&directory) {
            listings.listed_at.insert(directory, Instant::now());
        }
    }

    /// After a lookup in `directory` found a file: lists the directory unless it needs none. Returns the entries
    /// listed (`.` and `..` included), 0 when nothing was listed.
    pub async fn after_file_lookup<C>(&self, fs: &S3Filesystem<C>, directory: InodeNo) -> usize
    where
        C: ObjectClient + Clone + Send + Sync + 'static,
    {
        if !self.claim(directory, Instant::now()) {
            return 0;
        }
        let listed = list(fs, directory).await;
        if let Err(error) = &listed {
            tracing::debug!(directory, "listing a directory after a lookup in it failed: {error:#}");
        }
        self.ended(directory, listed.is_ok());
        listed.unwrap_or(0)
    }
}

/// Lists `directory` through the crates' readdir, up to `MOST_ENTRIES` entries; the crates keep each entry.
async fn list<C>(fs: &S3Filesystem<C>, directory: InodeNo) -> Result<usize, Error>
where
    C: ObjectClient + Clone + Send + Sync + 'static,
{
    let opened = fs.opendir(directory, libc::O_RDONLY).await?;
    let mut taken = Taken::default();
    let mut listed = Ok(());
    while taken.total < MOST_ENTRIES {
        let before = taken.total;
        taken.room = PER_CALL;
        listed = fs.readdir(directory, opened.fh, taken.last_offset, &mut taken).await;
        if listed.is_err() || taken.total == before {
            break;
        }
    }
    fs.releasedir(directory, opened.fh, 0).await?;
    listed.map(|()| taken.total)
}

/// Counts the entries of each readdir call, and says the reply is full after `room` of them.
#[derive(Default)]
struct Taken {
    room: usize,
    total: usize,
    last_offset: i64,
}

impl DirectoryReplier for &mut Taken {
    fn add(&mut self, entry: DirectoryEntry) -> bool {
        if self.room == 0 {
            return true;
        }
        self.room -= 1;
        self.total += 1;
        self.last_offset = entry.offset;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_claimed_once_while_its_listing_is_fresh_and_again_after() {
        let listings = ListOnLookup::new(Duration::from_secs(60));
        let now = Instant::now();
        assert!(listings.claim(7, now));
        listings.ended(7, true);
        assert!(!listings.claim(7, now + Duration::from_secs(59)), "listed within the TTL");
        assert!(listings.claim(7, now + Duration::from_secs(61)), "the TTL has passed");
    }

    #[test]
    fn a_failed_listing_lets_the_next_lookup_list_again() {
        let listings = ListOnLookup::new(Duration::from_secs(60));
        let now = Instant::now();
        assert!(listings.claim(7, now));
        listings.ended(7, false);
        assert!(listings.claim(7, now));
    }

    #[test]
    fn no_more_than_four_directories_are_listed_at_once() {
        let listings = ListOnLookup::new(Duration::from_secs(60));
        let now = Instant::now();
        for directory in 0..AT_ONCE as InodeNo {
            assert!(listings.claim(directory, now));
        }
        assert!(!listings.claim(100, now), "a fifth waits for a later lookup");
        listings.ended(0, true);
        assert!(listings.claim(100, now));
    }

    #[test]
    fn a_directory_a_reader_listed_is_not_listed_again_within_the_ttl() {
        let listings = ListOnLookup::new(Duration::from_secs(60));
        listings.listed_by_reader(7);
        assert!(!listings.claim(7, Instant::now()));
    }

    #[test]
    fn past_the_most_directories_no_new_one_is_listed() {
        let listings = ListOnLookup::new(Duration::MAX);
        let now = Instant::now();
        for directory in 0..MOST_DIRECTORIES as InodeNo {
            assert!(listings.claim(directory, now));
            listings.ended(directory, true);
        }
        assert!(!listings.claim(MOST_DIRECTORIES as InodeNo, now));
    }
}

/// The listing through the adapter, on the crates' real `S3Filesystem` and `Superblock` over the mock client (no
/// S3 server can answer inside `cargo test`), and once through a real FUSE mount of it.
#[cfg(test)]
mod adapter_tests {
    use std::ffi::OsStr;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use futures::executor::block_on;
    use mountpoint_s3_client::mock_client::{MockClient, MockObject, Operation};
    use mountpoint_s3_client::types::ETag;
    use mountpoint_s3_fs::fs::{Entry, InodeNo};

    use crate::ahead::ReadAhead;
    use crate::keep_cache::tests::{Lookups, Mounted, Recorder, adapter, client_with, superblock_with};
    use crate::keep_cache::{KeepCache, KeepCacheFs};

    const ROOT: InodeNo = 1;

    fn names(count: usize) -> Vec<String> {
        (0..count).map(|index| format!("d/{index:05}.jpg")).collect()
    }

    fn client_of(keys: &[String]) -> MockClient {
        let objects: Vec<(&str, &[u8])> = keys.iter().map(|key| (key.as_str(), b"jpeg" as &[u8])).collect();
        client_with(&objects)
    }

    fn listing_mount(client: &MockClient, ttl: Duration, ahead: Option<Arc<ReadAhead>>) -> KeepCacheFs<MockClient> {
        let lookups = Lookups { ttl, list: true };
        let superblock = superblock_with(client, lookups);
        adapter(client, superblock, KeepCache::WhileUnchanged, true, Recorder::default(), ahead, lookups)
    }

    /// A lookup as the FUSE handler makes it: answered, then `after_lookup`; the entry and the entries listed.
    fn look_up(fs: &KeepCacheFs<MockClient>, parent: InodeNo, name: &str) -> (Entry, usize) {
        let entry = block_on(fs.lookup(parent, OsStr::new(name))).expect("lookup");
        let listed = block_on(fs.after_lookup(parent, &entry));
        (entry, listed)
    }

    /// HEAD and LIST requests sent while `f` runs.
    fn requests_during(client: &MockClient, f: impl FnOnce()) -> u64 {
        let (heads, lists) = (client.new_counter(Operation::HeadObject), client.new_counter(Operation::ListObjectsV2));
        f();
        heads.count() + lists.count()
    }

    #[test]
    fn the_first_file_looked_up_by_name_has_its_directory_listed_and_the_next_lookups_send_no_request() {
        let keys = names(6);
        let client = client_of(&keys);
        let fs = listing_mount(&client, Duration::from_secs(60), None);
        let (directory, listed) = look_up(&fs, ROOT, "d");
        assert_eq!(listed, 0, "a lookup of a directory lists nothing");
        let (_, listed) = look_up(&fs, directory.attr.ino, "00000.jpg");
        assert_eq!(listed, 6 + 2, "the six files, . and ..");
        let sent = requests_during(&client, || {
            for index in 1..6 {
                let (entry, listed) = look_up(&fs, directory.attr.ino, &format!("{index:05}.jpg"));
                assert_eq!((entry.attr.size, listed), (4, 0));
            }
        });
        assert_eq!(sent, 0, "the five lookups were answered from the listing");
    }

    #[test]
    fn a_name_the_listing_did_not_hold_is_still_looked_up_in_s3() {
        let keys = names(3);
        let client = client_of(&keys);
        let fs = listing_mount(&client, Duration::from_secs(60), None);
        let directory = look_up(&fs, ROOT, "d").0.attr.ino;
        look_up(&fs, directory, "00000.jpg");
        client.add_object("d/new.jpg", MockObject::from_bytes(b"newer", ETag::for_tests()));
        let sent = requests_during(&client, || {
            assert_eq!(look_up(&fs, directory, "new.jpg").0.attr.size, 5);
        });
        assert!(sent > 0, "a new object is found in S3, not denied by the listing");
    }

    #[test]
    fn once_the_ttl_has_passed_a_replaced_object_is_seen_and_the_directory_is_listed_again() {
        let keys = names(3);
        let client = client_of(&keys);
        let ttl = Duration::from_millis(300);
        let fs = listing_mount(&client, ttl, None);
        let directory = look_up(&fs, ROOT, "d").0.attr.ino;
        assert_eq!(look_up(&fs, directory, "00000.jpg").1, 3 + 2);
        assert_eq!(look_up(&fs, directory, "00001.jpg").1, 0, "listed once within the TTL");
        client.add_object("d/00002.jpg", MockObject::from_bytes(b"replaced", ETag::for_tests()));
        std::thread::sleep(ttl + Duration::from_millis(100));
        let (entry, listed) = look_up(&fs, directory, "00002.jpg");
        assert_eq!(entry.attr.size, 8, "the replaced object's size, not the listing's");
        assert_eq!(listed, 3 + 2, "listed again after the TTL");
    }

    #[test]
    fn a_directory_a_reader_listed_itself_is_not_listed_again() {
        let keys = names(3);
        let client = client_of(&keys);
        let fs = listing_mount(&client, Duration::from_secs(60), None);
        let directory = look_up(&fs, ROOT, "d").0.attr.ino;
        let opened = block_on(fs.opendir(directory, libc::O_RDONLY)).expect("the reader's opendir");
        block_on(fs.crates().releasedir(directory, opened.fh, 0)).expect("releasedir");
        assert_eq!(look_up(&fs, directory, "00000.jpg").1, 0);
    }

    #[test]
    fn a_directory_of_several_pages_is_listed_whole() {
        let keys = names(2_500);
        let client = client_of(&keys);
        let fs = listing_mount(&client, Duration::from_secs(60), None);
        let directory = look_up(&fs, ROOT, "d").0.attr.ino;
        assert_eq!(look_up(&fs, directory, "00000.jpg").1, 2_500 + 2);
        let sent = requests_during(&client, || {
            look_up(&fs, directory, "02499.jpg");
        });
        assert_eq!(sent, 0, "the last page's files were listed too");
    }

    #[test]
    fn through_the_kernel_a_stat_by_name_is_answered_first_and_the_next_ones_come_from_the_listing() {
        let keys = names(6);
        let client = client_of(&keys);
        let fs = listing_mount(&client, Duration::from_secs(60), None);
        let mount = Mounted::of(fs, client);
        let lists = mount.client.new_counter(Operation::ListObjectsV2);
        assert_eq!(std::fs::metadata(mount.path("d/00000.jpg")).expect("stat").len(), 4);
        // The listing runs on the FUSE thread after its reply: wait for its LIST (lookups of d and of the file
        // sent one each).
        let deadline = Instant::now() + Duration::from_secs(10);
        while lists.count() < 3 {
            assert!(Instant::now() < deadline, "the directory was not listed");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        let heads = mount.client.new_counter(Operation::HeadObject);
        for index in 1..6 {
            assert_eq!(std::fs::metadata(mount.path(&format!("d/{index:05}.jpg"))).expect("stat").len(), 4);
        }
        assert_eq!(heads.count(), 0);
    }
}
