//! Decoding of the Kubernetes protobuf wire format (`application/vnd.kubernetes.protobuf`) for the
//! few built-in kinds kubectl's typed clients send that way (`kubectl create secret|configmap|
//! namespace|serviceaccount|role|clusterrole|rolebinding|clusterrolebinding|token`, `kubectl auth
//! can-i`). Anything else is refused with 415 and a clear message.

use base64::Engine;
use serde_json::{Map, Value, json};

#[derive(Clone, Copy)]
enum K {
    Str,
    /// bytes, rendered as base64 like JSON does.
    Bytes,
    Int,
    Bool,
    Msg(&'static [F]),
    MapStr,
    MapBytes,
    Time,
}

struct F(u64, &'static str, K, bool);

const OWNER_REF: &[F] = &[
    F(1, "kind", K::Str, false),
    F(3, "name", K::Str, false),
    F(4, "uid", K::Str, false),
    F(5, "apiVersion", K::Str, false),
    F(6, "controller", K::Bool, false),
    F(7, "blockOwnerDeletion", K::Bool, false),
];

const OBJECT_META: &[F] = &[
    F(1, "name", K::Str, false),
    F(2, "generateName", K::Str, false),
    F(3, "namespace", K::Str, false),
    F(4, "selfLink", K::Str, false),
    F(5, "uid", K::Str, false),
    F(6, "resourceVersion", K::Str, false),
    F(7, "generation", K::Int, false),
    F(8, "creationTimestamp", K::Time, false),
    F(9, "deletionTimestamp", K::Time, false),
    F(10, "deletionGracePeriodSeconds", K::Int, false),
    F(11, "labels", K::MapStr, false),
    F(12, "annotations", K::MapStr, false),
    F(13, "ownerReferences", K::Msg(OWNER_REF), true),
    F(14, "finalizers", K::Str, true),
];

const OBJECT_REF: &[F] = &[
    F(1, "kind", K::Str, false),
    F(2, "namespace", K::Str, false),
    F(3, "name", K::Str, false),
    F(4, "uid", K::Str, false),
    F(5, "apiVersion", K::Str, false),
    F(6, "resourceVersion", K::Str, false),
    F(7, "fieldPath", K::Str, false),
];

const LOCAL_REF: &[F] = &[F(1, "name", K::Str, false)];

const SECRET: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "data", K::MapBytes, false),
    F(3, "type", K::Str, false),
    F(4, "stringData", K::MapStr, false),
    F(5, "immutable", K::Bool, false),
];

const CONFIG_MAP: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "data", K::MapStr, false),
    F(3, "binaryData", K::MapBytes, false),
    F(4, "immutable", K::Bool, false),
];

const NAMESPACE_SPEC: &[F] = &[F(1, "finalizers", K::Str, true)];
const NAMESPACE_STATUS: &[F] = &[F(1, "phase", K::Str, false)];

const NAMESPACE: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "spec", K::Msg(NAMESPACE_SPEC), false),
    F(3, "status", K::Msg(NAMESPACE_STATUS), false),
];

const SERVICE_ACCOUNT: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "secrets", K::Msg(OBJECT_REF), true),
    F(3, "imagePullSecrets", K::Msg(LOCAL_REF), true),
    F(4, "automountServiceAccountToken", K::Bool, false),
];

const POLICY_RULE: &[F] = &[
    F(1, "verbs", K::Str, true),
    F(2, "apiGroups", K::Str, true),
    F(3, "resources", K::Str, true),
    F(4, "resourceNames", K::Str, true),
    F(5, "nonResourceURLs", K::Str, true),
];

const ROLE: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "rules", K::Msg(POLICY_RULE), true),
];

const SUBJECT: &[F] = &[
    F(1, "kind", K::Str, false),
    F(2, "apiGroup", K::Str, false),
    F(3, "name", K::Str, false),
    F(4, "namespace", K::Str, false),
];

const ROLE_REF: &[F] = &[
    F(1, "apiGroup", K::Str, false),
    F(2, "kind", K::Str, false),
    F(3, "name", K::Str, false),
];

const ROLE_BINDING: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "subjects", K::Msg(SUBJECT), true),
    F(3, "roleRef", K::Msg(ROLE_REF), false),
];

const RESOURCE_ATTRIBUTES: &[F] = &[
    F(1, "namespace", K::Str, false),
    F(2, "verb", K::Str, false),
    F(3, "group", K::Str, false),
    F(4, "version", K::Str, false),
    F(5, "resource", K::Str, false),
    F(6, "subresource", K::Str, false),
    F(7, "name", K::Str, false),
];

const NON_RESOURCE_ATTRIBUTES: &[F] = &[F(1, "path", K::Str, false), F(2, "verb", K::Str, false)];

const ACCESS_REVIEW_SPEC: &[F] = &[
    F(1, "resourceAttributes", K::Msg(RESOURCE_ATTRIBUTES), false),
    F(
        2,
        "nonResourceAttributes",
        K::Msg(NON_RESOURCE_ATTRIBUTES),
        false,
    ),
];

const ACCESS_REVIEW_STATUS: &[F] = &[
    F(1, "allowed", K::Bool, false),
    F(2, "reason", K::Str, false),
    F(3, "evaluationError", K::Str, false),
    F(4, "denied", K::Bool, false),
];

const SELF_SUBJECT_ACCESS_REVIEW: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "spec", K::Msg(ACCESS_REVIEW_SPEC), false),
    F(3, "status", K::Msg(ACCESS_REVIEW_STATUS), false),
];

