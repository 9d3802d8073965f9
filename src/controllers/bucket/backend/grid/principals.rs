//! A bucket's principals on the grid: its group (named after the bucket, marked with the owning
//! S3Bucket, holding the bucket-only S3 policy) and its user (a member of the group, holding the
//! keys), and how a backend reads and writes them.

use std::sync::Mutex;

use super::StorageGrid;
use crate::backends::s3::OwnerMark;
use crate::backends::storagegrid;
use crate::controllers::bucket::backend::{DesiredBucket, Owner};
use crate::error::{BackendError, ErrorClass};

/// One of a bucket's principals (its group or its user) as a backend last read or wrote it. A
/// backend serves one reconcile, which converges the bucket ([`BucketBackend::ensure`]) and then
/// lists the user's keys ([`BucketBackend::user_keys`]) before it deletes or creates one, or
/// checks whose the bucket is before it deletes the bucket and its credentials: each step after
/// the first acts on the principal as the step before left it instead of reading it again. What
/// decides ownership ([`StorageGrid::looked_owner`]) always reads afresh.
///
/// [`BucketBackend::ensure`]: crate::controllers::bucket::backend::BucketBackend::ensure
/// [`BucketBackend::user_keys`]: crate::controllers::bucket::backend::BucketBackend::user_keys
pub(super) struct LastLook<T>(Mutex<Option<Box<T>>>);

impl<T: Principal> LastLook<T> {
    pub(super) fn keep(&self, look: Option<T>) {
        *self.0.lock().expect("not poisoned") = look.map(Box::new);
    }

    /// What `read` finds of the principal (`None`: not found), kept as the last look.
    async fn read(
        &self,
        read: impl Future<Output = Result<T, storagegrid::Error>>,
    ) -> Result<Option<T>, BackendError> {
        let look = found(read.await)?;
        self.keep(look.clone());
        Ok(look)
    }

    /// Bucket `bucket`'s principal as last looked at, if it was found then; else what `read`
    /// finds of it now.
    pub(super) async fn known(
        &self,
        bucket: &str,
        read: impl Future<Output = Result<T, storagegrid::Error>>,
    ) -> Result<Option<T>, BackendError> {
        let unique_name = format!("{}{}", T::KIND, principal_name(bucket));
        let last = self.0.lock().expect("not poisoned").clone();
        match last {
            Some(look) if look.unique_name() == unique_name => Ok(Some(*look)),
            _ => self.read(read).await,
        }
    }
}

impl<T> Default for LastLook<T> {
    fn default() -> Self {
        LastLook(Mutex::new(None))
    }
}

pub(super) trait Principal: Clone {
    /// What its unique name starts with.
    const KIND: &str;
    fn unique_name(&self) -> &str;
}

impl Principal for storagegrid::Group {
    const KIND: &str = "group/";
    fn unique_name(&self) -> &str {
        &self.unique_name
    }
}

impl Principal for storagegrid::User {
    const KIND: &str = "user/";
    fn unique_name(&self) -> &str {
        &self.unique_name
    }
}

/// Short name of the group and the user of a bucket (`group/keeper-<bucket>`, `user/keeper-<bucket>`).
fn principal_name(bucket: &str) -> String {
    format!("keeper-{bucket}")
}

const UID_MARKER: &str = " owner-uid=";
const OWNER_MARKER: &str = " owner=";

/// The display name of a bucket's group: `keeper bucket <bucket> owner=<ns>/<name> owner-uid=<uid>`
/// (an older keeper wrote the uid only, which is still read).
fn group_display_name(bucket: &str, owner: &OwnerMark) -> String {
    let who = match (&owner.namespace, &owner.name) {
        (Some(namespace), Some(name)) => format!("{OWNER_MARKER}{namespace}/{name}"),
        _ => String::new(),
    };
    format!("keeper bucket {bucket}{who}{UID_MARKER}{}", owner.uid)
}

/// The owner a group's display name names, if it carries keeper's mark.
fn mark_of(group: &storagegrid::Group) -> Option<OwnerMark> {
    let display = group.display_name.as_deref()?;
    let (head, uid) = display.rsplit_once(UID_MARKER)?;
    let (namespace, name) = match head.rsplit_once(OWNER_MARKER) {
        Some((_, who)) => who.split_once('/').map_or((None, None), |(ns, n)| {
            (Some(ns.to_string()), Some(n.to_string()))
        }),
        None => (None, None),
    };
    Some(OwnerMark {
        uid: uid.to_string(),
        namespace,
        name,
    })
}

/// `Ok(None)` for a 404, so callers can treat "not there" as a state.
pub(super) fn found<T>(
    result: Result<T, storagegrid::Error>,
) -> Result<Option<T>, storagegrid::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a bucket's keys may do with its objects: read, write, delete (versions too), tag and
/// multipart uploads. Nothing that changes the bucket itself or bypasses object lock.
const OBJECT_ACTIONS: [&str; 11] = [
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectTagging",
    "s3:GetObjectVersionTagging",
    "s3:PutObject",
    "s3:PutObjectTagging",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
    "s3:DeleteObjectTagging",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
];
/// What a bucket's keys may do with the bucket: list it (objects, versions, uploads) and find
/// its region. No DeleteBucket, no bucket policy, no versioning or lock configuration.
const BUCKET_ACTIONS: [&str; 4] = [
    "s3:ListBucket",
    "s3:ListBucketVersions",
    "s3:ListBucketMultipartUploads",
    "s3:GetBucketLocation",
];

