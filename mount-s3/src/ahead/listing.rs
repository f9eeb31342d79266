//! [`Listing`]: the crates' client, every call forwarded, remembering the order of the keys each LIST returns
//! for the read-ahead across files.
//!
//! A reader that opens files by name without listing their directory (a list of paths, a loader driven by its
//! index, `shard-{000..099}.tar`) sends no LIST that says what comes next, only a lookup per file. The FUSE
//! adapter lists such a directory after the first file looked up in it (list_on_lookup.rs), and that listing comes
//! through here like a reader's own. A reader that then opens the files in listing order gets the read-ahead; one
//! that does not starts nothing (`plan_after`).

use std::sync::Arc;

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

impl<C> Listing<C> {
    /// With `ahead` None this forwards every call and remembers nothing.
    pub fn new(inner: C, ahead: Option<Arc<ReadAhead>>) -> Self {
        Self { inner, ahead }
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
        }
        Ok(result)
    }

    async fn head_object(
        &self,
        bucket: &str,
        key: &str,
        params: &HeadObjectParams,
    ) -> ObjectClientResult<HeadObjectResult, HeadObjectError, Self::ClientError> {
        self.inner.head_object(bucket, key, params).await
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
