//! Discovery: /version, the API group and resource lists, and the OpenAPI v2 stub.

use super::*;

/// An OpenAPI v2 document without definitions: kubectl's client-side validation (used for
/// `kind: List` manifests) then skips the schema check instead of failing; the real schemas are
/// served as OpenAPI v3.
pub(super) fn openapi_v2(headers: &HeaderMap) -> Response<Body> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (ct, body) = if accept.contains("protobuf") {
        // gnostic openapi_v2.Document { swagger: "2.0" (1), info: Info { title (1), version (2) } (2) }
        let mut info = vec![0x0a, 10];
        info.extend_from_slice(b"Kubernetes");
        info.extend_from_slice(&[0x12, 7]);
        info.extend_from_slice(b"v1.32.0");
        let mut doc = vec![0x0a, 3];
        doc.extend_from_slice(b"2.0");
        doc.push(0x12);
        doc.push(info.len() as u8);
        doc.extend_from_slice(&info);
        (
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            Bytes::from(doc),
        )
    } else {
        let doc = json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": {}, "definitions": {}});
        ("application/json", Bytes::from(doc.to_string()))
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, ct)
        .body(Full::new(body).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

pub(super) fn version() -> Value {
    json!({"major": "1", "minor": "32", "gitVersion": "v1.32.0-keeper-emulator", "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.4", "compiler": "gc", "platform": "linux/amd64"})
}

pub(super) fn api_groups(st: &State) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for d in st.all_defs().filter(|d| !d.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) => {
                if !vs.contains(&d.version) {
                    vs.push(d.version.clone())
                }
            }
            None => groups.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(super) fn resource_list(st: &State, group: &str, version: &str) -> Value {
    let resources: Vec<Value> = st
        .all_defs()
        .filter(|d| d.group == group && d.version == version)
        .flat_map(|d| d.discovery())
        .collect();
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}
