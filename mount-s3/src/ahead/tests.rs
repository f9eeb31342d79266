//! The read-ahead against mountpoint-s3-client's in-memory mock client (its `mock` feature, a dev-dependency):
//! the mock counts GETs exactly and can replace or remove an object between two calls, which is what these
//! cases need. The end-to-end checks against a real S3 server are in tests/test_ahead.py.

use std::sync::Arc;
use std::time::Duration;

use futures::executor::{ThreadPool, block_on};
use mountpoint_s3_client::mock_client::{MockClient, MockObject, Operation};
use mountpoint_s3_client::types::ETag;
use mountpoint_s3_fs::Runtime;
use mountpoint_s3_fs::data_cache::DataCache as _;
use mountpoint_s3_fs::object::ObjectId;

use super::{AheadCache, AheadConfig, Listing, ReadAhead, WholeFirstGet};
use mountpoint_s3_client::ObjectClient as _;

const BUCKET: &str = "bucket";
const SIZE: usize = 3000;
const BLOCK: u64 = 1024;

fn body(index: usize) -> Vec<u8> {
    (0..SIZE).map(|i| (i * 7 + index * 13) as u8).collect()
}

fn key(index: usize) -> String {
    format!("data/{index:03}")
}

struct Setup {
    client: Arc<MockClient>,
    ahead: Arc<ReadAhead>,
    cache: AheadCache<Arc<MockClient>>,
    etags: Vec<ETag>,
}

fn setup(objects: usize, width: usize, budget: u64) -> Setup {
    setup_with(objects, width, budget, WholeFirstGet { up_to: 0, above: 0 })
}

fn setup_with(objects: usize, width: usize, budget: u64, whole_first: WholeFirstGet) -> Setup {
    let setup = setup_unlisted(objects, width, budget, whole_first);
    setup.ahead.know_order((0..objects).map(|index| (key(index), setup.etags[index].as_str(), SIZE as u64)));
    setup
}

/// The objects in S3 and the read-ahead, with no order known yet.
fn setup_unlisted(objects: usize, width: usize, budget: u64, whole_first: WholeFirstGet) -> Setup {
    setup_keeping(objects, width, budget, whole_first, 0)
}

/// The same, on a mount whose kernel keeps up to `kernel_keeps` bytes of pages across opens.
fn setup_keeping(objects: usize, width: usize, budget: u64, whole_first: WholeFirstGet, kernel_keeps: u64) -> Setup {
    // Backpressure on with a window of one part: an ahead GET must open the window itself.
    let client = Arc::new(
        MockClient::config()
            .bucket(BUCKET)
            .part_size(BLOCK as usize)
            .enable_backpressure(true)
            .initial_read_window_size(BLOCK as usize)
            .build(),
    );
    let mut etags = Vec::new();
    for index in 0..objects {
        let data = body(index);
        let etag = ETag::from_object_bytes(&data);
        client.add_object(&key(index), MockObject::from_bytes(&data, etag.clone()));
        etags.push(etag);
    }
    let config = AheadConfig {
        width,
        budget,
        largest: SIZE as u64,
        unread_for: Duration::from_secs(30),
        pending_for: Duration::from_secs(5),
        whole_first,
        kernel_keeps,
    };
    let ahead = ReadAhead::new(config);
    let runtime = Runtime::new(ThreadPool::builder().pool_size(2).create().expect("a thread pool"));
    let cache = AheadCache::new(ahead.clone(), client.clone(), BUCKET.into(), runtime, BLOCK, None);
    Setup { client, ahead, cache, etags }
}

impl Setup {
    fn id(&self, index: usize) -> ObjectId {
        ObjectId::new(key(index), self.etags[index].clone())
    }

    /// Every block of the object asked of the cache, as the prefetcher does when it reads a file through (a
    /// block the cache lacks it then fetches itself).
    fn read_through(&self, id: &ObjectId) {
        for block in 0..(SIZE as u64).div_ceil(BLOCK) {
            let _ = block_on(self.cache.get_block(id, block, block * BLOCK, SIZE, None)).expect("no cache error");
        }
    }

