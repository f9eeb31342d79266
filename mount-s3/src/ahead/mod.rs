//! Read ahead across files: when a reader starts the objects of a listing in its order, the next few are
//! fetched whole into memory before the reader opens them, so a plain reader (`cat` of every file, a loop
//! over a directory) stops paying a round trip per file. Mountpoint's own prefetcher is per file handle and
//! never looks past the file it reads.
//!
//! Two parts, both generic over the crates' `ObjectClient`:
//! - [`Listing`] wraps the client and remembers the order of the keys each LIST returned (on a list mount,
//!   the order comes from the object list instead);
//! - [`AheadCache`] is a `DataCache` in front of the disk cache (if any). Its first block of object i starts
//!   GETs of objects i+1..i+width; a later read of one of them is served from memory.
//!
//! Why a `DataCache` and not only a client wrapper: a client wrapper would have to answer `get_object` with
//! a response of its own, and mountpoint-s3-client 0.22.1 does not export `ObjectChecksumError`, which
//! `GetObjectResponse` names, so no crate outside it can implement that trait. The data cache is the crates'
//! own seam for serving bytes that did not come from a GET.
//!
//! The same cache also sizes the first GET of a file read from its start by what is known ([`first_get`]): an
//! object small enough is fetched whole by one GET instead of the prefetcher's 1.125 MiB and its ramp.
//!
//! Guarantees: each ahead GET carries If-Match with the listed ETag, and an entry is served only to a read
//! whose `ObjectId` has that same ETag and size (a replaced object is read from S3, never from memory); an
//! ahead GET that fails or takes too long drops its entry and the read goes to S3 as usual; memory held is
//! bounded (entries evicted oldest first, an entry unread for a while dropped); nothing persists, so a
//! remount starts empty. An entry is dropped once its last block is served: each object is read once.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use futures::task::SpawnExt as _;
use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_client::types::ETag;
use mountpoint_s3_fs::Runtime;
use mountpoint_s3_fs::data_cache::{BlockIndex, ChecksummedBytes, DataCache, DataCacheResult};
use mountpoint_s3_fs::object::ObjectId;
use mountpoint_s3_fs::prefetch::CursorId;

mod entry;
mod first_get;
mod kernel_held;
mod listing;
use entry::{Entry, Found, fetch_range};
pub use first_get::{FromStart, WholeFirstGet};
use kernel_held::KernelHeld;
pub use kernel_held::page_cache_guess;
pub use listing::Listing;

/// How far and how much to read ahead.
#[derive(Debug, Clone)]
pub struct AheadConfig {
    /// How many of the next objects are fetched after a read of one.
    pub width: usize,
    /// The most bytes held in memory at once, fetched or being fetched.
    pub budget: u64,
    /// Objects larger than this are not read ahead (their own prefetcher widens fast enough).
    pub largest: u64,
    /// An entry nobody read for this long is dropped.
    pub unread_for: Duration,
    /// An ahead GET not done after this long is abandoned: a reader waiting on it goes to S3.
    pub pending_for: Duration,
    /// Which objects read from offset 0 get their first GET whole (first_get.rs), from the same budget.
    pub whole_first: WholeFirstGet,
    /// The bytes of objects read through that the kernel is taken to hold in its page cache, which the read
    /// ahead leaves out (kernel_held.rs); 0 where the kernel keeps no pages across opens.
    pub kernel_keeps: u64,
}

impl AheadConfig {
    /// The defaults for a mount whose memory target is `memory_target` bytes: an eighth of it, so that the
    /// crates' own pool keeps most of it; objects up to the budget shared by `width`.
    /// A width of 0 reads nothing ahead across files (the whole first GET may still be on).
    pub fn sized_from(memory_target: u64, width: usize, budget: Option<u64>, whole_first: WholeFirstGet) -> Self {
        let budget = budget.unwrap_or(memory_target / 8);
        Self {
            width,
            budget,
            largest: budget / width.max(1) as u64,
            unread_for: Duration::from_secs(30),
            pending_for: Duration::from_secs(30),
            whole_first,
            kernel_keeps: 0,
        }
    }

    /// The same, on a mount whose kernel keeps up to `bytes` of pages across opens (keep_cache.rs).
    pub fn kernel_keeping(self, bytes: u64) -> Self {
        Self { kernel_keeps: bytes, ..self }
    }

    /// False when neither the read-ahead across files nor the whole first GET has anything to do.
    pub fn does_anything(&self) -> bool {
        self.budget > 0 && (self.width > 0 || self.whole_first.is_on())
    }
}

/// The keys remembered in listing order are forgotten beyond this many (a bucket listed whole).
const MOST_LISTED: usize = 1_000_000;
/// Reads from offset 0 remembered to tell a reader that follows the listing order from one that does not.
const RECENT_READS: usize = 64;

