use super::*;
use k8s_openapi::api::core::v1::ConfigMap;

fn map(namespace: &str, name: &str, value: &str) -> Guarded<ConfigMap> {
    DeserializeGuard(Ok(crate::cluster::informer::tests::map_in(
        namespace, name, value,
    )))
}

fn broken(namespace: &str, name: &str) -> Guarded<ConfigMap> {
    DeserializeGuard(Err(InvalidObject {
        error: "broken".into(),
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
    }))
}

/// An object as `ns/name=value`, or `ns/name!` when it does not decode.
fn show(obj: &Guarded<ConfigMap>) -> String {
    let meta = meta(obj);
    let key = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    match &obj.0 {
        Ok(map) => format!("{key}={}", map.data.as_ref().unwrap()["v"]),
        Err(_) => format!("{key}!"),
    }
}

fn shown(events: Vec<Event<Guarded<ConfigMap>>>) -> Vec<String> {
    events
        .iter()
        .map(|event| match event {
            Event::Init => "Init".to_string(),
            Event::InitApply(obj) => format!("InitApply {}", show(obj)),
            Event::Apply(obj) => format!("Apply {}", show(obj)),
            Event::Delete(obj) => format!("Delete {}", show(obj)),
            Event::InitDone => "InitDone".to_string(),
        })
        .collect()
}

fn merge() -> Merge<ConfigMap> {
    Merge::new(&["a".to_string(), "b".to_string()])
}

#[test]
fn the_first_listing_comes_once_every_namespace_has_listed_in_whatever_order() {
    let mut merge = merge();
    let mut out = Vec::new();
    for (ns, event) in [
        ("a", Event::Init),
        ("b", Event::Init),
        ("a", Event::InitApply(map("a", "x", "1"))),
        ("b", Event::InitApply(map("b", "y", "1"))),
        ("a", Event::InitApply(map("a", "z", "1"))),
        ("a", Event::InitDone),
        // a's watch goes on while b still lists.
        ("a", Event::Apply(map("a", "x", "2"))),
        ("a", Event::Delete(map("a", "z", "1"))),
        ("a", Event::Apply(map("a", "n", "1"))),
    ] {
        out.extend(merge.push(ns, event));
    }
    assert!(
        out.is_empty(),
        "nothing before b has listed: {:?}",
        shown(out)
    );
    // b's watch was cut during its first listing and starts over.
    assert!(merge.push("b", Event::Init).is_empty());
    assert!(
        merge
            .push("b", Event::InitApply(map("b", "w", "1")))
            .is_empty()
    );
    assert_eq!(
        shown(merge.push("b", Event::InitDone)),
        [
            "Init",
            "InitApply a/n=1",
            "InitApply a/x=2",
            "InitApply b/w=1",
            "InitDone"
        ]
    );
    // From then on changes pass through.
    assert_eq!(
        shown(merge.push("b", Event::Apply(map("b", "w", "2")))),
        ["Apply b/w=2"]
    );
    assert_eq!(
        shown(merge.push("a", Event::Delete(map("a", "n", "1")))),
        ["Delete a/n=1"]
    );
}

#[test]
fn a_relist_of_one_namespace_applies_what_it_lists_and_deletes_what_it_no_longer_lists() {
    let mut merge = merge();
    for ns in ["a", "b"] {
        merge.push(ns, Event::Init);
        merge.push(ns, Event::InitApply(map(ns, "x", "1")));
        merge.push(ns, Event::InitApply(map(ns, "y", "1")));
        merge.push(ns, Event::InitDone);
    }
    merge.push("a", Event::Apply(map("a", "later", "1")));
    // a's watch was cut: x changed, y and later were deleted meanwhile. Nothing of b is touched.
    let mut out = merge.push("a", Event::Init);
    out.extend(merge.push("a", Event::InitApply(map("a", "x", "2"))));
    out.extend(merge.push("a", Event::InitDone));
    assert_eq!(
        shown(out),
        ["Apply a/x=2", "Delete a/later!", "Delete a/y!"],
        "the deletes go by key, as objects that carry only their metadata"
    );
    // What the relist listed is known: a later relist that drops it deletes it.
    let mut out = merge.push("a", Event::Init);
    out.extend(merge.push("a", Event::InitDone));
    assert_eq!(shown(out), ["Delete a/x!"]);
}

#[test]
fn an_undecodable_object_is_passed_on_as_it_is_and_deleted_when_a_relist_drops_it() {
    let mut merge = merge();
    merge.push("a", Event::Init);
    merge.push("a", Event::InitApply(broken("a", "bad")));
    merge.push("a", Event::InitApply(map("a", "good", "1")));
    merge.push("a", Event::InitDone);
    merge.push("b", Event::Init);
    assert_eq!(
        shown(merge.push("b", Event::InitDone)),
        ["Init", "InitApply a/bad!", "InitApply a/good=1", "InitDone"]
    );
    assert_eq!(
        shown(merge.push("a", Event::Apply(broken("a", "good")))),
        ["Apply a/good!"]
    );
    let mut out = merge.push("a", Event::Init);
    out.extend(merge.push("a", Event::InitApply(broken("a", "good"))));
    out.extend(merge.push("a", Event::InitDone));
    assert_eq!(shown(out), ["Apply a/good!", "Delete a/bad!"]);
}