    /// The whole object as the cache serves it, block by block; None at the first block it lacks.
    fn read(&self, id: &ObjectId) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        for block in 0..(SIZE as u64).div_ceil(BLOCK) {
            let got = block_on(self.cache.get_block(id, block, block * BLOCK, SIZE, None)).expect("no cache error")?;
            out.extend_from_slice(&got.into_bytes().expect("intact"));
        }
        Some(out)
    }
}

#[test]
fn the_next_objects_are_fetched_after_a_read_and_then_served_with_no_request() {
    let setup = setup(6, 2, 1 << 20);
    let gets = setup.client.new_counter(Operation::GetObject);
    // Object 0 is not held: the reader gets it from S3. Its first block starts objects 1 and 2.
    assert_eq!(setup.read(&setup.id(0)), None);
    let served = setup.read(&setup.id(1)).expect("object 1 was read ahead");
    assert_eq!(served, body(1));
    // Objects 1 and 2 after the read of 0, then each next one after the read of the one before.
    assert_eq!(setup.read(&setup.id(2)), Some(body(2)));
    for index in 3..6 {
        assert_eq!(setup.read(&setup.id(index)), Some(body(index)));
    }
    assert_eq!(gets.count(), 5, "one GET for each of objects 1..=5, none for the reads served");
    // Served whole, an entry is gone: a second read goes to S3.
    assert_eq!(setup.read(&setup.id(1)), None);
}

#[test]
fn a_replaced_object_is_never_served_from_memory() {
    let setup = setup(4, 2, 1 << 20);
    assert_eq!(setup.read(&setup.id(0)), None);
    // Object 1 is fetched ahead (the read of its first block waits for it), then replaced in S3.
    let first_block = block_on(setup.cache.get_block(&setup.id(1), 0, 0, SIZE, None)).unwrap();
    assert!(first_block.is_some());
    let new_data = body(99);
    let new_etag = ETag::from_object_bytes(&new_data);
    setup.client.add_object(&key(1), MockObject::from_bytes(&new_data, new_etag.clone()));
    // A reader that looked the object up again carries the new ETag: memory must not answer it.
    let replaced = ObjectId::new(key(1), new_etag);
    assert!(block_on(setup.cache.get_block(&replaced, 1, BLOCK, SIZE, None)).unwrap().is_none());
    // And the old entry is gone, so not even the old ETag gets it any more.
    assert!(block_on(setup.cache.get_block(&setup.id(1), 1, BLOCK, SIZE, None)).unwrap().is_none());
}

#[test]
fn an_object_replaced_before_its_ahead_get_falls_back_to_s3() {
    let setup = setup(3, 2, 1 << 20);
    // The listing says ETag A; S3 now holds B: the ahead GET, pinned to A, fails.
    let new_data = body(50);
    setup.client.add_object(&key(1), MockObject::from_bytes(&new_data, ETag::from_object_bytes(&new_data)));
    setup.client.remove_object(&key(2));
    assert_eq!(setup.read(&setup.id(0)), None);
    assert_eq!(setup.read(&setup.id(1)), None, "a failed ahead GET serves nothing");
    assert_eq!(setup.read(&setup.id(2)), None, "a missing object serves nothing");
    assert_eq!(setup.ahead.held(), 0, "failed entries are dropped");
}

#[test]
fn the_memory_bound_holds() {
    // Room for two objects and a half, with a width of four.
    let budget = (SIZE as u64) * 5 / 2;
    let setup = setup(10, 4, budget);
    let gets = setup.client.new_counter(Operation::GetObject);
    for index in 0..10 {
        let _ = setup.read(&setup.id(index));
        assert!(setup.ahead.held() <= budget, "held {} over {budget}", setup.ahead.held());
    }
    assert!(gets.count() >= 2, "something was read ahead");
}

#[test]
fn objects_read_out_of_order_start_nothing() {
    let setup = setup(10, 4, 1 << 20);
    let gets = setup.client.new_counter(Operation::GetObject);
    for index in [5, 2, 8] {
        assert_eq!(setup.read(&setup.id(index)), None);
    }
    assert_eq!(gets.count(), 0);
}

