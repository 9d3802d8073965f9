//! Read-your-writes for the Secrets keeper writes. Reads come from the informer's cache, which
//! hears of a write some milliseconds after the API answered it: a reconcile right after a write
//! must see what it wrote, or it would generate a second password or key. So the seam keeps each
//! Secret it wrote until the cache has caught up with it.
//!
//! "Until" is kept exactly: the informer tells [`Written::cache_changed`] of every change of the
//! cached Secrets before any reconcile hears of it, and a write the cache already holds is not
//! kept at all. Kept only until the next read of the same Secret, a fleet's Secrets stayed for
//! the life of the process (a bucket reads its Secret on its next reconcile, often before the
//! cache has it, and a Ready bucket is not reconciled again for an hour): 11 MB at 2,000 buckets.
//! And a kept write hid a deletion by someone else: the seam read back the Secret it wrote.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::api::ObjectMeta;

use super::PackedSecret;
use super::cached::trim;
use super::informer::Change;

/// (namespace, name) of a Secret.
type Key = (String, String);

/// The Secrets keeper wrote that its cache has not caught up with yet.
#[derive(Default)]
pub(super) struct Written(Mutex<HashMap<Key, Secret>>);

/// A Secret's resourceVersion as a number: etcd's revision, which grows with every write (the
/// API calls it opaque; kube-apiserver on etcd, the only one keeper supports, makes it this).
pub(super) fn version(secret: &Secret) -> Option<u64> {
    version_of(&secret.metadata)
}

/// [`version`] of an object's metadata.
pub(super) fn version_of(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// Whether a cache that has seen version `seen` of a Secret holds keeper's write `ours` (or what
/// came after it).
fn caught_up(seen: Option<u64>, ours: &Secret) -> bool {
    seen.is_some_and(|seen| version(ours).is_some_and(|ours| seen >= ours))
}

fn key_of(meta: &ObjectMeta) -> Key {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl Written {
    /// keeper wrote `secret` (as the API answered). `cached_version` reads the version the cache
    /// holds now, called under the lock that [`Written::cache_changed`] takes, so that a change
    /// the cache heard of just before is not missed: a write the cache already has is not kept.
    pub fn wrote(&self, mut secret: Secret, cached_version: impl FnOnce() -> Option<u64>) {
        let mut written = self.0.lock().expect("written lock");
        let key = key_of(&secret.metadata);
        if caught_up(cached_version(), &secret) {
            written.remove(&key);
            return;
        }
        // What the cache would drop too: often larger than the Secret itself.
        trim(&mut secret);
        written.insert(key, secret);
    }

    /// keeper deleted the Secret: nothing of it is kept.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.0
            .lock()
            .expect("written lock")
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// The newer of `cached` (the cache's copy of `namespace/name`, or the API's where no cache
    /// holds it) and the one keeper wrote.
    pub fn fresher(&self, namespace: &str, name: &str, cached: Option<Secret>) -> Option<Secret> {
        let mut written = self.0.lock().expect("written lock");
        let key = (namespace.to_string(), name.to_string());
        let Some(ours) = written.get(&key) else {
            return cached;
        };
        if caught_up(cached.as_ref().and_then(version), ours) {
            written.remove(&key);
            cached
        } else {
            Some(ours.clone())
        }
    }

    /// The cache changed: a write it now holds, or that was deleted after it, is forgotten.
    pub fn cache_changed(&self, change: &Change<PackedSecret>) {
        let meta = change.object().meta();
        let mut written = self.0.lock().expect("written lock");
        let key = key_of(meta);
        if written
            .get(&key)
            .is_some_and(|ours| caught_up(version_of(meta), ours))
        {
            written.remove(&key);
        }
    }

    /// How many writes are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.0.lock().expect("written lock").len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::api::ObjectMeta;

    use super::*;

    fn secret(name: &str, version: u64) -> Secret {
        Secret {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some(name.into()),
                resource_version: Some(version.to_string()),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..ObjectMeta::default()
            },
            ..Secret::default()
        }
    }

    fn read(written: &Written, name: &str, cached: Option<Secret>) -> Option<String> {
        written
            .fresher("ns", name, cached)
            .and_then(|s| s.metadata.resource_version)
    }

    #[test]
    fn a_write_the_cache_has_not_seen_is_read_back_without_its_managed_fields() {
        let written = Written::default();
        written.wrote(secret("a", 10), || None);
        assert_eq!(read(&written, "a", None).as_deref(), Some("10"));
        assert_eq!(
            read(&written, "a", Some(secret("a", 9))).as_deref(),
            Some("10"),
            "the cache's older copy loses"
        );
        let kept = written.fresher("ns", "a", None).unwrap();
        assert_eq!(kept.metadata.managed_fields, None);
    }

    #[test]
    fn the_write_is_forgotten_once_the_cache_has_it_without_a_read() {
        let written = Written::default();
        written.wrote(secret("a", 10), || None);
        written.wrote(secret("b", 11), || None);
        written.cache_changed(&Change::Applied(Arc::new(PackedSecret::pack(secret(
            "a", 9,
        )))));
        assert_eq!(written.len(), 2, "an older version is not a catch-up");
        written.cache_changed(&Change::Applied(Arc::new(PackedSecret::pack(secret(
            "a", 10,
        )))));
        written.cache_changed(&Change::Applied(Arc::new(PackedSecret::pack(secret(
            "b", 12,
        )))));
        assert_eq!(written.len(), 0);
        // Someone deletes it later: the cache's answer stands.
        assert_eq!(read(&written, "a", None), None);
    }

    #[test]
    fn a_deletion_after_the_write_is_not_hidden() {
        let written = Written::default();
        written.wrote(secret("a", 10), || None);
        written.cache_changed(&Change::Deleted(Arc::new(PackedSecret::pack(secret(
            "a", 12,
        )))));
        assert_eq!(read(&written, "a", None), None);
    }

    #[test]
    fn a_write_the_cache_already_holds_is_not_kept() {
        let written = Written::default();
        written.wrote(secret("a", 10), || None);
        // The write after it reaches the cache before the API's answer reaches keeper.
        written.wrote(secret("a", 12), || Some(12));
        assert_eq!(written.len(), 0, "nor the older write");
        written.wrote(secret("a", 13), || Some(12));
        assert_eq!(written.len(), 1);
    }

    #[test]
    fn a_read_that_finds_the_cache_caught_up_forgets_the_write() {
        let written = Written::default();
        written.wrote(secret("a", 10), || None);
        assert_eq!(
            read(&written, "a", Some(secret("a", 10))).as_deref(),
            Some("10")
        );
        assert_eq!(written.len(), 0);
        written.wrote(secret("b", 10), || None);
        written.forget("ns", "b");
        assert_eq!(read(&written, "b", None), None);
    }
}
