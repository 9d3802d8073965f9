use super::*;
use crate::cluster::cached::LAST_APPLIED;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::runtime::watcher::Event;

fn map(name: &str, value: &str) -> ConfigMap {
    map_in("ns", name, value)
}

pub(super) fn map_in(namespace: &str, name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        data: Some([("v".to_string(), value.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// The watch events a test feeds its informer, as the API sends them.
struct Feed(mpsc::UnboundedSender<Result<Event<DeserializeGuard<ConfigMap>>, watcher::Error>>);

impl Feed {
    /// An event of objects that decode.
    fn send(&self, event: Event<ConfigMap>) {
        let guarded = match event {
            Event::Init => Event::Init,
            Event::InitDone => Event::InitDone,
            Event::InitApply(obj) => Event::InitApply(DeserializeGuard(Ok(obj))),
            Event::Apply(obj) => Event::Apply(DeserializeGuard(Ok(obj))),
            Event::Delete(obj) => Event::Delete(DeserializeGuard(Ok(obj))),
        };
        self.0.send(Ok(guarded)).unwrap();
    }

    /// An event of an object `name` that does not decode.
    fn send_invalid(
        &self,
        event: fn(DeserializeGuard<ConfigMap>) -> Event<DeserializeGuard<ConfigMap>>,
        name: &str,
    ) {
        self.send_invalid_in("ns", event, name);
    }

    /// An event of an object `namespace/name` that does not decode.
    fn send_invalid_in(
        &self,
        namespace: &str,
        event: fn(DeserializeGuard<ConfigMap>) -> Event<DeserializeGuard<ConfigMap>>,
        name: &str,
    ) {
        let invalid = InvalidObject {
            error: format!("{name} is broken"),
            metadata: map_in(namespace, name, "").metadata,
        };
        self.0
            .send(Ok(event(DeserializeGuard(Err(invalid)))))
            .unwrap();
    }
}

impl Feed {
    /// A (re)list of `objects`.
    fn list(&self, objects: impl IntoIterator<Item = ConfigMap>) {
        self.send(Event::Init);
        for obj in objects {
            self.send(Event::InitApply(obj));
        }
        self.send(Event::InitDone);
    }
}

fn feed() -> (Feed, WatchEvents<ConfigMap>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let events = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (Feed(tx), events.boxed())
}

fn informer() -> (Feed, Informer<ConfigMap>) {
    let (feed, events) = feed();
    (feed, Informer::over(events))
}

/// What a subscriber hears, as `+name=value` / `-name`, and whether the store agreed at the
/// moment it heard it (an applied object stored, a deleted one gone).
async fn next(
    changes: &mut (impl Stream<Item = Change<ConfigMap>> + Unpin),
    store: &Store<ConfigMap>,
) -> String {
    let change = tokio::time::timeout(std::time::Duration::from_secs(5), changes.next())
        .await
        .expect("a change within 5 s")
        .expect("the stream goes on");
    let obj = change.object();
    let stored = store.get(&ObjectRef::from_obj(&**obj));
    let name = obj.metadata.name.clone().unwrap();
    match &change {
        Change::Applied(_) => {
            assert_eq!(
                stored.as_deref(),
                Some(&**obj),
                "stored before it is heard of"
            );
            format!("+{name}={}", obj.data.as_ref().unwrap()["v"])
        }
        Change::Deleted(_) => {
            assert!(
                stored.is_none(),
                "gone from the store before it is heard of"
            );
            format!("-{name}")
        }
    }
}

#[tokio::test]
async fn subscribers_hear_of_each_change_after_the_store_has_it() {
    let (feed, informer) = informer();
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    feed.list([map("a", "1")]);
    assert_eq!(next(&mut changes, &store).await, "+a=1");
    assert!(informer.synced());
    feed.send(Event::Apply(map("a", "2")));
    assert_eq!(next(&mut changes, &store).await, "+a=2");
    feed.send(Event::Delete(map("a", "2")));
    assert_eq!(next(&mut changes, &store).await, "-a");
}

#[tokio::test]
async fn a_relist_reports_what_it_no_longer_finds_as_deleted() {
    let (feed, informer) = informer();
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    feed.list([map("a", "1"), map("b", "1")]);
    let mut first = vec![
        next(&mut changes, &store).await,
        next(&mut changes, &store).await,
    ];
    first.sort();
    assert_eq!(first, ["+a=1", "+b=1"]);
    // The watch was cut; a was deleted meanwhile and b changed.
    feed.list([map("b", "2")]);
    assert_eq!(next(&mut changes, &store).await, "-a");
    assert_eq!(next(&mut changes, &store).await, "+b=2");
}

#[tokio::test]
async fn a_late_subscriber_first_hears_of_every_cached_object() {
    let (feed, informer) = informer();
    let mut early = Box::pin(informer.changes());
    feed.list([map("a", "1")]);
    let store = informer.store();
    assert_eq!(next(&mut early, &store).await, "+a=1");
    let mut late = Box::pin(informer.changes());
    assert_eq!(next(&mut late, &store).await, "+a=1");
    feed.send(Event::Apply(map("b", "1")));
    assert_eq!(next(&mut late, &store).await, "+b=1");
    assert_eq!(next(&mut early, &store).await, "+b=1");
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_holds_the_watch_back_instead_of_a_growing_queue() {
    let (feed, informer) = informer();
    let mut slow = Box::pin(informer.changes());
    let store = informer.store();
    feed.list([]);
    let total = SUBSCRIBER_BUFFER * 3;
    for i in 0..total {
        feed.send(Event::Apply(map(&format!("m{i}"), "1")));
    }
    // Nothing read yet: the watch stops once the buffer is full (plus the one change being
    // sent and the one the store took before it).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stored = store.state().len();
    assert!(
        stored <= SUBSCRIBER_BUFFER + 2,
        "{stored} of {total} taken with nobody reading"
    );
    // Reading lets it go on; every change is heard, in order.
    for i in 0..total {
        let change = tokio::time::timeout(std::time::Duration::from_secs(5), slow.next())
            .await
            .expect("a change within 5 s")
            .expect("the stream goes on");
        assert_eq!(
            change.object().metadata.name.as_deref(),
            Some(format!("m{i}").as_str())
        );
    }
    assert_eq!(store.state().len(), total);
    // A subscriber that goes away is dropped, and holds nothing back.
    drop(slow);
    feed.send(Event::Apply(map("after", "1")));
    let mut late = Box::pin(informer.changes());
    let mut heard = 0;
    while let Ok(Some(_)) =
        tokio::time::timeout(std::time::Duration::from_millis(500), late.next()).await
    {
        heard += 1;
    }
    assert_eq!(
        heard,
        total + 1,
        "the late subscriber hears every cached object"
    );
}

#[tokio::test]
async fn cached_objects_keep_neither_managed_fields_nor_the_last_applied_configuration() {
    let (feed, informer) = informer();
    let mut changes = Box::pin(informer.changes());
    let mut obj = map("a", "1");
    obj.metadata.managed_fields = Some(vec![Default::default()]);
    obj.metadata.annotations = Some(
        [
            (LAST_APPLIED.to_string(), "{...}".to_string()),
            ("keep".to_string(), "me".to_string()),
        ]
        .into(),
    );
    feed.list([obj]);
    next(&mut changes, &informer.store()).await;
    let stored = informer.store().state().pop().unwrap();
    assert_eq!(stored.metadata.managed_fields, None);
    assert_eq!(
        stored.metadata.annotations,
        Some([("keep".to_string(), "me".to_string())].into())
    );
}

/// The names of the undecodable objects a subscriber to [`Informer::invalid`] hears of within
/// 200 ms.
async fn invalid_now(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut invalid = Box::pin(informer.invalid());
    let mut names = Vec::new();
    while let Ok(Some(obj)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), invalid.next()).await
    {
        names.push(obj.metadata.name.unwrap_or_default());
    }
    names
}

#[tokio::test]
async fn an_undecodable_object_is_held_apart_and_the_others_go_on() {
    let (feed, informer) = informer();
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    feed.send(Event::Init);
    feed.send_invalid(Event::InitApply, "bad");
    feed.send(Event::InitApply(map("good", "1")));
    feed.send(Event::InitDone);
    assert_eq!(next(&mut changes, &store).await, "+good=1");
    assert!(informer.synced());
    assert_eq!(
        store.state().len(),
        1,
        "the undecodable object is not cached"
    );
    let mut invalid = Box::pin(informer.invalid());
    let held = invalid.next().await.unwrap();
    assert_eq!(held.metadata.name.as_deref(), Some("bad"));
    assert_eq!(held.error, "bad is broken");
    // It is heard of again when it changes and still does not decode.
    feed.send_invalid(Event::Apply, "bad");
    let again = tokio::time::timeout(std::time::Duration::from_secs(5), invalid.next())
        .await
        .expect("heard of within 5 s");
    assert_eq!(again.unwrap().metadata.name.as_deref(), Some("bad"));
}

#[tokio::test]
async fn an_object_that_stops_decoding_leaves_the_store_until_it_decodes_again() {
    let (feed, informer) = informer();
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    feed.list([map("a", "1")]);
    assert_eq!(next(&mut changes, &store).await, "+a=1");
    // Nothing may act on what the object no longer says.
    feed.send_invalid(Event::Apply, "a");
    assert_eq!(next(&mut changes, &store).await, "-a");
    assert_eq!(invalid_now(&informer).await, ["a"]);
    feed.send(Event::Apply(map("a", "2")));
    assert_eq!(next(&mut changes, &store).await, "+a=2");
    assert!(
        invalid_now(&informer).await.is_empty(),
        "released once it decodes"
    );
}

#[tokio::test]
async fn an_undecodable_object_deleted_or_gone_at_a_relist_is_released() {
    let (feed, informer) = informer();
    feed.list([]);
    feed.send_invalid(Event::Apply, "deleted");
    feed.send_invalid(Event::Apply, "gone");
    feed.send_invalid(Event::Apply, "kept");
    let mut held = invalid_now(&informer).await;
    held.sort();
    assert_eq!(held, ["deleted", "gone", "kept"]);
    feed.send_invalid(Event::Delete, "deleted");
    // The watch was cut; "gone" was deleted meanwhile.
    feed.send(Event::Init);
    feed.send_invalid(Event::InitApply, "kept");
    feed.send(Event::InitDone);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(invalid_now(&informer).await, ["kept"]);
    assert!(informer.store().state().is_empty());
}

/// What the store holds, as sorted `namespace/name=value`.
fn stored(store: &Store<ConfigMap>) -> Vec<String> {
    let mut held: Vec<String> = store
        .state()
        .iter()
        .map(|m| {
            format!(
                "{}/{}={}",
                m.metadata.namespace.as_deref().unwrap_or_default(),
                m.metadata.name.as_deref().unwrap_or_default(),
                m.data.as_ref().unwrap()["v"]
            )
        })
        .collect();
    held.sort();
    held
}

#[tokio::test]
async fn watches_of_several_namespaces_fill_one_store_and_one_namespaces_relist_leaves_the_others_alone()
 {
    let (a, a_events) = feed();
    let (b, b_events) = feed();
    let informer = Informer::over(merged([
        ("a".to_string(), a_events),
        ("b".to_string(), b_events),
    ]));
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    a.list([map_in("a", "x", "1"), map_in("a", "y", "1")]);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!informer.synced(), "not synced before b has listed");
    b.list([map_in("b", "x", "1")]);
    let mut first = Vec::new();
    for _ in 0..3 {
        first.push(next(&mut changes, &store).await);
    }
    first.sort();
    assert_eq!(first, ["+x=1", "+x=1", "+y=1"]);
    assert!(informer.synced());
    // a's watch was cut: y was deleted meanwhile and x changed; b keeps what it has.
    a.list([map_in("a", "x", "2")]);
    assert_eq!(next(&mut changes, &store).await, "+x=2");
    assert_eq!(next(&mut changes, &store).await, "-y");
    assert_eq!(stored(&store), ["a/x=2", "b/x=1"]);
    // An object that stops decoding in b leaves the store; gone at b's relist, it is released.
    b.send_invalid_in("b", Event::Apply, "x");
    assert_eq!(next(&mut changes, &store).await, "-x");
    assert_eq!(stored(&store), ["a/x=2"]);
    assert_eq!(invalid_now(&informer).await, ["x"]);
    b.list([]);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(invalid_now(&informer).await.is_empty());
    assert_eq!(stored(&store), ["a/x=2"]);
}

#[tokio::test]
async fn observers_are_told_of_a_change_before_any_subscriber_hears_of_it() {
    let (feed, informer) = informer();
    let observed = Arc::new(Mutex::new(Vec::new()));
    {
        let observed = observed.clone();
        informer.observe(move |change| {
            let name = change.object().metadata.name.clone().unwrap();
            let sign = if matches!(change, Change::Applied(_)) {
                '+'
            } else {
                '-'
            };
            observed.lock().unwrap().push(format!("{sign}{name}"));
        });
    }
    let mut changes = Box::pin(informer.changes());
    let store = informer.store();
    feed.list([map("a", "1")]);
    assert_eq!(next(&mut changes, &store).await, "+a=1");
    assert_eq!(*observed.lock().unwrap(), ["+a"]);
    feed.send(Event::Delete(map("a", "1")));
    assert_eq!(next(&mut changes, &store).await, "-a");
    assert_eq!(*observed.lock().unwrap(), ["+a", "-a"]);
}