#[test]
fn an_entry_nobody_reads_is_dropped_after_its_time() {
    let setup = setup(4, 2, 1 << 20);
    assert_eq!(setup.read(&setup.id(0)), None);
    // Wait for the ahead GETs by reading a block of each, then age them past the bound.
    let _ = block_on(setup.cache.get_block(&setup.id(1), 0, 0, SIZE, None));
    let _ = block_on(setup.cache.get_block(&setup.id(2), 0, 0, SIZE, None));
    assert!(setup.ahead.held() > 0);
    setup.ahead.sweep(std::time::Instant::now() + Duration::from_secs(31));
    assert_eq!(setup.ahead.held(), 0);
}

#[test]
fn blocks_served_from_memory_reach_the_disk_cache_and_are_not_read_ahead_again() {
    use mountpoint_s3_fs::data_cache::InMemoryDataCache;

    let plain = setup(4, 2, 1 << 20);
    let behind = Arc::new(InMemoryDataCache::new(BLOCK));
    let runtime = Runtime::new(ThreadPool::builder().pool_size(1).create().expect("a thread pool"));
    let cache =
        AheadCache::new(plain.ahead.clone(), plain.client.clone(), BUCKET.into(), runtime, BLOCK, Some(behind.clone()));
    let setup = Setup { cache, ..plain };
    let gets = setup.client.new_counter(Operation::GetObject);
    assert_eq!(setup.read(&setup.id(0)), None);
    assert_eq!(setup.read(&setup.id(1)), Some(body(1)));
    assert_eq!(setup.read(&setup.id(2)), Some(body(2)));
    let after_epoch_one = gets.count();
    // The disk cache got every block of object 1 (written in the background: wait for them, bounded).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    for block in 0..(SIZE as u64).div_ceil(BLOCK) {
        while block_on(behind.get_block(&setup.id(1), block, block * BLOCK, SIZE, None)).unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "block {block} of object 1 never reached the disk cache");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // A second pass: object 1 comes from the disk cache, and reading 0 does not fetch 1 ahead again.
    assert!(setup.read(&setup.id(0)).is_none());
    assert_eq!(setup.read(&setup.id(1)), Some(body(1)));
    assert_eq!(gets.count(), after_epoch_one, "objects the disk cache holds were fetched again");
}

#[test]
fn an_object_whose_reader_is_already_at_its_start_is_not_fetched_ahead_as_well() {
    // Two readers in listing order at once (a warm's workers, a loader's): the one at object 1 fetches it itself.
    let setup = setup(4, 2, 1 << 20);
    let reading = setup.ahead.reading_from_start(&key(1));
    assert_eq!(setup.read(&setup.id(0)), None);
    assert!(
        !setup.ahead.state().entries.contains_key(&key(1)),
        "object 1 was fetched ahead while its reader fetched it"
    );
    // The next one is still started ahead, and served.
    assert_eq!(setup.read(&setup.id(2)), Some(body(2)));
    drop(reading);
}

#[test]
fn an_object_its_reader_fetches_into_the_disk_cache_is_not_fetched_ahead_meanwhile() {
    use mountpoint_s3_fs::data_cache::InMemoryDataCache;

    // Object 1's reader finds nothing held and goes to S3; before its blocks reach the disk cache, a read of
    // object 0 must not start a second GET of object 1.
    let plain = setup(4, 2, 1 << 20);
    let behind = Arc::new(InMemoryDataCache::new(BLOCK));
    let runtime = Runtime::new(ThreadPool::builder().pool_size(1).create().expect("a thread pool"));
    let cache = AheadCache::new(plain.ahead.clone(), plain.client.clone(), BUCKET.into(), runtime, BLOCK, Some(behind));
    let setup = Setup { cache, ..plain };
    assert!(block_on(setup.cache.get_block(&setup.id(1), 0, 0, SIZE, None)).unwrap().is_none());
    // Read first, object 1 is out of order and starts nothing; object 0's read then starts 2, and not 1.
    assert_eq!(setup.read(&setup.id(0)), None);
    let entries = &setup.ahead.state().entries;
    assert!(!entries.contains_key(&key(1)), "object 1 was fetched ahead while its reader fetched it");
    assert!(entries.contains_key(&key(2)));
}

