//! The store's side of a drain: a bucket as a [`Target`] over the S3 SDK, and the store's usage
//! and drain calls.

use super::*;

/// A bucket of a store, as the drain pipeline sees it.
pub(super) struct Bucket<'a> {
    store: &'a S3Store,
    metrics: &'a Metrics,
    name: &'a str,
    owner: Option<&'a OwnerMark>,
}

impl Target for Bucket<'_> {
    async fn list(
        &self,
        listing: Listing,
        from: &Cursor,
        max_keys: usize,
    ) -> Result<Page, S3Error> {
        let max_keys = i32::try_from(max_keys).unwrap_or(i32::MAX);
        let (key, version) = match from {
            Cursor::Start => (None, None),
            Cursor::After { key, version } => (Some(key.clone()), version.clone()),
        };
        let operation = listing.operation();
        let page = self
            .store
            .call(self.metrics, operation, async {
                match listing {
                    Listing::Objects => {
                        let out = self
                            .store
                            .client
                            .list_objects_v2()
                            .bucket(self.name)
                            .max_keys(max_keys)
                            .set_start_after(key)
                            .send()
                            .await
                            .map_err(|e| classify(operation, e))?;
                        let entries: Vec<Entry> = out
                            .contents()
                            .iter()
                            .filter_map(|o| {
                                Some(Entry {
                                    key: o.key()?.to_string(),
                                    version: None,
                                })
                            })
                            .collect();
                        // `start-after` a key works whatever happened to that key since.
                        let next = out.is_truncated().unwrap_or(false).then(|| Cursor::After {
                            key: entries.last().map(|e| e.key.clone()).unwrap_or_default(),
                            version: None,
                        });
                        Ok(Page {
                            bytes: out.contents().iter().filter_map(|o| o.size()).sum(),
                            entries,
                            next,
                        })
                    }
                    Listing::Versions => {
                        let out = self
                            .store
                            .client
                            .list_object_versions()
                            .bucket(self.name)
                            .max_keys(max_keys)
                            .set_key_marker(key)
                            .set_version_id_marker(version)
                            .send()
                            .await
                            .map_err(|e| classify(operation, e))?;
                        let entries = out
                            .versions()
                            .iter()
                            .map(|v| (v.key(), v.version_id()))
                            .chain(
                                out.delete_markers()
                                    .iter()
                                    .map(|m| (m.key(), m.version_id())),
                            )
                            .filter_map(|(key, version)| {
                                Some(Entry {
                                    key: key?.to_string(),
                                    version: version.map(str::to_string),
                                })
                            })
                            .collect();
                        let next = out.is_truncated().unwrap_or(false).then(|| Cursor::After {
                            key: out.next_key_marker().unwrap_or_default().to_string(),
                            version: out.next_version_id_marker().map(str::to_string),
                        });
                        Ok(Page {
                            bytes: out.versions().iter().filter_map(|v| v.size()).sum(),
                            entries,
                            next,
                        })
                    }
                }
            })
            .await?;
        // A truncated page must say where to go on, and somewhere new: a store that repeats its
        // marker would be listed forever.
        if let Some(Cursor::After { key, .. }) = &page.next
            && (key.is_empty() || page.next.as_ref() == Some(from))
        {
            return Err(S3Error {
                operation,
                class: ErrorClass::Permanent,
                code: "RepeatedContinuationMarker".to_string(),
                message: format!(
                    "the store answered a truncated listing of bucket {} without a new continuation marker ({key:?}); it does not page correctly",
                    self.name
                ),
            });
        }
        Ok(page)
    }

    async fn not_owned(&self) -> Result<Option<String>, S3Error> {
        let Some(owner) = self.owner else {
            return Ok(None);
        };
        self.store
            .not_owned_by(self.metrics, self.name, owner)
            .await
    }

    async fn delete(&self, batch: Vec<Entry>) -> Result<Vec<KeyFailure>, S3Error> {
        let ids = batch
            .into_iter()
            .map(|e| {
                ObjectIdentifier::builder()
                    .key(e.key)
                    .set_version_id(e.version)
                    .build()
                    .expect("key is set")
            })
            .collect();
        let delete = Delete::builder()
            .set_objects(Some(ids))
            .quiet(true)
            .build()
            .expect("objects are set");
        let out = self
            .store
            .call(self.metrics, "delete_objects", async {
                self.store
                    .client
                    .delete_objects()
                    .bucket(self.name)
                    .delete(delete)
                    .send()
                    .await
                    .map_err(|e| classify("delete_objects", e))
            })
            .await?;
        // Quiet mode reports only failures; everything else was deleted.
        Ok(out
            .errors()
            .iter()
            .map(|f| KeyFailure {
                key: f.key().unwrap_or_default().to_string(),
                code: f.code().unwrap_or("Unknown").to_string(),
                message: f.message().unwrap_or_default().to_string(),
            })
            .collect())
    }
}

