//! When each object is reconciled again because its last reconcile asked for it ([`Next::Requeue`]:
//! a drain's next round, the hourly bucket check, a resync).
//!
//! kube's controller could keep these itself (`Action::requeue`), but it keeps each one as the
//! object's whole reference (name, namespace, uid, resourceVersion and why), twice: in its map and
//! in its timer queue: some 500 bytes an object by their layout. Here an object waits as its key
//! (`namespace/name`), one allocation shared by the map and the queue (10,000 StorageGRID
//! buckets waiting for their hourly check: peak resident memory 80.6 → 76.7 MiB, idle unchanged;
//! docs/development.md), and is handed to the controller when due
//! ([`Requeues::due`]), which reconciles it as if kube had requeued it. The retries after errors
//! ([`super::error_policy`]) and the waits for a long-lane turn, few at any time, stay with kube.
//!
//! [`Next::Requeue`]: super::Next::Requeue

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

/// The objects of one controller that wait to be reconciled again, by key.
#[derive(Default)]
pub struct Requeues(Mutex<Waiting>);

#[derive(Default)]
struct Waiting {
    queue: DelayQueue<Arc<str>>,
    keys: HashMap<Arc<str>, Key>,
}

impl Requeues {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the last reconcile of the object with `key` asked for: to be reconciled again
    /// `after` this long, or (`None`) only when it changes. Either replaces what an earlier
    /// reconcile asked for, as kube's own requeue would.
    pub fn set(&self, key: &str, after: Option<Duration>) {
        let mut waiting = self.lock();
        let waiting = &mut *waiting;
        // An object that waits already keeps its key's allocation: most reconciles ask again.
        let key = match waiting.keys.remove_entry(key) {
            Some((kept, queued)) => {
                waiting.queue.remove(&queued);
                kept
            }
            None => Arc::from(key),
        };
        if let Some(after) = after {
            // Inserting wakes the stream when this is now the first one due.
            let queued = waiting.queue.insert(key.clone(), after);
            waiting.keys.insert(key, queued);
        }
    }

    /// How long the object with `key` waits yet, if it waits.
    #[cfg(test)]
    pub fn waits(&self, key: &str) -> Option<Duration> {
        let waiting = self.lock();
        let queued = waiting.keys.get(key)?;
        let deadline = waiting.queue.deadline(queued);
        Some(deadline.saturating_duration_since(tokio::time::Instant::now()))
    }

    /// The objects whose time came, as the controller's trigger (`Controller::reconcile_on`).
    /// An object deleted meanwhile is not in the controller's cache, which drops its reference.
    pub fn due<K>(self: &Arc<Self>) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        let requeues = self.clone();
        futures::stream::poll_fn(move |cx| {
            let mut waiting = requeues.lock();
            match waiting.queue.poll_expired(cx) {
                Poll::Ready(Some(expired)) => {
                    let key = expired.into_inner();
                    waiting.keys.remove(&key);
                    Poll::Ready(Some(object_ref(&key)))
                }
                // An empty queue: the next `set` wakes this task (the queue kept its waker).
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            }
        })
    }
}

/// The reference `key` (`namespace/name`, or `/name` for a cluster-scoped object) stands for.
fn object_ref<K: Resource<DynamicType = ()>>(key: &str) -> ObjectRef<K> {
    match key.split_once('/') {
        None => ObjectRef::new(key),
        Some(("", name)) => ObjectRef::new(name),
        Some((namespace, name)) => ObjectRef::new(name).within(namespace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::S3Bucket;
    use futures::StreamExt;
    use std::time::Duration;
    use tokio::time::{Instant, timeout};

    const SECOND: Duration = Duration::from_secs(1);

    fn named(namespace: &str, name: &str) -> ObjectRef<S3Bucket> {
        ObjectRef::new(name).within(namespace)
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_is_handed_back_when_its_time_comes_not_before() {
        let requeues = Arc::new(Requeues::default());
        let mut due = Box::pin(requeues.due::<S3Bucket>());
        let start = Instant::now();
        requeues.set("ns/later", Some(3600 * SECOND));
        requeues.set("ns/soon", Some(10 * SECOND));
        assert_eq!(requeues.lock().keys.len(), 2);
        assert_eq!(due.next().await, Some(named("ns", "soon")));
        assert_eq!(start.elapsed(), 10 * SECOND);
        assert_eq!(due.next().await, Some(named("ns", "later")));
        assert_eq!(start.elapsed(), 3600 * SECOND);
        assert_eq!(requeues.lock().keys.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_reconcile_decides_when_an_object_comes_back() {
        let requeues = Arc::new(Requeues::default());
        let mut due = Box::pin(requeues.due::<S3Bucket>());
        let start = Instant::now();
        requeues.set("ns/a", Some(10 * SECOND));
        requeues.set("ns/a", Some(60 * SECOND));
        requeues.set("ns/b", Some(20 * SECOND));
        // b's last reconcile asked for nothing: it waits for a change.
        requeues.set("ns/b", None);
        assert_eq!(requeues.lock().keys.len(), 1);
        assert_eq!(due.next().await, Some(named("ns", "a")));
        assert_eq!(start.elapsed(), 60 * SECOND);
        assert!(
            timeout(3600 * SECOND, due.next()).await.is_err(),
            "b came back without asking"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_time_set_while_the_stream_waits_wakes_it() {
        let requeues = Arc::new(Requeues::default());
        let due = requeues.due::<S3Bucket>();
        let waiting = tokio::spawn(async move { Box::pin(due).next().await });
        tokio::task::yield_now().await;
        let start = Instant::now();
        requeues.set("ns/late", Some(3600 * SECOND));
        tokio::task::yield_now().await;
        requeues.set("ns/early", Some(5 * SECOND));
        assert_eq!(waiting.await.unwrap(), Some(named("ns", "early")));
        assert_eq!(start.elapsed(), 5 * SECOND);
    }

    #[test]
    fn a_key_names_its_object() {
        assert_eq!(object_ref::<S3Bucket>("ns/b"), named("ns", "b"));
        assert_eq!(
            object_ref::<S3Bucket>("/cluster-wide"),
            ObjectRef::new("cluster-wide")
        );
    }
}