#[test]
fn objects_the_kernel_holds_from_an_earlier_read_are_not_fetched_ahead_again() {
    // The kernel keeps two objects' pages. An epoch reads 0..5 in order (4 and 3 are the newest held), then
    // object 2 lost some pages, so one read of it reaches the mount.
    let no_whole_get = WholeFirstGet { up_to: 0, above: 0 };
    let setup = setup_keeping(5, 2, 1 << 20, no_whole_get, 2 * SIZE as u64);
    setup.ahead.know_order((0..5).map(|index| (key(index), setup.etags[index].as_str(), SIZE as u64)));
    for index in 0..5 {
        setup.read_through(&setup.id(index));
    }
    setup.ahead.sweep(std::time::Instant::now() + Duration::from_secs(31)); // the first epoch's entries, unread
    let gets = setup.client.new_counter(Operation::GetObject);
    setup.read_through(&setup.id(2));
    assert!(setup.ahead.state().entries.is_empty(), "objects the kernel holds (3 and 4) were fetched ahead");
    assert_eq!(gets.count(), 0);
    // Past the bound an object read through long ago counts as reclaimed: a read of 0 fetches 1 ahead, and not
    // 2, just read through.
    setup.read_through(&setup.id(0));
    assert!(setup.ahead.state().entries.contains_key(&key(1)));
    assert!(!setup.ahead.state().entries.contains_key(&key(2)), "object 2 was just read through");
    // A new version of a held object is not the one whose pages the kernel has: it is fetched ahead.
    let data = body(42);
    let etag = ETag::from_object_bytes(&data);
    setup.client.add_object(&key(2), MockObject::from_bytes(&data, etag.clone()));
    setup.ahead.know_order([(key(1), setup.etags[1].as_str(), SIZE as u64), (key(2), etag.as_str(), SIZE as u64)]);
    setup.read_through(&setup.id(1));
    assert!(setup.ahead.state().entries.contains_key(&key(2)), "the replaced object was not fetched ahead");
}

/// The whole first GET on for objects over one block and up to `SIZE`, with nothing read ahead across files.
fn whole_first(budget: u64) -> Setup {
    setup_with(3, 0, budget, WholeFirstGet { up_to: SIZE as u64, above: BLOCK })
}

#[test]
fn an_object_read_from_its_start_comes_whole_with_one_get_per_client_part() {
    let setup = whole_first(1 << 20);
    let gets = setup.client.new_counter(Operation::GetObject);
    let reading = setup.ahead.reading_from_start(&key(0));
    assert_eq!(setup.read(&setup.id(0)), Some(body(0)), "every block served from the first GETs");
    drop(reading);
    // The mock's parts are one block: three ranged GETs, started together, as the CRT would send three parts.
    let parts = (SIZE as u64).div_ceil(BLOCK);
    assert_eq!(gets.count(), parts);
    assert_eq!(setup.ahead.held(), 0, "served whole, the entry is gone");
    // Nothing else was fetched: only the object being read.
    assert_eq!(setup.read(&setup.id(1)), None);
    assert_eq!(gets.count(), parts);
}

#[test]
fn a_read_that_does_not_start_at_offset_0_gets_no_whole_get() {
    let setup = whole_first(1 << 20);
    let gets = setup.client.new_counter(Operation::GetObject);
    // A map-style read deep in the object asks for a later block first; the first block with no read at
    // offset 0 under way (a read at 500 KiB still asks for block 0) is not widened either.
    assert!(block_on(setup.cache.get_block(&setup.id(0), 2, 2 * BLOCK, SIZE, None)).unwrap().is_none());
    assert!(block_on(setup.cache.get_block(&setup.id(0), 0, 0, SIZE, None)).unwrap().is_none());
    // A read from the start that has been answered leaves no note behind.
    drop(setup.ahead.reading_from_start(&key(1)));
    assert!(block_on(setup.cache.get_block(&setup.id(1), 0, 0, SIZE, None)).unwrap().is_none());
    assert_eq!(gets.count(), 0);
}

