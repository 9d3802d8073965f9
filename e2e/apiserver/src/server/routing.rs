//! Routing: a path and method to a verb on a resource (or a discovery/debug document).

use super::*;

fn decode(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

pub(super) async fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    ctx: &Ctx,
) -> (Out, Option<Value>) {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    let get = method == Method::GET;
    let plain = |v: Value| (Out::json(200, v), None);
    match s.as_slice() {
        ["version"] if get => return plain(version()),
        ["healthz" | "readyz" | "livez"] if get => {
            return (
                Out {
                    code: 200,
                    body: Ok(json!("ok")),
                    warnings: vec![],
                },
                None,
            );
        }
        ["api"] if get => {
            return plain(json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.server_address}]}));
        }
        ["apis"] if get => return plain(api_groups(&shared.lock())),
        ["apis", g] if get => {
            let groups = api_groups(&shared.lock());
            return match groups["groups"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == *g))
            {
                Some(grp) => {
                    let mut grp = grp.clone();
                    grp["kind"] = json!("APIGroup");
                    grp["apiVersion"] = json!("v1");
                    plain(grp)
                }
                None => (Out::err(ApiError::not_found_path()), None),
            };
        }
        ["api", "v1"] if get => return plain(resource_list(&shared.lock(), "", "v1")),
        ["apis", g, v] if get => {
            let st = shared.lock();
            if st.all_defs().any(|d| d.group == *g && d.version == *v) {
                return plain(resource_list(&st, g, v));
            }
            return (Out::err(ApiError::not_found_path()), None);
        }
        ["openapi", "v3"] if get => return plain(crate::openapi::index(&shared.lock())),
        ["openapi", "v3", rest @ ..] if get => {
            return match crate::openapi::document(&shared.lock(), &rest.join("/")) {
                Some(d) => plain(d),
                None => (Out::err(ApiError::not_found_path()), None),
            };
        }
        ["debug", "requests"] => {
            let mut reqs = shared.requests.lock().unwrap_or_else(|e| e.into_inner());
            if method == Method::DELETE {
                reqs.clear();
                return plain(json!({"requests": []}));
            }
            return plain(json!({"requests": *reqs}));
        }
        ["debug", "faults"] => {
            let (code, body) = shared.faults.endpoint(method, &ctx.body);
            return (Out::json(code, body), None);
        }
        _ => {}
    }
    let (group, version, rest) = match s.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return (Out::err(ApiError::not_found_path()), None),
    };
    let target = {
        let st = shared.lock();
        parse_target(&st, group, version, rest)
    };
    let target = match target {
        Some(t) => t,
        None => return (Out::err(ApiError::not_found_path()), None),
    };
    let verb = request_verb(method, target.name.is_some(), ctx.q("watch"));
    let log = json!({"verb": verb, "resource": target.def.plural, "subresource": target.sub,
        "namespace": target.ns.clone().unwrap_or_default(), "name": target.name.clone().unwrap_or_default(),
        "apiGroup": target.def.group, "apiVersion": target.def.version});
    let out = match dispatch(shared, verb, &target, ctx).await {
        Ok(o) => o,
        Err(e) => Out::err(e),
    };
    (out, Some(log))
}

/// The API verb of a request on a resource path: its method, whether the path names an object,
/// and its `watch` query parameter.
pub(crate) fn request_verb(method: &Method, named: bool, watch: Option<&str>) -> &'static str {
    match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if matches!(watch, Some("true" | "1")) => "watch",
        ("GET", false) => "list",
        ("POST", false) => "create",
        ("PUT", true) => "update",
        ("PATCH", true) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unsupported",
    }
}

pub(super) struct Target {
    pub(super) def: Arc<ResDef>,
    pub(super) ns: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: String,
}

fn parse_target(st: &State, group: &str, version: &str, rest: &[&str]) -> Option<Target> {
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(def) = st.resolve(group, version, rest[2]).filter(|d| d.namespaced)
    {
        return match rest.len() {
            3 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: None,
                sub: String::new(),
            }),
            4 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: Some(rest[3].into()),
                sub: String::new(),
            }),
            5 => Some(Target {
                def,
                ns: Some(rest[1].into()),
                name: Some(rest[3].into()),
                sub: rest[4].into(),
            }),
            _ => None,
        };
    }
    let def = st.resolve(group, version, rest.first()?)?;
    let t = match rest.len() {
        1 => Target {
            def,
            ns: None,
            name: None,
            sub: String::new(),
        },
        2 if !def.namespaced => Target {
            def,
            ns: None,
            name: Some(rest[1].into()),
            sub: String::new(),
        },
        3 if !def.namespaced => Target {
            def,
            ns: None,
            name: Some(rest[1].into()),
            sub: rest[2].into(),
        },
        _ => return None,
    };
    Some(t)
}

async fn dispatch(shared: &Arc<Shared>, verb: &str, t: &Target, ctx: &Ctx) -> ApiResult<Out> {
    let status_ok = t.sub == "status" && t.def.status_sub;
    if !t.sub.is_empty() && !status_ok {
        return Err(ApiError::not_found_path());
    }
    if !t.sub.is_empty() && !matches!(verb, "get" | "update" | "patch") {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource".to_string(),
        ));
    }
    match verb {
        "get" => get(shared, t, ctx),
        "list" => list(shared, t, ctx),
        "watch" => watch(shared, t, ctx),
        "create" | "update" | "patch" | "delete" => write(shared, verb, t, ctx, None).await,
        "deletecollection" => delete_collection(shared, t, ctx).await,
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}