#[derive(Debug, Clone)]
struct Listed {
    etag: String,
    size: u64,
    previous: Option<String>,
    next: Option<String>,
}

#[derive(Default)]
struct State {
    listed: HashMap<String, Listed>,
    entries: HashMap<String, Entry>,
    held: u64,
    next_id: u64,
    recent: VecDeque<String>,
    /// Objects (key, ETag) whose first block went to the disk cache behind: not worth a GET ahead.
    behind_has: HashMap<String, String>,
    /// Keys with a read at offset 0 under way, and how many (first_get.rs): the whole first GET is for them,
    /// and the read ahead across files leaves them to their reader.
    from_start: HashMap<String, usize>,
    /// Objects read through to their end, whose pages the kernel most likely still holds (kernel_held.rs).
    kernel_held: KernelHeld,
}

impl State {
    /// Enters `key` as being fetched in pieces of `piece_size` (0: whole); the caller has made room for it.
    fn enter_pending(&mut self, key: String, etag: ETag, size: u64, piece_size: u64) -> Planned {
        let id = self.next_id;
        self.next_id += 1;
        let entry = Entry::pending(etag.clone(), size, id, piece_size);
        let ranges = entry.ranges();
        self.entries.insert(key.clone(), entry);
        self.held += size;
        Planned { key, etag, id, ranges }
    }

    fn drop_entry(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.held -= entry.size;
        }
    }

    /// Frees room for `size` more bytes by dropping fetched entries, oldest first, never `reading` (the object
    /// whose read asked for this); false if it cannot.
    fn make_room(&mut self, size: u64, budget: u64, reading: &str) -> bool {
        while self.held + size > budget {
            let oldest = self
                .entries
                .iter()
                .filter(|(key, entry)| entry.is_complete() && key.as_str() != reading)
                .min_by_key(|(_, entry)| entry.id)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => self.drop_entry(&key),
                None => return false,
            }
        }
        true
    }
}

/// What the wrapper client and the cache share: the listing order and the entries.
pub struct ReadAhead {
    config: AheadConfig,
    state: Mutex<State>,
}