#[test]
fn objects_beyond_the_bound_or_within_the_prefetchers_first_get_are_left_to_the_prefetcher() {
    for bound in
        [WholeFirstGet { up_to: SIZE as u64 - 1, above: BLOCK }, WholeFirstGet { up_to: 8000, above: SIZE as u64 }]
    {
        let setup = setup_with(1, 0, 1 << 20, bound);
        let gets = setup.client.new_counter(Operation::GetObject);
        let _reading = setup.ahead.reading_from_start(&key(0));
        assert_eq!(setup.read(&setup.id(0)), None, "{bound:?}");
        assert_eq!(gets.count(), 0, "{bound:?}");
    }
}

#[test]
fn the_whole_first_get_takes_only_free_room_and_evicts_nothing_read_ahead() {
    // Too small a budget: the prefetcher reads it as usual.
    let tight = whole_first(SIZE as u64 - 1);
    let gets = tight.client.new_counter(Operation::GetObject);
    let _reading = tight.ahead.reading_from_start(&key(0));
    assert_eq!(tight.read(&tight.id(0)), None);
    assert_eq!(gets.count(), 0);

    // Room for one object, taken by one read ahead: it stays, and the object read from its start goes to S3.
    let setup = setup_with(3, 1, SIZE as u64, WholeFirstGet { up_to: SIZE as u64, above: BLOCK });
    assert_eq!(setup.read(&setup.id(0)), None);
    // Its first block read plans object 2 ahead, which finds no room: object 1, being read, is not evicted.
    let first_block = block_on(setup.cache.get_block(&setup.id(1), 0, 0, SIZE, None)).unwrap();
    assert!(first_block.is_some(), "object 1 was read ahead");
    let _reading = setup.ahead.reading_from_start(&key(2));
    // Object 2 is the last (nothing after it to read ahead), and its whole GET finds no free room.
    let gets = setup.client.new_counter(Operation::GetObject);
    assert!(block_on(setup.cache.get_block(&setup.id(2), 0, 0, SIZE, None)).unwrap().is_none());
    assert_eq!(gets.count(), 0);
    assert_eq!(setup.ahead.held(), SIZE as u64, "object 1 still held");
}

#[test]
fn a_whole_first_get_is_pinned_to_the_etag_the_reader_opened() {
    let setup = whole_first(1 << 20);
    // S3 now holds another version than the one the reader's lookup gave: If-Match fails, nothing is served.
    let new_data = body(77);
    let new_etag = ETag::from_object_bytes(&new_data);
    setup.client.add_object(&key(0), MockObject::from_bytes(&new_data, new_etag.clone()));
    let reading = setup.ahead.reading_from_start(&key(0));
    assert_eq!(setup.read(&setup.id(0)), None, "the old version's read gets nothing from memory");
    assert_eq!(setup.ahead.held(), 0, "the failed entry is dropped");
    // A reader that looked the object up again reads the new version whole.
    let new_id = ObjectId::new(key(0), new_etag);
    let mut served = Vec::new();
    for block in 0..(SIZE as u64).div_ceil(BLOCK) {
        let got = block_on(setup.cache.get_block(&new_id, block, block * BLOCK, SIZE, None)).unwrap().expect("held");
        served.extend_from_slice(&got.into_bytes().unwrap());
    }
    drop(reading);
    assert_eq!(served, new_data);
}

