//! [`Listing`]: the crates' client, every call forwarded, remembering the order of the keys each LIST returns
//! for the read-ahead across files.
//!
//! A reader that opens files by name without listing their directory (a list of paths, a loader driven by its
//! index, `shard-{000..099}.tar`) sends no LIST that says what comes next, only a lookup per file. So the first
//! lookup that finds a file in a directory whose order is not known starts one listing of that directory on a
//! thread of its own (at most `LISTED_PAGES` pages, a few at once), and the lookup itself is not delayed. A reader that then
//! opens the files in listing order gets the read-ahead; one that does not starts nothing (`plan_after`).

use std::sync::Arc;

use futures::executor::block_on;

use async_trait::async_trait;
use mountpoint_s3_client::ObjectClient;
use mountpoint_s3_client::error::{
    CopyObjectError, DeleteObjectError, GetObjectAttributesError, GetObjectError, HeadObjectError, ListObjectsError,
    PutObjectError, RenameObjectError,
};
use mountpoint_s3_client::types::{
    CopyObjectParams, CopyObjectResult, DeleteObjectResult, GetObjectAttributesResult, GetObjectParams,
    HeadObjectParams, HeadObjectResult, ListObjectsResult, ObjectAttribute, ObjectClientResult, PutObjectParams,
    PutObjectResult, PutObjectSingleParams, RenameObjectParams, RenameObjectResult,
};
use mountpoint_s3_crt::s3::client::BufferPoolUsageStats;

use super::ReadAhead;

/// The crates' client, remembering the order of the keys each LIST returns.
#[derive(Clone)]
pub struct Listing<C> {
    inner: C,
    ahead: Option<Arc<ReadAhead>>,
}

/// Pages of 1,000 keys listed at most for one directory's order.
const LISTED_PAGES: usize = 10;

impl<C> Listing<C> {
    /// With `ahead` None this forwards every call and remembers nothing.
    pub fn new(inner: C, ahead: Option<Arc<ReadAhead>>) -> Self {
        Self { inner, ahead }
    }
}

/// The directory prefix of `key` (`a/b/c` -> `a/b/`, `c` -> ``).
fn directory_of(key: &str) -> &str {
    key.rfind('/').map_or("", |slash| &key[..=slash])
}

impl<C> Listing<C>
where
    C: ObjectClient + Clone + Send + Sync + 'static,
{
    /// Lists `key`'s directory for its order on a thread, unless its order is known or being listed.
    fn learn_order_of_directory_of(&self, bucket: &str, key: &str) {
        let Some(ahead) = &self.ahead else { return };
        let prefix = directory_of(key);
        if !ahead.claim_directory(prefix) {
            return;
        }
        let (inner, bucket, prefix) = (self.inner.clone(), bucket.to_string(), prefix.to_string());
        let (on_thread, listed) = (ahead.clone(), prefix.clone());
        let spawned = std::thread::Builder::new().name("read-ahead-list".into()).spawn(move || {
            let (ahead, prefix) = (on_thread, listed);
            let mut objects = Vec::new();
            let mut token: Option<String> = None;
            for _ in 0..LISTED_PAGES {
                match block_on(inner.list_objects(&bucket, token.as_deref(), "/", 1000, &prefix)) {
                    Ok(page) => {
                        objects.extend(page.objects.into_iter().map(|o| (o.key, o.etag, o.size)));
                        token = page.next_continuation_token;
                        if token.is_none() {
                            break;
                        }
                    }
                    Err(error) => {
                        tracing::debug!("read-ahead: listing {prefix:?} for its order failed: {error}");
                        ahead.listed_directory(&prefix, false);
                        return;
                    }
                }
            }
            if objects.len() > 1 {
                ahead.know_order(objects.iter().map(|(key, etag, size)| (key.clone(), etag.as_str(), *size)));
            }
            ahead.listed_directory(&prefix, true);
        });
        if let Err(error) = spawned {
            tracing::debug!("read-ahead: cannot start a listing of {prefix:?} ({error})");
            ahead.listed_directory(&prefix, false);
        }
    }
}