impl S3Store {
    /// The bucket's versioning state; `Ok(None)` when the bucket does not exist.
    pub(super) async fn versioning_if_exists(
        &self,
        metrics: &Metrics,
        bucket: &str,
    ) -> Result<Option<Versioning>, S3Error> {
        match self.versioning(metrics, bucket).await {
            Ok(versioning) => Ok(Some(versioning)),
            Err(e) if e.code == "NoSuchBucket" => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Counts versions and delete markers (with the cheapest listing for the bucket's versioning
    /// state), listing at most about `max_entries` of them so that a bucket with millions of
    /// objects costs a bounded number of requests. `Ok(None)` when the bucket does not exist.
    pub async fn usage(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        self.count(metrics, bucket, max_entries, false).await
    }

    /// As [`S3Store::usage`], for a drain about to start: the entries listed are kept (in memory,
    /// for a few minutes, within [`COUNTED_BYTES`]) for the drain's first rounds, which then
    /// delete them without listing the bucket again.
    pub async fn count_for_drain(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
    ) -> Result<Option<Usage>, S3Error> {
        self.count(metrics, bucket, max_entries, true).await
    }

    /// Drops the entries kept for a drain of `bucket` (it ended, or was canceled).
    pub fn forget_counted(&self, bucket: &str) {
        self.counted
            .lock()
            .expect("counted entries lock")
            .forget(bucket);
    }

    pub(super) async fn count(
        &self,
        metrics: &Metrics,
        bucket: &str,
        max_entries: i64,
        for_drain: bool,
    ) -> Result<Option<Usage>, S3Error> {
        let Some(versioning) = self.versioning_if_exists(metrics, bucket).await? else {
            self.forget_counted(bucket);
            return Ok(None);
        };
        let listing = Listing::for_versioning(versioning);
        let target = Bucket {
            store: self,
            metrics,
            name: bucket,
            owner: None,
        };
        let mut usage = Usage::default();
        let mut cursor = Cursor::Start;
        // What a drain may delete without listing again, within the memory it may take.
        let mut listed = VecDeque::new();
        let mut listed_bytes = 0;
        let mut keep = for_drain;
        loop {
            // Ask for what is left to count: S3 gives 1,000 a page, some stores give more.
            let wanted = usize::try_from(max_entries - usage.objects)
                .unwrap_or_default()
                .max(MAX_DELETE_BATCH);
            let page = match target.list(listing, &cursor, wanted).await {
                Ok(page) => page,
                Err(e) if e.code == "NoSuchBucket" => {
                    self.forget_counted(bucket);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            usage.objects += page.entries.len() as i64;
            usage.bytes += page.bytes;
            if keep {
                listed_bytes += page.entries.iter().map(entry_bytes).sum::<usize>();
                // The entries beyond the bound are listed again by the drain.
                keep = listed_bytes <= COUNTED_BYTES;
                listed.extend(page.entries);
            }
            usage.complete = page.next.is_none();
            match page.next {
                Some(next) if usage.objects < max_entries => cursor = next,
                _ => break,
            }
        }
        // In place of an earlier count's, even when nothing is listed.
        if for_drain {
            self.counted.lock().expect("counted entries lock").keep(
                bucket,
                listing,
                listed,
                Instant::now(),
            );
        }
        Ok(Some(usage))
    }

    /// Why the bucket is not `owner`'s, or `None` when its mark names `owner`. Checked right
    /// before each delete batch: a bucket re-tagged (or re-created by someone else) while a
    /// drain runs loses not one more object.
    pub(super) async fn not_owned_by(
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

    /// Deletes versions and delete markers for about `pace.budget` (at least one batch), see
    /// [`run_round`], then, once nothing is left, aborts incomplete multipart uploads (their
    /// parts hold data and keep some stores from deleting the bucket). Each batch first checks
    /// that the bucket still carries `owner`'s mark.
    pub async fn drain_round(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        pace: &DrainPace,
    ) -> Result<DrainRound, S3Error> {
        let listing = Listing::for_versioning(self.versioning(metrics, bucket).await?);
        let target = Bucket {
            store: self,
            metrics,
            name: bucket,
            owner: Some(owner),
        };
        let mut counted = self.counted.lock().expect("counted entries lock").take(
            bucket,
            listing,
            Instant::now(),
        );
        let mut round = run_round(&target, listing, pace, &mut counted).await;
        // What is left of the count is for the next round, unless the drain must stop.
        if round.blocked.is_none() && round.not_ours.is_none() {
            self.counted.lock().expect("counted entries lock").keep(
                bucket,
                listing,
                counted,
                Instant::now(),
            );
        }
        if round.empty {
            self.abort_uploads(metrics, bucket, owner, &mut round)
                .await?;
            // Aborted uploads are listed again by the next round, which then finds none.
            round.empty = round.not_ours.is_none() && round.aborted_uploads == 0;
        }
        Ok(round)
    }

    /// Aborts one page of the incomplete multipart uploads of a bucket whose objects are gone,
    /// after the ownership check (a page: a store that lists aborted uploads again must not keep
    /// a round going forever).
    pub(super) async fn abort_uploads(
        &self,
        metrics: &Metrics,
        bucket: &str,
        owner: &OwnerMark,
        round: &mut DrainRound,
    ) -> Result<(), S3Error> {
        let page = self
            .call(metrics, "list_multipart_uploads", async {
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
            self.call(metrics, "abort_multipart_upload", async {
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
