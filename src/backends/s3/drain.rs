//! Usage by bounded listing and the client-side drain in `DeleteObjects` batches.

use std::time::{Duration, Instant};

use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

use super::{
    BACKEND, ErrorClass, MAX_DELETE_BATCH, OwnerMark, Ownership, S3Error, S3Store, classify,
};
use crate::metrics::Metrics;

/// Objects and bytes in a bucket, counting every version and delete marker (each must go before
/// the bucket can be deleted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub objects: i64,
    pub bytes: i64,
    /// False when the listing stopped at its bound: the numbers are a lower bound.
    pub complete: bool,
}

/// What one drain round did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrainRound {
    /// Versions and delete markers deleted in this round.
    pub deleted: u64,
    /// The last listing came back empty: nothing is left.
    pub empty: bool,
    /// Objects that cannot be deleted because of object lock or a legal hold: the drain must stop.
    pub blocked: Option<String>,
    /// Other per-key failures in the last batch (retried by the next round).
    pub failed: Vec<String>,
    /// Incomplete multipart uploads aborted in this round.
    pub aborted_uploads: u64,
    /// The bucket no longer carries the drain's owner mark: the round stopped before deleting.
    pub not_ours: Option<String>,
}

/// Per-key error codes that mean retention or a legal hold protects the object.
fn is_lock_error(code: &str) -> bool {
    matches!(code, "AccessDenied" | "InvalidRequest" | "ObjectLocked")
}

impl S3Store {
    /// Counts versions and delete markers, listing at most `max_entries` of them so that a
    /// bucket with millions of objects costs a bounded number of requests. `Ok(None)` when the
    /// bucket does not exist.
    pub async fn usage(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        let mut usage = Usage::default();
        let mut key_marker: Option<String> = None;
        let mut version_marker: Option<String> = None;
        loop {
            let page = metrics
                .backend_call(BACKEND, "list_object_versions", async {
                    match self
                        .client
                        .list_object_versions()
                        .bucket(bucket)
                        .max_keys(MAX_DELETE_BATCH as i32)
                        .set_key_marker(key_marker.clone())
                        .set_version_id_marker(version_marker.clone())
                        .send()
                        .await
                    {
                        Ok(page) => Ok(Some(page)),
                        Err(e) if e.code() == Some("NoSuchBucket") => Ok(None),
                        Err(e) => Err(classify("list_object_versions", e)),
                    }
                })
                .await?;
            let Some(page) = page else {
                return Ok(None);
            };
            usage.objects += (page.versions().len() + page.delete_markers().len()) as i64;
            usage.bytes += page.versions().iter().filter_map(|v| v.size()).sum::<i64>();
            if !page.is_truncated().unwrap_or(false) {
                usage.complete = true;
                return Ok(Some(usage));
            }
            if usage.objects >= max_entries {
                return Ok(Some(usage));
            }
            let next = (
                page.next_key_marker().map(str::to_string),
                page.next_version_id_marker().map(str::to_string),
            );
            // A truncated page must say where to go on, and somewhere new: a server that
            // repeats its marker would be listed forever.
            if next.0.is_none() || next == (key_marker.clone(), version_marker.clone()) {
                return Err(S3Error {
                    operation: "list_object_versions",
                    class: ErrorClass::Permanent,
                    code: "RepeatedContinuationMarker".to_string(),
                    message: format!(
                        "the store answered a truncated listing of bucket {bucket} without a new continuation marker ({:?}); it does not page correctly",
                        next.0
                    ),
                });
            }
            (key_marker, version_marker) = next;
        }
    }

    /// Why the bucket is not `owner`'s, or `None` when its mark names `owner`. Checked right
    /// before each delete batch: a bucket re-tagged (or re-created by someone else) while a
    /// drain runs loses not one more object.
    async fn not_owned_by(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
    ) -> Result<Option<String>, S3Error> {
        Ok(match self.ownership(metrics, bucket).await? {
            Ownership::Exists { mark: Some(mark) } if mark.same_owner(owner) => None,
            Ownership::Exists { mark: Some(mark) } => Some(format!(
                "bucket {bucket:?} is now marked as owned by {}, not by {}",
                mark.describe(),
                owner.describe()
            )),
            Ownership::Exists { mark: None } => Some(format!(
                "bucket {bucket:?} no longer carries keeper's ownership tags"
            )),
            Ownership::Missing => Some(format!("bucket {bucket:?} no longer exists")),
        })
    }