impl ReadAhead {
    /// A read-ahead with nothing known yet, and a thread that drops stale entries until it is dropped.
    pub fn new(config: AheadConfig) -> Arc<Self> {
        let state = State { kernel_held: KernelHeld::new(config.kernel_keeps), ..State::default() };
        let ahead = Arc::new(Self { config, state: Mutex::new(state) });
        let weak = Arc::downgrade(&ahead);
        // A thread, not a task: the crates' runtime has no timer. It ends within a second of the mount.
        let spawned =
            std::thread::Builder::new().name("read-ahead-sweep".into()).spawn(move || sweep_until_gone(&weak));
        if let Err(error) = spawned {
            tracing::warn!("cannot start the read-ahead sweeper ({error}); unread entries wait for eviction");
        }
        ahead
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data; the entries stay consistent enough to drop.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remembers `objects` (key, ETag, size) as consecutive in this order.
    pub fn know_order<'a>(&self, objects: impl IntoIterator<Item = (String, &'a str, u64)>) {
        if self.config.width == 0 {
            return; // Nothing is read ahead across files: the order is not needed.
        }
        let mut state = self.state();
        let mut previous: Option<String> = None;
        for (key, etag, size) in objects {
            if state.listed.len() >= MOST_LISTED && !state.listed.contains_key(&key) {
                state.listed.clear();
            }
            if let Some(before) = &previous
                && let Some(listed) = state.listed.get_mut(before)
            {
                listed.next = Some(key.clone());
            }
            let listed = Listed { etag: etag.to_string(), size, previous: previous.clone(), next: None };
            state.listed.insert(key.clone(), listed);
            previous = Some(key);
        }
    }

    #[cfg(test)]
    pub(crate) fn knows_order_of(&self, key: &str) -> bool {
        self.state().listed.contains_key(key)
    }

    /// The objects to fetch after a read of `key` from its start; each is entered as pending.
    fn plan_after(&self, key: &str) -> Vec<Planned> {
        let mut state = self.state();
        // Remembered even before its directory's order is known (list_on_lookup.rs lists it after the first
        // lookup): the next object's read then counts as in order as soon as the listing is in.
        if state.recent.len() >= RECENT_READS {
            state.recent.pop_front();
        }
        state.recent.push_back(key.to_string());
        let Some(listed) = state.listed.get(key).cloned() else {
            return Vec::new();
        };
        // Only a reader that follows the listing order: its previous object was just read, or this one was
        // fetched ahead. Random reads of small files must not multiply the GETs.
        // The first object of a listing counts as in order: `cat dir/*` starts there.
        let in_order = state.entries.contains_key(key)
            || listed.previous.as_ref().is_none_or(|previous| state.recent.contains(previous));
        if !in_order {
            return Vec::new();
        }
        let mut planned = Vec::new();
        let mut next = listed.next;
        for _ in 0..self.config.width {
            let Some(candidate) = next.take() else { break };
            let Some(object) = state.listed.get(&candidate).cloned() else { break };
            next = object.next.clone();
            let cached_behind = state.behind_has.get(&candidate) == Some(&object.etag);
            // A reader already at its first bytes fetches it itself (its read found nothing held): a GET ahead
            // would be a second GET of the same object.
            let being_read = state.from_start.contains_key(&candidate);
            // Its next open is served by the kernel's pages: the mount would fetch bytes nobody asks it for.
            let kernel_has = state.kernel_held.holds(&candidate, &object.etag);
            if cached_behind
                || being_read
                || kernel_has
                || state.entries.contains_key(&candidate)
                || object.size == 0
                || object.size > self.config.largest
            {
                continue;
            }
            if !state.make_room(object.size, self.config.budget, key) {
                break;
            }
            planned.push(state.enter_pending(candidate, ETag::from(object.etag.as_str()), object.size, 0));
        }
        planned
    }

    /// Stores what the GET of piece `index` returned (or drops the whole entry when it failed).
    fn finish(&self, key: &str, id: u64, index: usize, body: Option<Bytes>) {
        let mut state = self.state();
        let Some(entry) = state.entries.get_mut(key).filter(|entry| entry.id == id) else {
            return; // Abandoned, evicted or replaced meanwhile.
        };
        match body {
            Some(body) => entry.fill(index, body),
            None => state.drop_entry(key),
        }
    }

    /// The block at `offset` of the object `id` if it is held with the same ETag and size, waiting for the
    /// pieces it needs while they are fetched. A mismatch drops the entry; the last block served drops it too.
    async fn block(&self, id: &ObjectId, offset: u64, size: u64, block_size: u64) -> Option<Bytes> {
        // Each wait ends with one more piece here (a block spans at most a few).
        loop {
            let done = {
                let mut state = self.state();
                let entry = state.entries.get(id.key())?;
                if entry.etag != *id.etag() || entry.size != size {
                    state.drop_entry(id.key());
                    return None;
                }
                match entry.block(offset, block_size) {
                    Found::Block(block) => {
                        if offset + block.len() as u64 == size {
                            state.drop_entry(id.key());
                        }
                        return Some(block);
                    }
                    Found::Nothing => return None,
                    Found::Wait(done) => done,
                }
            };
            // Cancelled when the fetch failed or was abandoned: then the read goes to S3.
            done.await.ok()?;
        }
    }

    /// Notes that the disk cache behind holds the start of `id` (it may evict it later: then a read goes
    /// to S3 as it would with no read-ahead).
    fn cached_behind(&self, id: &ObjectId) {
        let mut state = self.state();
        if state.behind_has.len() >= MOST_LISTED {
            state.behind_has.clear();
        }
        state.behind_has.insert(id.key().to_string(), id.etag().as_str().to_string());
    }

    /// Notes that a read of `id` reached its last block: the kernel now holds its pages (when it keeps any).
    fn read_through(&self, id: &ObjectId, size: u64) {
        self.state().kernel_held.read_through(id.key(), id.etag().as_str(), size);
    }

    /// Drops entries unread for too long, and fetches under way for too long.
    fn sweep(&self, now: Instant) {
        let mut state = self.state();
        let stale: Vec<String> = state
            .entries
            .iter()
            .filter(|(_, entry)| {
                let limit = if entry.is_complete() { self.config.unread_for } else { self.config.pending_for };
                now.duration_since(entry.since) > limit
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            tracing::debug!(key, "read-ahead entry dropped unread");
            state.drop_entry(&key);
        }
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.state().held
    }
}

fn sweep_until_gone(ahead: &Weak<ReadAhead>) {
    loop {
        std::thread::sleep(Duration::from_millis(500));
        match ahead.upgrade() {
            Some(ahead) => ahead.sweep(Instant::now()),
            None => return,
        }
    }
}

/// An entry to fetch: one GET for each of its pieces' ranges.
struct Planned {
    key: String,
    etag: ETag,
    id: u64,
    ranges: Vec<Range<u64>>,
}

/// The data cache the prefetcher consults first: blocks fetched ahead, then the disk cache if there is one.
pub struct AheadCache<C> {
    ahead: Arc<ReadAhead>,
    client: C,
    bucket: String,
    runtime: Runtime,
    block_size: u64,
    behind: Option<Arc<dyn DataCache + Send + Sync>>,
}