const BOUND_OBJECT_REF: &[F] = &[
    F(1, "kind", K::Str, false),
    F(2, "apiVersion", K::Str, false),
    F(3, "name", K::Str, false),
    F(4, "uid", K::Str, false),
];

const TOKEN_REQUEST_SPEC: &[F] = &[
    F(1, "audiences", K::Str, true),
    F(3, "boundObjectRef", K::Msg(BOUND_OBJECT_REF), false),
    F(4, "expirationSeconds", K::Int, false),
];

const TOKEN_REQUEST_STATUS: &[F] = &[
    F(1, "token", K::Str, false),
    F(2, "expirationTimestamp", K::Time, false),
];

const TOKEN_REQUEST: &[F] = &[
    F(1, "metadata", K::Msg(OBJECT_META), false),
    F(2, "spec", K::Msg(TOKEN_REQUEST_SPEC), false),
    F(3, "status", K::Msg(TOKEN_REQUEST_STATUS), false),
];

const TYPE_META: &[F] = &[
    F(1, "apiVersion", K::Str, false),
    F(2, "kind", K::Str, false),
];
const TIME: &[F] = &[F(1, "seconds", K::Int, false), F(2, "nanos", K::Int, false)];
const UNKNOWN: &[F] = &[
    F(1, "typeMeta", K::Msg(TYPE_META), false),
    F(2, "raw", K::Bytes, false),
    F(3, "contentEncoding", K::Str, false),
    F(4, "contentType", K::Str, false),
];

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or("truncated field")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "invalid UTF-8 in string field".to_string())
}

fn decode_msg(buf: &[u8], schema: &[F], what: &str) -> Result<Map<String, Value>, String> {
    let mut r = Reader { buf, pos: 0 };
    let mut out = Map::new();
    while r.pos < buf.len() {
        let tag = r.varint()?;
        let (num, wire) = (tag >> 3, tag & 7);
        let Some(F(_, name, kind, repeated)) = schema.iter().find(|f| f.0 == num) else {
            return Err(format!(
                "field {num} of {what} is not supported by the emulator's protobuf decoder"
            ));
        };
        let value = match (kind, wire) {
            (K::Int, 0) => json!(r.varint()? as i64),
            (K::Bool, 0) => json!(r.varint()? != 0),
            (K::Str, 2) => {
                let v = string(r.bytes()?)?;
                if v.is_empty() && !repeated {
                    continue;
                }
                json!(v)
            }
            (K::Bytes, 2) => json!(base64::engine::general_purpose::STANDARD.encode(r.bytes()?)),
            (K::Msg(s), 2) => Value::Object(decode_msg(r.bytes()?, s, name)?),
            (K::Time, 2) => {
                let t = decode_msg(r.bytes()?, TIME, name)?;
                let secs = t.get("seconds").and_then(Value::as_i64).unwrap_or(0);
                let ts = jiff::Timestamp::from_second(secs).map_err(|e| e.to_string())?;
                json!(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            }
            (K::MapStr | K::MapBytes, 2) => {
                let entry = r.bytes()?;
                let vk = if matches!(kind, K::MapStr) {
                    K::Str
                } else {
                    K::Bytes
                };
                let e = decode_msg(
                    entry,
                    &[F(1, "key", K::Str, false), F(2, "value", vk, false)],
                    name,
                )?;
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let val = e.get("value").cloned().unwrap_or(json!(""));
                let m = out.entry(name.to_string()).or_insert_with(|| json!({}));
                m[key] = val;
                continue;
            }
            _ => return Err(format!("unexpected wire type {wire} for {what}.{name}")),
        };
        if *repeated {
            let list = out.entry(name.to_string()).or_insert_with(|| json!([]));
            if let Some(a) = list.as_array_mut() {
                a.push(value);
            }
        } else {
            out.insert(name.to_string(), value);
        }
    }
    Ok(out)
}

/// Decode a `k8s\0`-prefixed protobuf object into its JSON form.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\x00")
        .ok_or("missing the k8s protobuf envelope prefix")?;
    let env = decode_msg(rest, UNKNOWN, "runtime.Unknown")?;
    let api_version = env
        .get("typeMeta")
        .and_then(|t| t.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = env
        .get("typeMeta")
        .and_then(|t| t.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let raw = env
        .get("raw")
        .and_then(Value::as_str)
        .and_then(|r| base64::engine::general_purpose::STANDARD.decode(r).ok())
        .unwrap_or_default();
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => SECRET,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => ROLE_BINDING,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        _ => {
            return Err(format!(
                "protobuf bodies of {api_version}/{kind} are not supported by the emulator; send JSON"
            ));
        }
    };
    let mut obj = decode_msg(&raw, schema, &kind)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![(num << 3 | 2) as u8, payload.len() as u8];
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_a_secret() {
        let meta = [
            field(1, b"s1"),
            field(11, &[field(1, b"a"), field(2, b"b")].concat()),
            field(14, b"f/1"),
        ]
        .concat();
        let secret = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"\x00\x01")].concat()),
            field(3, b"Opaque"),
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"Secret")].concat();
        let body = [b"k8s\x00".to_vec(), field(1, &tm), field(2, &secret)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": {"k": "AAE="},
                "metadata": {"name": "s1", "labels": {"a": "b"}, "finalizers": ["f/1"]}})
        );
        let tm = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        assert!(
            decode(&[b"k8s\x00".to_vec(), field(1, &tm)].concat())
                .unwrap_err()
                .contains("not supported")
        );
    }
}
