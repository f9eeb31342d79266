//! One object held in memory: its bytes in pieces, each fetched by a GET of its own (one piece for an object
//! read ahead, the client's read parts for a whole first GET), served block by block as the pieces arrive.
//!
//! Why pieces for a whole first GET: the CRT fetches the first part of a GET alone (it learns the object's size
//! from that response) and only then the others in parallel; ranged GETs of one part each all start at once, so
//! an object of several parts costs one round trip instead of two, and the same number of requests.

use std::ops::Range;
use std::pin::pin;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::channel::oneshot;
use futures::future::Shared as SharedFuture;
use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_client::types::{ClientBackpressureHandle as _, ETag, GetObjectParams, GetObjectResponse as _};

/// A waiter's view of a piece being fetched: completes with its bytes, or is cancelled when the fetch fails
/// or the entry is dropped (the sender lives in the entry, so dropping it cancels every waiter).
pub(super) type PieceDone = SharedFuture<oneshot::Receiver<Bytes>>;

enum Piece {
    Pending { done: PieceDone, sender: Option<oneshot::Sender<Bytes>> },
    Ready(Bytes),
}

impl Piece {
    fn pending() -> Self {
        let (sender, receiver) = oneshot::channel();
        Self::Pending { done: receiver.shared(), sender: Some(sender) }
    }
}

pub(super) struct Entry {
    pub etag: ETag,
    pub size: u64,
    pub id: u64,
    /// When it was entered, or completed: the sweeper's clock.
    pub since: Instant,
    piece_size: u64,
    pieces: Vec<Piece>,
}

/// What a read of one block finds in an entry.
pub(super) enum Found {
    Block(Bytes),
    /// A piece the block needs is still being fetched.
    Wait(PieceDone),
    /// The block starts at or past the object's end.
    Nothing,
}

impl Entry {
    /// An entry with every piece pending; `piece_size` 0 or at least `size` makes one piece.
    pub fn pending(etag: ETag, size: u64, id: u64, piece_size: u64) -> Self {
        let piece_size = if piece_size == 0 { size.max(1) } else { piece_size.min(size.max(1)) };
        let pieces = (0..size.div_ceil(piece_size).max(1)).map(|_| Piece::pending()).collect();
        Self { etag, size, id, since: Instant::now(), piece_size, pieces }
    }

    /// The byte range of each piece, in order.
    pub fn ranges(&self) -> Vec<Range<u64>> {
        (0..self.pieces.len() as u64)
            .map(|index| index * self.piece_size..((index + 1) * self.piece_size).min(self.size))
            .collect()
    }

    pub fn is_complete(&self) -> bool {
        self.pieces.iter().all(|piece| matches!(piece, Piece::Ready(_)))
    }

    /// Stores piece `index` and wakes its waiters; a completed entry restarts the sweeper's clock.
    pub fn fill(&mut self, index: usize, body: Bytes) {
        let Some(piece) = self.pieces.get_mut(index) else { return };
        if let Piece::Pending { sender: Some(sender), .. } = std::mem::replace(piece, Piece::Ready(body.clone())) {
            let _ = sender.send(body);
        }
        if self.is_complete() {
            self.since = Instant::now();
        }
    }

    /// The block of up to `block_size` bytes at `offset`, once every piece it spans is here.
    pub fn block(&self, offset: u64, block_size: u64) -> Found {
        if offset >= self.size {
            return Found::Nothing;
        }
        let end = (offset + block_size).min(self.size);
        let pieces = (offset / self.piece_size) as usize..=((end - 1) / self.piece_size) as usize;
        // A copy, not a slice: a slice would keep the whole piece alive for as long as the prefetcher or a
        // disk cache write holds this block, past the budget.
        let mut block = BytesMut::with_capacity((end - offset) as usize);
        for index in pieces {
            match &self.pieces[index] {
                Piece::Pending { done, .. } => return Found::Wait(done.clone()),
                Piece::Ready(body) => {
                    let start = index as u64 * self.piece_size;
                    let from = offset.max(start) - start;
                    let to = end.min(start + body.len() as u64) - start;
                    block.extend_from_slice(&body[from as usize..to as usize]);
                }
            }
        }
        Found::Block(block.freeze())
    }
}

/// One range of an object, pinned to `etag`; None on any failure (the caller then reads from S3 as usual).
pub(super) async fn fetch_range<C: ObjectClient>(
    client: &C,
    bucket: &str,
    key: &str,
    etag: ETag,
    range: Range<u64>,
) -> Option<Bytes> {
    let params = GetObjectParams::new().range(Some(range.clone())).if_match(Some(etag));
    let mut response = match client.get_object(bucket, key, &params).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(key, ?error, "read-ahead GET failed");
            return None;
        }
    };
    if let Some(handle) = response.backpressure_handle() {
        handle.ensure_read_window(range.end);
    }
    let mut response = pin!(response);
    let mut body = BytesMut::with_capacity((range.end - range.start) as usize);
    while let Some(part) = response.next().await {
        let part = match part {
            Ok(part) => part,
            Err(error) => {
                tracing::debug!(key, ?error, "read-ahead GET failed midway");
                return None;
            }
        };
        if part.offset != range.start + body.len() as u64 {
            return None;
        }
        body.extend_from_slice(&part.data);
        if range.start + body.len() as u64 == range.end {
            // All here: polling on would wait for the request's end with no read window left, which the client
            // answers with EmptyReadWindow (the crates' prefetcher stops here too).
            break;
        }
    }
    (range.start + body.len() as u64 == range.end).then(|| body.freeze())
}