#[async_trait]
impl<C> ObjectClient for Listing<C>
where
    C: ObjectClient + Clone + Send + Sync + 'static,
{
    type GetObjectResponse = C::GetObjectResponse;
    type PutObjectRequest = C::PutObjectRequest;
    type ClientError = C::ClientError;

    fn read_part_size(&self) -> usize {
        self.inner.read_part_size()
    }

    fn write_part_size(&self) -> usize {
        self.inner.write_part_size()
    }

    fn initial_read_window_size(&self) -> Option<usize> {
        self.inner.initial_read_window_size()
    }

    fn mem_usage_stats(&self) -> Option<BufferPoolUsageStats> {
        self.inner.mem_usage_stats()
    }

    async fn delete_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> ObjectClientResult<DeleteObjectResult, DeleteObjectError, Self::ClientError> {
        self.inner.delete_object(bucket, key).await
    }

    async fn copy_object(
        &self,
        source_bucket: &str,
        source_key: &str,
        destination_bucket: &str,
        destination_key: &str,
        params: &CopyObjectParams,
    ) -> ObjectClientResult<CopyObjectResult, CopyObjectError, Self::ClientError> {
        self.inner.copy_object(source_bucket, source_key, destination_bucket, destination_key, params).await
    }

    async fn get_object(
        &self,
        bucket: &str,
        key: &str,
        params: &GetObjectParams,
    ) -> ObjectClientResult<Self::GetObjectResponse, GetObjectError, Self::ClientError> {
        self.inner.get_object(bucket, key, params).await
    }

    async fn list_objects(
        &self,
        bucket: &str,
        continuation_token: Option<&str>,
        delimiter: &str,
        max_keys: usize,
        prefix: &str,
    ) -> ObjectClientResult<ListObjectsResult, ListObjectsError, Self::ClientError> {
        let result = self.inner.list_objects(bucket, continuation_token, delimiter, max_keys, prefix).await?;
        // A lookup lists one key at a time; only a directory's listing says what comes next.
        if let Some(ahead) = &self.ahead
            && result.objects.len() > 1
        {
            ahead.know_order(result.objects.iter().map(|o| (o.key.clone(), o.etag.as_str(), o.size)));
            if prefix.is_empty() || prefix.ends_with('/') {
                ahead.directory_known(prefix);
            }
        }
        Ok(result)
    }

    async fn head_object(
        &self,
        bucket: &str,
        key: &str,
        params: &HeadObjectParams,
    ) -> ObjectClientResult<HeadObjectResult, HeadObjectError, Self::ClientError> {
        // Every lookup sends one: the first that finds a file in a directory of unknown order has it listed,
        // aside. A lookup of a directory, or of a name that is not there (the watchdog's probe), lists nothing.
        let result = self.inner.head_object(bucket, key, params).await?;
        self.learn_order_of_directory_of(bucket, key);
        Ok(result)
    }

    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        params: &PutObjectParams,
    ) -> ObjectClientResult<Self::PutObjectRequest, PutObjectError, Self::ClientError> {
        self.inner.put_object(bucket, key, params).await
    }

    async fn put_object_single(
        &self,
        bucket: &str,
        key: &str,
        params: &PutObjectSingleParams,
        contents: impl AsRef<[u8]> + Send + 'static,
    ) -> ObjectClientResult<PutObjectResult, PutObjectError, Self::ClientError> {
        self.inner.put_object_single(bucket, key, params, contents).await
    }

    async fn get_object_attributes(
        &self,
        bucket: &str,
        key: &str,
        max_parts: Option<usize>,
        part_number_marker: Option<usize>,
        object_attributes: &[ObjectAttribute],
    ) -> ObjectClientResult<GetObjectAttributesResult, GetObjectAttributesError, Self::ClientError> {
        self.inner.get_object_attributes(bucket, key, max_parts, part_number_marker, object_attributes).await
    }

    async fn rename_object(
        &self,
        bucket: &str,
        src_key: &str,
        dest_key: &str,
        params: &RenameObjectParams,
    ) -> ObjectClientResult<RenameObjectResult, RenameObjectError, Self::ClientError> {
        self.inner.rename_object(bucket, src_key, dest_key, params).await
    }
}
