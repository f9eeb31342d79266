//! The first GET sized by what is known: a file read from its first byte, whose object is small enough, is
//! fetched whole by one GET, where the crates' prefetcher would start with 1.125 MiB and widen only while the
//! reader waits (two round trips or more for an object of a few MiB).
//!
//! Who knows what: the FUSE adapter (keep_cache.rs) sees each read's offset and notes, while a read at offset 0
//! is being answered, that its object is read from the start ([`ReadAhead::reading_from_start`]). The prefetcher
//! asks the data cache ([`super::AheadCache`]) for the object's first block during that read, with the size and
//! ETag the lookup (or the object list) gave: the cache then fetches the object whole, pinned to that ETag, and
//! serves every block from memory, as it does for the read-ahead across files. The crates' prefetcher has no
//! per-request hook (its `ObjectPartStream` is private to the crate) and its `initial_request_size` is one
//! setting for every read; this decides per read.
//!
//! What stays as it was: a read that starts anywhere else (a map-style sample deep in a shard) gets the crates'
//! small first GET; an object larger than the bound, or one the budget has no free room for (this never evicts
//! what was read ahead), goes to the prefetcher as usual.

use std::sync::Arc;

use mountpoint_s3_fs::object::ObjectId;

use super::{Planned, ReadAhead};

/// Objects of a size in `above < size <= up_to` (bytes), read from offset 0, get a whole first GET.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WholeFirstGet {
    /// At most this size; 0 turns it off.
    pub up_to: u64,
    /// More than this size: the prefetcher's own first GET already fetches a smaller object in one request
    /// (the lesser of its size and the client's read part).
    pub above: u64,
}

impl WholeFirstGet {
    pub fn is_on(self) -> bool {
        self.up_to > self.above
    }

    fn covers(self, size: u64) -> bool {
        size > self.above && size <= self.up_to
    }
}

/// A read at offset 0 of one object, under way: the note goes when this is dropped.
pub struct FromStart {
    ahead: Arc<ReadAhead>,
    key: String,
}

impl Drop for FromStart {
    fn drop(&mut self) {
        let mut state = self.ahead.state();
        if let Some(count) = state.from_start.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                state.from_start.remove(&self.key);
            }
        }
    }
}

impl ReadAhead {
    /// Notes that `key` is being read from offset 0, until the guard is dropped.
    pub fn reading_from_start(self: &Arc<Self>, key: &str) -> FromStart {
        *self.state().from_start.entry(key.to_string()).or_default() += 1;
        FromStart { ahead: self.clone(), key: key.to_string() }
    }

    /// The whole GET of `id` to start now, in pieces of `piece_size` (the client's read part), entered as
    /// pending, when the object is read from its start, within the bound, not held already, and fits in the
    /// budget's free room.
    pub(super) fn plan_whole(&self, id: &ObjectId, size: u64, piece_size: u64) -> Option<Planned> {
        let mut state = self.state();
        let wanted = self.config.whole_first.covers(size)
            && state.from_start.contains_key(id.key())
            && !state.entries.contains_key(id.key())
            && state.held + size <= self.config.budget;
        wanted.then(|| state.enter_pending(id.key().to_string(), id.etag().clone(), size, piece_size))
    }
}