    /// Deletes versions and delete markers for about `budget` (at least one batch), at most
    /// `max_per_second` per second, then aborts incomplete multipart uploads (their parts hold
    /// data and keep some stores from deleting the bucket). Each batch first checks that the
    /// bucket still carries `owner`'s mark.
    ///
    /// Stateless, so a restart resumes where the bucket is: every batch re-lists from the start
    /// (continuing a listing across deletions can end it early on some servers).
    pub async fn drain_round(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        budget: Duration,
        max_per_second: u32,
    ) -> Result<DrainRound, S3Error> {
        let started = Instant::now();
        let mut round = DrainRound::default();
        let max_per_second = max_per_second.max(1);
        // Batches never exceed the rate, so one batch never needs more than a second of budget.
        let batch_size = MAX_DELETE_BATCH.min(max_per_second as usize);
        loop {
            let page = metrics
                .backend_call(BACKEND, "list_object_versions", async {
                    self.client
                        .list_object_versions()
                        .bucket(bucket)
                        .max_keys(batch_size as i32)
                        .send()
                        .await
                        .map_err(|e| classify("list_object_versions", e))
                })
                .await?;
            let ids: Vec<ObjectIdentifier> = page
                .versions()
                .iter()
                .filter_map(|v| Some((v.key()?, v.version_id())))
                .chain(
                    page.delete_markers()
                        .iter()
                        .filter_map(|m| Some((m.key()?, m.version_id()))),
                )
                .take(batch_size)
                .map(|(key, version)| {
                    ObjectIdentifier::builder()
                        .key(key)
                        .set_version_id(version.map(str::to_string))
                        .build()
                        .expect("key is set")
                })
                .collect();
            if ids.is_empty() {
                self.abort_uploads(metrics, bucket, owner, &mut round)
                    .await?;
                // Aborted uploads are listed again by the next round, which then finds none.
                round.empty = round.not_ours.is_none() && round.aborted_uploads == 0;
                return Ok(round);
            }
            // The budget is checked after the listing, so a round that deleted the last objects
            // still reports the bucket empty.
            if round.deleted > 0 && started.elapsed() >= budget {
                return Ok(round);
            }
            if let Some(why) = self.not_owned_by(metrics, bucket, owner).await? {
                round.not_ours = Some(why);
                return Ok(round);
            }
            let requested = ids.len() as u64;
            let delete = Delete::builder()
                .set_objects(Some(ids))
                .quiet(true)
                .build()
                .expect("objects are set");
            let out = metrics
                .backend_call(BACKEND, "delete_objects", async {
                    self.client
                        .delete_objects()
                        .bucket(bucket)
                        .delete(delete)
                        .send()
                        .await
                        .map_err(|e| classify("delete_objects", e))
                })
                .await?;
            // Quiet mode reports only failures; everything else was deleted.
            let failures = out.errors();
            round.deleted += requested - failures.len() as u64;
            round.failed = failures
                .iter()
                .map(|f| {
                    format!(
                        "{}: {}: {}",
                        f.key().unwrap_or_default(),
                        f.code().unwrap_or("Unknown"),
                        f.message().unwrap_or_default()
                    )
                })
                .collect();
            if let Some(locked) = failures
                .iter()
                .find(|f| f.code().is_some_and(is_lock_error))
            {
                round.blocked = Some(format!(
                    "object {:?} cannot be deleted ({}: {}); object lock retention or a legal hold protects it",
                    locked.key().unwrap_or_default(),
                    locked.code().unwrap_or_default(),
                    locked.message().unwrap_or_default()
                ));
                return Ok(round);
            }
            // A batch that deleted nothing would be listed again unchanged: let the caller retry later.
            if failures.len() as u64 == requested {
                return Ok(round);
            }
            // Rate limit: never get ahead of `max_per_second` since the round began.
            let due = Duration::from_secs_f64(round.deleted as f64 / f64::from(max_per_second));
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// Aborts one page of the incomplete multipart uploads of a bucket whose objects are gone,
    /// after the ownership check (a page: a store that lists aborted uploads again must not keep
    /// a round going forever).
    async fn abort_uploads(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        round: &mut DrainRound,
    ) -> Result<(), S3Error> {
        let page = metrics
            .backend_call(BACKEND, "list_multipart_uploads", async {
                self.client
                    .list_multipart_uploads()
                    .bucket(bucket)
                    .max_uploads(MAX_DELETE_BATCH as i32)
                    .send()
                    .await
                    .map_err(|e| classify("list_multipart_uploads", e))
            })
            .await?;
        let uploads: Vec<(String, String)> = page
            .uploads()
            .iter()
            .filter_map(|u| Some((u.key()?.to_string(), u.upload_id()?.to_string())))
            .collect();
        if uploads.is_empty() {
            return Ok(());
        }
        round.not_ours = self.not_owned_by(metrics, bucket, owner).await?;
        if round.not_ours.is_some() {
            return Ok(());
        }
        for (key, upload_id) in uploads {
            metrics
                .backend_call(BACKEND, "abort_multipart_upload", async {
                    match self
                        .client
                        .abort_multipart_upload()
                        .bucket(bucket)
                        .key(&key)
                        .upload_id(&upload_id)
                        .send()
                        .await
                    {
                        Ok(_) => Ok(()),
                        // Completed or aborted meanwhile: gone either way.
                        Err(e) if e.code() == Some("NoSuchUpload") => Ok(()),
                        Err(e) => Err(classify("abort_multipart_upload", e)),
                    }
                })
                .await?;
            round.aborted_uploads += 1;
        }
        Ok(())
    }
}