impl<C> AheadCache<C>
where
    C: ObjectClient + Clone + Send + Sync + 'static,
{
    pub fn new(
        ahead: Arc<ReadAhead>,
        client: C,
        bucket: String,
        runtime: Runtime,
        block_size: u64,
        behind: Option<Arc<dyn DataCache + Send + Sync>>,
    ) -> Self {
        let block_size = behind.as_ref().map_or(block_size, |cache| cache.block_size());
        Self { ahead, client, bucket, runtime, block_size, behind }
    }

    fn put_behind(
        &self,
        behind: Arc<dyn DataCache + Send + Sync>,
        id: ObjectId,
        block_idx: BlockIndex,
        block_offset: u64,
        block: ChecksummedBytes,
        object_size: usize,
    ) {
        if block_idx == 0 {
            self.ahead.cached_behind(&id);
        }
        let task = async move {
            if let Err(error) = behind.put_block(id, block_idx, block_offset, block, object_size).await {
                tracing::debug!(?error, "cannot write a block read ahead to the disk cache");
            }
        };
        if let Err(error) = self.runtime.spawn(task) {
            tracing::debug!(?error, "cannot start a disk cache write");
        }
    }

    fn start_after(&self, key: &str) {
        for planned in self.ahead.plan_after(key) {
            self.fetch(planned);
        }
    }

    /// Starts the GETs of a planned entry's pieces in the background, all at once; the entry is filled piece by
    /// piece, or dropped when one fails.
    fn fetch(&self, planned: Planned) {
        for (index, range) in planned.ranges.into_iter().enumerate() {
            let (ahead, client, bucket) = (self.ahead.clone(), self.client.clone(), self.bucket.clone());
            let (key, etag, id) = (planned.key.clone(), planned.etag.clone(), planned.id);
            let task = async move {
                let body = fetch_range(&client, &bucket, &key, etag, range).await;
                ahead.finish(&key, id, index, body);
            };
            if let Err(error) = self.runtime.spawn(task) {
                // The entry stays pending until the sweeper drops it; a reader waits no longer than that.
                tracing::warn!(?error, "cannot start a read-ahead GET");
            }
        }
    }

    /// The block from memory (read ahead, or fetched whole by its first GET), also written to the disk cache.
    async fn held_block(
        &self,
        id: &ObjectId,
        block_idx: BlockIndex,
        offset: u64,
        size: usize,
    ) -> Option<ChecksummedBytes> {
        let block = ChecksummedBytes::new(self.ahead.block(id, offset, size as u64, self.block_size).await?);
        // The prefetcher writes to the disk cache only what it fetched itself: a block served from memory goes
        // there too, or the next epoch would fetch it again.
        if let Some(behind) = &self.behind {
            self.put_behind(behind.clone(), id.clone(), block_idx, offset, block.clone(), size);
        }
        Some(block)
    }
}

#[async_trait]
impl<C> DataCache for AheadCache<C>
where
    C: ObjectClient + Clone + Send + Sync + 'static,
{
    async fn get_block(
        &self,
        cache_key: &ObjectId,
        block_idx: BlockIndex,
        block_offset: u64,
        object_size: usize,
        cursor_id: Option<CursorId>,
    ) -> DataCacheResult<Option<ChecksummedBytes>> {
        if block_idx == 0 {
            self.start_after(cache_key.key());
        }
        if self.ahead.config.kernel_keeps > 0 && block_offset + self.block_size >= object_size as u64 {
            self.ahead.read_through(cache_key, object_size as u64);
        }
        if let Some(block) = self.held_block(cache_key, block_idx, block_offset, object_size).await {
            return Ok(Some(block));
        }
        let behind = match &self.behind {
            Some(cache) => cache.get_block(cache_key, block_idx, block_offset, object_size, cursor_id).await?,
            None => None,
        };
        // Not held anywhere: an object read from its start may be fetched whole by this first GET.
        if behind.is_none()
            && block_idx == 0
            && let Some(planned) =
                self.ahead.plan_whole(cache_key, object_size as u64, self.client.read_part_size() as u64)
        {
            self.fetch(planned);
            return Ok(self.held_block(cache_key, block_idx, block_offset, object_size).await);
        }
        // The prefetcher now fetches the object itself and writes its blocks to the disk cache: noted at once,
        // so that a read of the object before it in the listing does not fetch it ahead meanwhile.
        if behind.is_none() && block_idx == 0 && self.behind.is_some() {
            self.ahead.cached_behind(cache_key);
        }
        Ok(behind)
    }

    async fn put_block(
        &self,
        cache_key: ObjectId,
        block_idx: BlockIndex,
        block_offset: u64,
        bytes: ChecksummedBytes,
        object_size: usize,
    ) -> DataCacheResult<()> {
        let Some(cache) = &self.behind else {
            return Ok(());
        };
        if block_idx == 0 {
            self.ahead.cached_behind(&cache_key);
        }
        cache.put_block(cache_key, block_idx, block_offset, bytes, object_size).await
    }

    fn block_size(&self) -> u64 {
        self.block_size
    }
}

#[cfg(test)]
mod tests;
