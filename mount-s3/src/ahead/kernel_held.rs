//! The objects whose pages the kernel most likely still holds, so that the read-ahead across files leaves them out.
//!
//! On a mount that keeps the page cache across opens (keep_cache.rs), an object read through to its end at one
//! ETag is served by the kernel at its next open: the reader never asks the mount for it again. A GET ahead of
//! it would fetch bytes nobody reads, and hold them in the read-ahead's budget until they go stale. It happens
//! in every epoch after the first: a file that lost a few pages to reclaim sends one read to the mount, whose
//! first block plans the next files ahead, all of them still in the kernel's cache.
//!
//! The kernel does not say which pages it still has (the program cannot `mincore` its own mount's files), so
//! this is a bound in bytes, oldest first: the kernel reclaims roughly oldest first too, so past the bound an
//! object counts as reclaimed and is read ahead again. The bound is half of the memory available when the
//! mount started ([`page_cache_guess`]). Wrong either way, it costs speed, never data: an object left out is
//! read from S3 on demand, one fetched ahead is served only to a read of that same ETag (mod.rs).

use std::collections::{BTreeMap, HashMap};

#[derive(Debug)]
struct Held {
    etag: String,
    size: u64,
    order: u64,
}

/// Objects (key, ETag) read through to their end, newest last, at most `limit` bytes of them.
#[derive(Debug, Default)]
pub struct KernelHeld {
    limit: u64,
    bytes: u64,
    next: u64,
    by_key: HashMap<String, Held>,
    by_order: BTreeMap<u64, String>,
}

impl KernelHeld {
    /// A limit of 0 holds nothing: the kernel keeps no pages across opens.
    pub fn new(limit: u64) -> Self {
        Self { limit, ..Self::default() }
    }

    /// Notes that `key` at `etag` was read through to its end: its pages are now the newest in the kernel's cache.
    pub fn read_through(&mut self, key: &str, etag: &str, size: u64) {
        if size > self.limit {
            return;
        }
        self.forget(key);
        let order = self.next;
        self.next += 1;
        self.by_key.insert(key.to_string(), Held { etag: etag.to_string(), size, order });
        self.by_order.insert(order, key.to_string());
        self.bytes += size;
        while self.bytes > self.limit {
            let Some((_, oldest)) = self.by_order.pop_first() else { break };
            if let Some(held) = self.by_key.remove(&oldest) {
                self.bytes -= held.size;
            }
        }
    }

    /// True when `key` was read through at `etag` within the bound.
    pub fn holds(&self, key: &str, etag: &str) -> bool {
        self.by_key.get(key).is_some_and(|held| held.etag == etag)
    }

    fn forget(&mut self, key: &str) {
        if let Some(held) = self.by_key.remove(key) {
            self.by_order.remove(&held.order);
            self.bytes -= held.size;
        }
    }
}

/// Half of the memory the kernel reported available (`MemAvailable`) when the mount started, in bytes; 0 where it
/// cannot be read, which leaves the read-ahead as it is without this.
pub fn page_cache_guess() -> u64 {
    std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| mem_available(&text)).map_or(0, |bytes| bytes / 2)
}

fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_read_through_is_held_at_its_etag_only() {
        let mut held = KernelHeld::new(100);
        held.read_through("a", "e1", 10);
        assert!(held.holds("a", "e1"));
        assert!(!held.holds("a", "e2"), "another version's pages are not the ones read");
        assert!(!held.holds("b", "e1"));
        held.read_through("a", "e2", 10);
        assert!(held.holds("a", "e2") && !held.holds("a", "e1"));
    }

    #[test]
    fn past_the_bound_the_oldest_count_as_reclaimed() {
        let mut held = KernelHeld::new(25);
        for key in ["a", "b", "c"] {
            held.read_through(key, "e", 10);
        }
        assert!(!held.holds("a", "e"), "a is the oldest: 30 bytes read, 25 held");
        assert!(held.holds("b", "e") && held.holds("c", "e"));
        // A second read through makes an object the newest again.
        held.read_through("b", "e", 10);
        held.read_through("d", "e", 10);
        assert!(held.holds("b", "e") && held.holds("d", "e") && !held.holds("c", "e"));
        assert_eq!(held.bytes, 20);
    }

    #[test]
    fn a_limit_of_zero_or_an_object_above_it_holds_nothing() {
        let mut none = KernelHeld::new(0);
        none.read_through("a", "e", 1);
        assert!(!none.holds("a", "e"));
        let mut small = KernelHeld::new(5);
        small.read_through("a", "e", 6);
        assert!(!small.holds("a", "e"));
        assert_eq!(small.bytes, 0);
    }

    #[test]
    fn the_guess_is_half_the_available_memory() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(mem_available(meminfo), Some(20_000_000 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
        assert!(page_cache_guess() > 0, "this machine's /proc/meminfo has MemAvailable");
    }
}
