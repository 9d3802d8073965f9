//! Reads: get and list (selectors, pagination, tables and metadata-only views).

use super::*;

pub(super) fn get(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let st = shared.lock();
    let name = t.name.as_deref().unwrap_or_default();
    let obj = st
        .get(&t.def.store_key, ns_of(t), name)
        .ok_or_else(|| ApiError::not_found(&t.def.group, &t.def.plural, name))?;
    let v = view(&t.def, obj);
    Ok(Out::json(200, shape_one(&t.def, v, ctx, st.rv)))
}

pub(super) fn shape_one(def: &ResDef, v: Value, ctx: &Ctx, rv: u64) -> Value {
    match want(&ctx.headers) {
        Want::Json => v,
        Want::Meta => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": v["metadata"]})
        }
        Want::Table => table::table(
            def,
            &[v],
            ctx.q("includeObject").unwrap_or("Metadata"),
            true,
            json!({"resourceVersion": rv.to_string()}),
        ),
    }
}

pub(super) struct Filter {
    pub(super) store_key: String,
    pub(super) ns: Option<String>,
    pub(super) labels: LabelSelector,
    pub(super) fields: FieldSelector,
}

impl Filter {
    pub(super) fn new(t: &Target, ctx: &Ctx) -> ApiResult<Self> {
        let labels = LabelSelector::parse(ctx.q("labelSelector").unwrap_or(""))?;
        let fields =
            FieldSelector::parse(ctx.q("fieldSelector").unwrap_or(""), &t.def.field_labels)?;
        Ok(Filter {
            store_key: t.def.store_key.clone(),
            ns: t.ns.clone(),
            labels,
            fields,
        })
    }
    pub(super) fn matches(&self, stored: &Value) -> bool {
        self.labels.matches(stored) && self.fields.matches(stored)
    }

    /// Where the store can look for matches, starting after `after`.
    pub(super) fn lookup(&self, after: Option<Key>) -> Lookup<'_> {
        Lookup {
            ns: self
                .ns
                .as_deref()
                .or_else(|| self.fields.required("metadata.namespace")),
            name: self.fields.required("metadata.name"),
            labels: self.labels.equalities(),
            after,
        }
    }
}

pub(super) fn list(shared: &Arc<Shared>, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let filter = Filter::new(t, ctx)?;
    let limit: usize = ctx
        .q("limit")
        .and_then(|l| l.parse().ok())
        .filter(|l| *l > 0)
        .unwrap_or(usize::MAX);
    let start_after: Option<(String, String)> = match ctx.q("continue").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_continue(c).ok_or_else(|| {
            ApiError::bad_request("continue key is not valid: illegal base64 data")
        })?),
        None => None,
    };
    let st = shared.lock();
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    for ((ns, name), obj) in st.lookup(&t.def.store_key, &filter.lookup(start_after)) {
        if !filter.matches(obj) {
            continue;
        }
        if items.len() >= limit {
            remaining += 1;
            continue;
        }
        items.push(view(&t.def, obj));
        if items.len() == limit {
            next = Some((ns.clone(), name.clone()));
        }
    }
    let mut meta = json!({"resourceVersion": st.rv.to_string()});
    if remaining > 0
        && let Some((ns, name)) = next
    {
        meta["continue"] = json!(encode_continue(&ns, &name));
        meta["remainingItemCount"] = json!(remaining);
    }
    let body = match want(&ctx.headers) {
        Want::Table => table::table(
            &t.def,
            &items,
            ctx.q("includeObject").unwrap_or("Metadata"),
            true,
            meta,
        ),
        Want::Meta => {
            let items: Vec<Value> = items
                .iter()
                .map(|o| json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}))
                .collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items})
        }
        Want::Json => {
            json!({"kind": t.def.list_kind(), "apiVersion": t.def.api_version(), "metadata": meta, "items": items})
        }
    };
    Ok(Out::json(200, body))
}

fn encode_continue(ns: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&json!([ns, name])).unwrap_or_default())
}

fn decode_continue(c: &str) -> Option<(String, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(c)
        .ok()?;
    let v: (String, String) = serde_json::from_slice(&raw).ok()?;
    Some(v)
}