/// The group of a bucket: the bucket's objects only (least privilege, no `s3:*`), no
/// management rights.
fn bucket_group(bucket: &str, owner: &OwnerMark) -> storagegrid::NewGroup {
    storagegrid::NewGroup {
        unique_name: format!("group/{}", principal_name(bucket)),
        display_name: group_display_name(bucket, owner),
        management_read_only: false,
        policies: storagegrid::GroupPolicies {
            management: storagegrid::ManagementPolicy::default(),
            s3: Some(serde_json::json!({
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Action": OBJECT_ACTIONS,
                        "Resource": [format!("arn:aws:s3:::{bucket}/*")],
                    },
                    {
                        "Effect": "Allow",
                        "Action": BUCKET_ACTIONS,
                        "Resource": [format!("arn:aws:s3:::{bucket}")],
                    },
                ]
            })),
        },
    }
}

impl StorageGrid {
    pub(super) async fn group(
        &self,
        bucket: &str,
    ) -> Result<Option<storagegrid::Group>, BackendError> {
        self.group.read(self.read_group(bucket)).await
    }

    pub(super) async fn read_group(
        &self,
        bucket: &str,
    ) -> Result<storagegrid::Group, storagegrid::Error> {
        let name = principal_name(bucket);
        self.client.get_group_by_name(&self.tenant, &name).await
    }

    /// Creates the bucket's group, or brings an existing one of this owner (or an unmarked one
    /// being adopted) to the current mark and policy. `looked` is the group as the caller just
    /// read it to check that no other S3Bucket's mark is on it ([`Self::taken`]): the check and
    /// the write act on the same look, and the group is not read twice.
    pub(super) async fn mark(
        &self,
        desired: &DesiredBucket,
        looked: Option<storagegrid::Group>,
    ) -> Result<(), BackendError> {
        let wanted = bucket_group(&desired.name, &desired.owner);
        let marked = match looked {
            Some(group)
                if group.display_name.as_deref() == Some(wanted.display_name.as_str())
                    && group.policies.as_ref() == Some(&wanted.policies) =>
            {
                group
            }
            Some(group) => {
                self.client
                    .update_group(&self.tenant, &group.id, &wanted)
                    .await?
            }
            None => match self.client.create_group(&self.tenant, &wanted).await {
                Ok(group) => group,
                // Another writer (a second keeper) created it since the look: whose it is is
                // checked again by the next look, before anything is done with it.
                Err(e) if self.group(&desired.name).await?.is_some() => {
                    return Err(BackendError::new(
                        "storagegrid",
                        "create_group",
                        ErrorClass::Conflict,
                        "CreatedMeanwhile",
                        format!("{e}; it was created meanwhile: looking again"),
                    ));
                }
                Err(e) => return Err(e.into()),
            },
        };
        self.group.keep(Some(marked));
        Ok(())
    }

    /// Who owns the bucket (see [`Owner`]), with its group as looked at for that (`None` when
    /// the bucket is missing: its group is then not looked at).
    pub(super) async fn looked_owner(
        &self,
        desired: &DesiredBucket,
    ) -> Result<(Owner, Option<storagegrid::Group>), BackendError> {
        if self.container(&desired.name).await?.is_none() {
            return Ok((Owner::Missing, None));
        }
        let group = self.group(&desired.name).await?;
        if let Some(taken) = Self::taken(desired, group.as_ref()) {
            return Ok((taken, group));
        }
        // Not another's: ours if the mark is ours, or if status records that we created it (a
        // bucket whose group is gone or predates the mark).
        let marked = group.as_ref().and_then(mark_of).is_some();
        let owner = if marked || desired.recorded {
            Owner::Us
        } else {
            Owner::Unmarked(format!(
                "bucket {:?} exists in the tenant and was not created by keeper",
                desired.name
            ))
        };
        Ok((owner, group))
    }

    /// Why the bucket's group belongs to another S3Bucket, if it does: its mark names another
    /// uid. Such a group (and its user, whose keys another Secret holds) is never re-pointed.
    pub(super) fn taken(
        desired: &DesiredBucket,
        group: Option<&storagegrid::Group>,
    ) -> Option<Owner> {
        let mark = group.and_then(mark_of)?;
        (!mark.same_owner(&desired.owner)).then(|| {
            Owner::Taken(format!(
                "bucket {:?} belongs to {} (the display name of group {:?} says so)",
                desired.name,
                mark.describe(),
                principal_name(&desired.name)
            ))
        })
    }

    /// The bucket's user, if it exists.
    pub(super) async fn find_user(
        &self,
        bucket: &str,
    ) -> Result<Option<storagegrid::User>, BackendError> {
        self.user.read(self.read_user(bucket)).await
    }

    pub(super) async fn read_user(
        &self,
        bucket: &str,
    ) -> Result<storagegrid::User, storagegrid::Error> {
        let name = principal_name(bucket);
        self.client.get_user_by_name(&self.tenant, &name).await
    }

    /// The bucket's user, created in its group when missing.
    pub(super) async fn user(
        &self,
        bucket: &str,
        group: &storagegrid::Group,
    ) -> Result<storagegrid::User, BackendError> {
        if let Some(user) = self.find_user(bucket).await? {
            return Ok(user);
        }
        let name = principal_name(bucket);
        let created = self
            .client
            .create_user(
                &self.tenant,
                &storagegrid::NewUser {
                    unique_name: format!("user/{name}"),
                    full_name: format!("keeper bucket {bucket}"),
                    member_of: vec![group.id.clone()],
                    disable: false,
                },
            )
            .await;
        match created {
            Ok(user) => {
                self.user.keep(Some(user.clone()));
                Ok(user)
            }
            // Another writer (a second keeper) created it since the look, for this bucket's group.
            Err(e) => self.find_user(bucket).await?.ok_or_else(|| e.into()),
        }
    }
}
