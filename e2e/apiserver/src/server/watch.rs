//! Watches: history replay, initial events, bookmarks, selector transitions and timeouts.

use super::*;

fn watch_line(ty: &str, obj: Value) -> Bytes {
    let mut v = serde_json::to_vec(&json!({"type": ty, "object": obj})).unwrap_or_default();
    v.push(b'\n');
    Bytes::from(v)
}

pub(super) fn watch(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let def = t.def.clone();
    let rv_param = ctx.q("resourceVersion").unwrap_or("").to_string();
    let bookmarks = matches!(ctx.q("allowWatchBookmarks"), Some("true" | "1"));
    let send_initial = matches!(ctx.q("sendInitialEvents"), Some("true" | "1"));
    let timeout = ctx
        .q("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    // An injected cut (crate::faults) ends the watch earlier than the client asked.
    let cut = ctx.watch_cut;
    let timeout = match (timeout, cut.and_then(|c| c.after)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut events_left = cut.and_then(|c| c.after_events).unwrap_or(u64::MAX);
    let want = want(&ctx.headers);
    let include = ctx.q("includeObject").unwrap_or("Metadata").to_string();
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut first: Vec<(String, Value)> = Vec::new();
    let (mut brx, start_rv, gone) = {
        let st = shared.lock();
        let brx = st.tx.subscribe();
        let mut gone = None;
        if rv_param.is_empty() || rv_param == "0" || send_initial {
            for (_, obj) in st.lookup(&def.store_key, &filter.lookup(None)) {
                if filter.matches(obj) {
                    first.push(("ADDED".into(), view(&def, obj)));
                }
            }
        } else {
            let req: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            if req < st.compacted {
                gone = Some(req);
            } else {
                for c in st.changes_since(req) {
                    if let Some(ev) = translate(&def, &filter, c) {
                        first.push(ev);
                    }
                }
            }
        }
        let compacted = st.compacted;
        (brx, st.rv, gone.map(|r| (r, compacted)))
    };
    let interval = shared.config.bookmark_interval;
    tokio::spawn(async move {
        let mut headers_sent = false;
        let mut render = |ty: &str, obj: Value| -> Bytes {
            match want {
                Want::Table if ty != "ERROR" && ty != "BOOKMARK" => {
                    let t = table::table(&def, &[obj], &include, !headers_sent, json!({}));
                    headers_sent = true;
                    watch_line(ty, t)
                }
                Want::Meta if ty != "ERROR" && ty != "BOOKMARK" => watch_line(
                    ty,
                    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}),
                ),
                _ => watch_line(ty, obj),
            }
        };
        let bookmark = |rv: u64, initial_end: bool| -> Value {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if initial_end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta})
        };
        if let Some((req, compacted)) = gone {
            let e = ApiError::gone(format!(
                "too old resource version: {req} ({})",
                compacted + 1
            ));
            let _ = tx.send(render("ERROR", e.to_status())).await;
            return;
        }
        if events_left == 0 {
            return;
        }
        for (ty, obj) in first {
            if tx.send(render(&ty, obj)).await.is_err() {
                return;
            }
            events_left -= 1;
            if events_left == 0 {
                return;
            }
        }
        let mut progress = start_rv;
        if send_initial
            && bookmarks
            && tx
                .send(render("BOOKMARK", bookmark(progress, true)))
                .await
                .is_err()
        {
            return;
        }
        let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(interval);
        tick.tick().await;
        loop {
            let sleep_until = deadline
                .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400));
            tokio::select! {
                ev = brx.recv() => match ev {
                    Ok(c) => {
                        if c.rv <= progress {
                            continue;
                        }
                        progress = c.rv;
                        // Like kube-apiserver, watches of a custom resource end with its CRD.
                        if def.crd && c.ty == "DELETED" && c.store_key == crate::resources::CRD_KEY
                            && c.obj["spec"]["group"] == def.group.as_str()
                            && c.obj["spec"]["names"]["plural"] == def.plural.as_str() {
                            return;
                        }
                        if let Some((ty, obj)) = translate(&def, &filter, &c) {
                            if tx.send(render(&ty, obj)).await.is_err() {
                                return;
                            }
                            events_left -= 1;
                            if events_left == 0 {
                                return;
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let e = ApiError::gone("the watch fell too far behind; restart it");
                        let _ = tx.send(render("ERROR", e.to_status())).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    // Every change passes through this watcher's receiver (filtered or not), so
                    // `progress` is exactly how far this watch has seen; queued changes beyond it
                    // are still delivered after the bookmark.
                    if tx.send(render("BOOKMARK", bookmark(progress, false))).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(sleep_until) => return,
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
    });
    Ok(Out {
        code: 200,
        body: Err(BodyExt::boxed(StreamBody::new(stream))),
        warnings: vec![],
    })
}

/// Turn a store change into a watch event for one watcher (selector transitions included).
fn translate(def: &ResDef, f: &Filter, c: &Change) -> Option<(String, Value)> {
    if c.store_key != f.store_key || f.ns.as_deref().is_some_and(|n| n != c.ns) {
        return None;
    }
    let new_m = f.matches(&c.obj);
    let ty = match c.ty {
        "MODIFIED" => {
            let old_m = c.old.as_ref().is_some_and(|o| f.matches(o));
            match (old_m, new_m) {
                (true, true) => "MODIFIED",
                (false, true) => "ADDED",
                (true, false) => "DELETED",
                (false, false) => return None,
            }
        }
        other if new_m => other,
        _ => return None,
    };
    Some((ty.to_string(), view(def, &c.obj)))
}