#[test]
fn an_object_whose_start_the_disk_cache_holds_is_read_from_it_with_no_get() {
    use mountpoint_s3_fs::data_cache::{ChecksummedBytes, InMemoryDataCache};

    let plain = whole_first(1 << 20);
    let behind = Arc::new(InMemoryDataCache::new(BLOCK));
    let start = ChecksummedBytes::new(body(0)[..BLOCK as usize].to_vec().into());
    block_on(behind.put_block(plain.id(0), 0, 0, start, SIZE)).unwrap();
    let runtime = Runtime::new(ThreadPool::builder().pool_size(1).create().expect("a thread pool"));
    let cache =
        AheadCache::new(plain.ahead.clone(), plain.client.clone(), BUCKET.into(), runtime, BLOCK, Some(behind.clone()));
    let setup = Setup { cache, ..plain };
    let gets = setup.client.new_counter(Operation::GetObject);
    let _reading = setup.ahead.reading_from_start(&key(0));
    let block = block_on(setup.cache.get_block(&setup.id(0), 0, 0, SIZE, None)).unwrap().expect("from disk");
    assert_eq!(block.into_bytes().unwrap(), body(0)[..BLOCK as usize]);
    assert_eq!(gets.count(), 0);
    assert_eq!(setup.ahead.held(), 0);
}

#[test]
fn a_block_is_served_once_the_pieces_it_spans_are_here_whatever_the_order_they_come_in() {
    use super::entry::{Entry, Found};

    let data = body(5);
    let piece = |index: usize| bytes::Bytes::copy_from_slice(&data[index * 700..((index + 1) * 700).min(SIZE)]);
    // Pieces of 700 bytes under blocks of 1024: the block at 1024 spans pieces 1 and 2.
    let mut entry = Entry::pending(ETag::from_object_bytes(&data), SIZE as u64, 0, 700);
    assert_eq!(entry.ranges().len(), 5);
    assert!(matches!(entry.block(BLOCK, BLOCK), Found::Wait(_)));
    entry.fill(2, piece(2));
    assert!(matches!(entry.block(BLOCK, BLOCK), Found::Wait(_)), "piece 1 is still missing");
    entry.fill(1, piece(1));
    let Found::Block(block) = entry.block(BLOCK, BLOCK) else { panic!("pieces 1 and 2 are here") };
    assert_eq!(block, data[BLOCK as usize..2 * BLOCK as usize]);
    assert!(!entry.is_complete());
    for index in [0, 3, 4] {
        entry.fill(index, piece(index));
    }
    assert!(entry.is_complete());
    let Found::Block(last) = entry.block(2 * BLOCK, BLOCK) else { panic!("complete") };
    assert_eq!(last, data[2 * BLOCK as usize..]);
    assert!(matches!(entry.block(SIZE as u64, BLOCK), Found::Nothing));
}

#[test]
fn an_object_read_before_its_directory_order_was_known_still_counts_for_the_order_of_the_next() {
    // The reader's first file is read while the listing is still on its way: its read is remembered, so the
    // read of the second one, after the listing, is in order and reads ahead.
    let setup = setup_unlisted(6, 2, 1 << 20, WholeFirstGet { up_to: 0, above: 0 });
    let gets = setup.client.new_counter(Operation::GetObject);
    assert_eq!(setup.read(&setup.id(0)), None);
    setup.ahead.know_order((0..6).map(|index| (key(index), setup.etags[index].as_str(), SIZE as u64)));
    assert_eq!(setup.read(&setup.id(1)), None, "object 1 itself was read before anything was planned");
    for index in 2..6 {
        assert_eq!(setup.read(&setup.id(index)), Some(body(index)), "object {index} was read ahead");
    }
    assert_eq!(gets.count(), 4, "one GET for each of objects 2..=5");
}

#[test]
fn a_directorys_listing_through_the_client_gives_its_order_and_a_lookups_listing_of_one_key_does_not() {
    // The crates' lookup lists `name/` with at most one key; a directory's listing (a reader's readdir, or the
    // adapter's after a lookup by name, list_on_lookup.rs) lists it whole.
    let setup = setup_unlisted(4, 2, 1 << 20, WholeFirstGet { up_to: 0, above: 0 });
    let listing = Listing::new(setup.client.clone(), Some(setup.ahead.clone()));
    block_on(listing.list_objects(BUCKET, None, "/", 1, "data/")).expect("a lookup's LIST");
    assert!(!setup.ahead.knows_order_of(&key(0)));
    block_on(listing.list_objects(BUCKET, None, "/", 1000, "data/")).expect("a directory's LIST");
    assert!(setup.ahead.knows_order_of(&key(3)));
}
