//! The tenant S3 endpoint: a path-style proxy in front of moto that adds what moto lacks.
//!
//! **Callers are identified, not authenticated.** The access key id is taken from the SigV4
//! `Authorization` header (`AWS4-HMAC-SHA256 Credential=AKID/...`), from a presigned URL's
//! `X-Amz-Credential`, or from SigV2 (`AWS AKID:sig` / `AWSAccessKeyId`). Signatures are not
//! verified (moto does not verify them either); knowing an issued key id is the contract here.
//!
//! On top of moto the proxy enforces:
//! - `403 InvalidAccessKeyId` for key ids never issued, deleted, or expired;
//! - `403 AccessDenied` for another tenant's bucket, for anonymous requests, and for non-root
//!   users whose groups' S3 policies do not allow the action on the bucket / object ARN;
//! - `404 NoSuchBucket` for bucket names no tenant owns;
//! - `ListBuckets` answers only the caller tenant's buckets;
//! - `CreateBucket`/`DeleteBucket` register/unregister the bucket with the caller's tenant
//!   (names are global: another tenant's name → `409 BucketAlreadyExists`);
//! - a bucket whose "delete objects" drain is active is read-only (writes → `403 AccessDenied`).
//!
//! Allowed requests go to moto unchanged (method, path, query, headers, streamed body) except for
//! hop-by-hop headers and `Expect`.

use std::sync::Arc;
use std::time::SystemTime;

use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::Ctx;
use crate::policy::{Decision, evaluate_all};
use crate::state::State;
use crate::util::{Body, BoxError, full, rfc3339, xml_escape};

const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "expect",
];

/// How the proxy sees one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Op {
    /// IAM action, e.g. `s3:GetObject`.
    pub action: String,
    /// ARN the action applies to.
    pub resource: String,
    /// Adds or changes object data (rejected while the bucket drains).
    pub write: bool,
}

pub(crate) fn access_key_id(headers: &HeaderMap, query: &[(String, String)]) -> Option<String> {
    if let Some(auth) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let auth = auth.trim();
        if let Some(pos) = auth.find("Credential=") {
            let rest = &auth[pos + "Credential=".len()..];
            let akid = rest.split(['/', ',', ' ']).next().unwrap_or("");
            return (!akid.is_empty()).then(|| akid.to_owned());
        }
        if let Some(rest) = auth.strip_prefix("AWS ") {
            let akid = rest.split(':').next().unwrap_or("").trim();
            return (!akid.is_empty()).then(|| akid.to_owned());
        }
    }
    for (k, v) in query {
        if k.eq_ignore_ascii_case("X-Amz-Credential") {
            let akid = v.split('/').next().unwrap_or("");
            return (!akid.is_empty()).then(|| akid.to_owned());
        }
        if k == "AWSAccessKeyId" && !v.is_empty() {
            return Some(v.clone());
        }
    }
    None
}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits a path-style request path into bucket and (decoded) key.
pub(crate) fn split_path(path: &str) -> (Option<String>, Option<String>) {
    let p = path.strip_prefix('/').unwrap_or(path);
    if p.is_empty() {
        return (None, None);
    }
    match p.split_once('/') {
        None => (Some(pct_decode(p)), None),
        Some((b, "")) => (Some(pct_decode(b)), None),
        Some((b, k)) => (Some(pct_decode(b)), Some(pct_decode(k))),
    }
}

/// Maps a request to its IAM action and resource (AWS's action names and resource rules).
pub(crate) fn classify(
    method: &Method,
    bucket: &str,
    key: Option<&str>,
    query: &[(String, String)],
) -> S3Op {
    let has = |n: &str| query.iter().any(|(k, _)| k == n);
    let versioned = has("versionId");
    let bucket_arn = format!("arn:aws:s3:::{bucket}");
    let op = |action: &str, resource: &str, write: bool| S3Op {
        action: format!("s3:{action}"),
        resource: resource.to_owned(),
        write,
    };
    let Some(key) = key else {
        let objects = format!("{bucket_arn}/*");
        let sub = |get: bool| -> &'static str {
            const GET: [(&str, &str); 12] = [
                ("versioning", "GetBucketVersioning"),
                ("policy", "GetBucketPolicy"),
                ("tagging", "GetBucketTagging"),
                ("acl", "GetBucketAcl"),
                ("cors", "GetBucketCORS"),
                ("lifecycle", "GetLifecycleConfiguration"),
                ("object-lock", "GetBucketObjectLockConfiguration"),
                ("notification", "GetBucketNotification"),
                ("replication", "GetReplicationConfiguration"),
                ("encryption", "GetEncryptionConfiguration"),
                ("location", "GetBucketLocation"),
                ("policyStatus", "GetBucketPolicyStatus"),
            ];
            const PUT: [(&str, &str); 10] = [
                ("versioning", "PutBucketVersioning"),
                ("policy", "PutBucketPolicy"),
                ("tagging", "PutBucketTagging"),
                ("acl", "PutBucketAcl"),
                ("cors", "PutBucketCORS"),
                ("lifecycle", "PutLifecycleConfiguration"),
                ("object-lock", "PutBucketObjectLockConfiguration"),
                ("notification", "PutBucketNotification"),
                ("replication", "PutReplicationConfiguration"),
                ("encryption", "PutEncryptionConfiguration"),
            ];
            let table: &[(&str, &str)] = if get { &GET } else { &PUT };
            table
                .iter()
                .find(|(q, _)| has(q))
                .map(|(_, a)| *a)
                .unwrap_or(if get {
                    "GetBucketConfiguration"
                } else {
                    "PutBucketConfiguration"
                })
        };
        let is_config = |q: &[(String, String)]| {
            q.iter().any(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "list-type"
                        | "prefix"
                        | "delimiter"
                        | "marker"
                        | "max-keys"
                        | "continuation-token"
                        | "start-after"
                        | "fetch-owner"
                        | "encoding-type"
                        | "x-id"
                ) && !k.starts_with("X-Amz-")
                    && k != "AWSAccessKeyId"
                    && k != "Signature"
                    && k != "Expires"
            })
        };
        return match *method {
            Method::GET if has("versions") => op("ListBucketVersions", &bucket_arn, false),
            Method::GET if has("uploads") => op("ListBucketMultipartUploads", &bucket_arn, false),
            Method::GET if is_config(query) => op(sub(true), &bucket_arn, false),
            Method::GET | Method::HEAD => op("ListBucket", &bucket_arn, false),
            Method::PUT if is_config(query) => op(sub(false), &bucket_arn, false),
            Method::PUT => op("CreateBucket", &bucket_arn, false),
            Method::DELETE if has("policy") => op("DeleteBucketPolicy", &bucket_arn, false),
            Method::DELETE if is_config(query) => op(sub(false), &bucket_arn, false),
            Method::DELETE => op("DeleteBucket", &bucket_arn, false),
            Method::POST if has("delete") => op("DeleteObject", &objects, false),
            _ => op("ListBucket", &bucket_arn, false),
        };
    };
    let obj = format!("{bucket_arn}/{key}");
    let v = |plain: &str, version: &str| {
        if versioned {
            version.to_owned()
        } else {
            plain.to_owned()
        }
    };
    match *method {
        Method::GET | Method::HEAD => {
            if has("tagging") {
                op(
                    &v("GetObjectTagging", "GetObjectVersionTagging"),
                    &obj,
                    false,
                )
            } else if has("acl") {
                op(&v("GetObjectAcl", "GetObjectVersionAcl"), &obj, false)
            } else if has("uploadId") {
                op("ListMultipartUploadParts", &obj, false)
            } else if has("retention") {
                op("GetObjectRetention", &obj, false)
            } else if has("legal-hold") {
                op("GetObjectLegalHold", &obj, false)
            } else {
                op(&v("GetObject", "GetObjectVersion"), &obj, false)
            }
        }
        Method::PUT => {
            if has("tagging") {
                op(
                    &v("PutObjectTagging", "PutObjectVersionTagging"),
                    &obj,
                    false,
                )
            } else if has("acl") {
                op(&v("PutObjectAcl", "PutObjectVersionAcl"), &obj, false)
            } else if has("retention") {
                op("PutObjectRetention", &obj, false)
            } else if has("legal-hold") {
                op("PutObjectLegalHold", &obj, false)
            } else {
                op("PutObject", &obj, true)
            }
        }
        Method::DELETE => {
            if has("uploadId") {
                op("AbortMultipartUpload", &obj, false)
            } else if has("tagging") {
                op(
                    &v("DeleteObjectTagging", "DeleteObjectVersionTagging"),
                    &obj,
                    false,
                )
            } else {
                op(&v("DeleteObject", "DeleteObjectVersion"), &obj, false)
            }
        }
        Method::POST if has("restore") => op("RestoreObject", &obj, false),
        Method::POST if has("select") => op("GetObject", &obj, false),
        _ => op("PutObject", &obj, true),
    }
}

fn s3_error(
    status: StatusCode,
    code: &str,
    message: &str,
    resource: &str,
    head: bool,
) -> Response<Body> {
    let request_id = crate::util::random_string(16, crate::util::UPPER_ALNUM);
    let body = if head {
        full(bytes::Bytes::new())
    } else {
        full(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message><Resource>{}</Resource><RequestId>{}</RequestId></Error>",
            xml_escape(code),
            xml_escape(message),
            xml_escape(resource),
            request_id
        ))
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        r.headers_mut().insert("x-amz-request-id", v);
    }
    r
}

fn access_denied(resource: &str, head: bool) -> Response<Body> {
    s3_error(
        StatusCode::FORBIDDEN,
        "AccessDenied",
        "Access Denied",
        resource,
        head,
    )
}

/// Policy check for a user of `account_id`: root may do anything in its own tenant,
/// everybody else needs an Allow (and no Deny) from their groups' S3 policies.
fn allowed(st: &State, user_id: &str, action: &str, resource: &str) -> bool {
    let Some(user) = st.users.get(user_id) else {
        return false;
    };
    if user.root {
        return true;
    }
    let policies: Vec<&serde_json::Value> =
        st.user_groups(user).filter_map(|g| g.s3_policy()).collect();
    evaluate_all(policies, action, resource) == Decision::Allow
}

enum Registration {
    None,
    Created(String),
    Deleted(String),
}

pub(crate) async fn handle(ctx: Arc<Ctx>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let head = method == Method::HEAD;
    let query: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();

    let fault = ctx.lock().take_fault(method.as_str(), &path);
    if let Some(hit) = fault {
        if let Some(d) = hit.delay {
            tokio::time::sleep(d).await;
        }
        if let Some(code) = hit.status {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let s3code = if code == 503 {
                "ServiceUnavailable"
            } else {
                "InternalError"
            };
            return s3_error(status, s3code, "injected fault", &path, head);
        }
    }

    let Some(akid) = access_key_id(req.headers(), &query) else {
        return access_denied(&path, head);
    };
    let (bucket, key) = split_path(&path);

    // Identify the caller.
    let (account_id, user_id) = {
        let st = ctx.lock();
        let now = SystemTime::now();
        let Some(k) = st.keys.get(&akid).filter(|k| !k.expired(now)) else {
            return s3_error(
                StatusCode::FORBIDDEN,
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
                &path,
                head,
            );
        };
        let account_ok = st
            .accounts
            .get(&k.account_id)
            .is_some_and(|a| a.has_capability("s3"));
        let user_ok = st.users.get(&k.user_id).is_some_and(|u| !u.disable);
        if !account_ok || !user_ok {
            return access_denied(&path, head);
        }
        (k.account_id.clone(), k.user_id.clone())
    };

    let Some(bucket) = bucket else {
        if method != Method::GET {
            return s3_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
                &path,
                head,
            );
        }
        return list_buckets(&ctx, &account_id, &user_id).await;
    };

    let op = classify(&method, &bucket, key.as_deref(), &query);
    let mut registration = Registration::None;
    {
        let mut st = ctx.lock();
        if op.action == "s3:CreateBucket" {
            if let Some(b) = st.buckets.get(&bucket) {
                return if b.account_id == account_id {
                    s3_error(
                        StatusCode::CONFLICT,
                        "BucketAlreadyOwnedByYou",
                        "Your previous request to create the named bucket succeeded and you already own it.",
                        &path,
                        head,
                    )
                } else {
                    s3_error(
                        StatusCode::CONFLICT,
                        "BucketAlreadyExists",
                        "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again.",
                        &path,
                        head,
                    )
                };
            }
            if !allowed(&st, &user_id, &op.action, &op.resource) {
                return access_denied(&path, head);
            }
            if !crate::mgmt::valid_bucket_name(&bucket) {
                return s3_error(
                    StatusCode::BAD_REQUEST,
                    "InvalidBucketName",
                    "The specified bucket is not valid.",
                    &path,
                    head,
                );
            }
            st.buckets.insert(
                bucket.clone(),
                crate::state::Bucket {
                    name: bucket.clone(),
                    account_id: account_id.clone(),
                    region: "us-east-1".into(),
                    creation_time: SystemTime::now(),
                    s3_object_lock: serde_json::json!({
                        "enabled": req.headers().get("x-amz-bucket-object-lock-enabled")
                            .and_then(|v| v.to_str().ok())
                            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
                    }),
                    quota_object_bytes: None,
                    drain: Default::default(),
                },
            );
            registration = Registration::Created(bucket.clone());
        } else {
            let Some(b) = st.buckets.get(&bucket) else {
                return s3_error(
                    StatusCode::NOT_FOUND,
                    "NoSuchBucket",
                    "The specified bucket does not exist",
                    &path,
                    head,
                );
            };
            if b.account_id != account_id {
                return access_denied(&path, head);
            }
            let draining = b.drain.active;
            if !allowed(&st, &user_id, &op.action, &op.resource) {
                return access_denied(&path, head);
            }
            if op.write && draining {
                return s3_error(
                    StatusCode::FORBIDDEN,
                    "AccessDenied",
                    "The bucket is read-only while its objects are being deleted (Delete objects in bucket)",
                    &path,
                    head,
                );
            }
            // CopyObject / UploadPartCopy also read the source.
            if let Some(src) = req
                .headers()
                .get("x-amz-copy-source")
                .and_then(|v| v.to_str().ok())
            {
                let src = src.split('?').next().unwrap_or("");
                let (sb, sk) = split_path(&format!("/{}", src.trim_start_matches('/')));
                let (Some(sb), Some(sk)) = (sb, sk) else {
                    return s3_error(
                        StatusCode::BAD_REQUEST,
                        "InvalidArgument",
                        "invalid x-amz-copy-source",
                        &path,
                        head,
                    );
                };
                let owned = st
                    .buckets
                    .get(&sb)
                    .is_some_and(|b| b.account_id == account_id);
                if !owned
                    || !allowed(
                        &st,
                        &user_id,
                        "s3:GetObject",
                        &format!("arn:aws:s3:::{sb}/{sk}"),
                    )
                {
                    return access_denied(&path, head);
                }
            }
            if op.action == "s3:DeleteBucket" {
                registration = Registration::Deleted(bucket.clone());
            }
        }
    }

    let mut resp = forward(&ctx, req).await;
    if op.action == "s3:GetBucketVersioning" && resp.status() == StatusCode::OK {
        resp = fix_versioning_root(resp).await;
    }
    match registration {
        Registration::Created(name) if !resp.status().is_success() => {
            ctx.lock().buckets.remove(&name);
        }
        Registration::Deleted(name) if resp.status().is_success() => {
            ctx.lock().buckets.remove(&name);
        }
        _ => {}
    }
    resp
}

/// moto names the GetBucketVersioning root element `GetBucketVersioningResponse`; S3 (and
/// StorageGRID) use `VersioningConfiguration`, which strict clients such as the Rust SDK require.
async fn fix_versioning_root(resp: Response<Body>) -> Response<Body> {
    let (mut parts, body) = resp.into_parts();
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return s3_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &e.to_string(),
                "",
                false,
            );
        }
    };
    let text = String::from_utf8_lossy(&bytes)
        .replace("GetBucketVersioningResponse", "VersioningConfiguration");
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, full(text))
}

async fn forward(ctx: &Ctx, req: Request<Incoming>) -> Response<Body> {
    let head = req.method() == Method::HEAD;
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into());
    let uri: Uri = match format!("{}{}", ctx.backend.endpoint(), pq).parse() {
        Ok(u) => u,
        Err(e) => {
            return s3_error(
                StatusCode::BAD_REQUEST,
                "InvalidURI",
                &e.to_string(),
                &pq,
                head,
            );
        }
    };
    parts.uri = uri;
    parts.version = http::Version::HTTP_11;
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    let body: Body = body.map_err(|e| Box::new(e) as BoxError).boxed();
    match ctx.http.request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            for h in HOP_BY_HOP {
                parts.headers.remove(h);
            }
            Response::from_parts(parts, body.map_err(|e| Box::new(e) as BoxError).boxed())
        }
        Err(e) => s3_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &format!("backend unavailable: {e}"),
            &pq,
            head,
        ),
    }
}

/// `ListBuckets`: moto's answer, filtered to the caller tenant's buckets.
async fn list_buckets(ctx: &Ctx, account_id: &str, user_id: &str) -> Response<Body> {
    if !allowed(
        &ctx.lock(),
        user_id,
        "s3:ListAllMyBuckets",
        "arn:aws:s3:::*",
    ) {
        return access_denied("/", false);
    }
    let all = match ctx.backend.list_buckets().await {
        Ok(b) => b,
        Err(e) => {
            return s3_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &e.to_string(),
                "/",
                false,
            );
        }
    };
    let (owner_name, mine): (String, Vec<(String, String)>) = {
        let st = ctx.lock();
        let name = st
            .accounts
            .get(account_id)
            .map(|a| a.name.clone())
            .unwrap_or_default();
        let mine = all
            .into_iter()
            .filter(|(n, _)| {
                st.buckets
                    .get(n)
                    .is_some_and(|b| b.account_id == account_id)
            })
            .collect();
        (name, mine)
    };
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListAllMyBucketsResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">",
    );
    xml.push_str(&format!(
        "<Owner><ID>{}</ID><DisplayName>{}</DisplayName></Owner><Buckets>",
        xml_escape(account_id),
        xml_escape(&owner_name)
    ));
    for (name, date) in mine {
        xml.push_str(&format!(
            "<Bucket><Name>{}</Name><CreationDate>{}</CreationDate></Bucket>",
            xml_escape(&name),
            xml_escape(&date)
        ));
    }
    xml.push_str("</Buckets></ListAllMyBucketsResult>");
    let mut r = Response::new(full(xml));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    let _ = rfc3339;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn key_ids() {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static(
                "AWS4-HMAC-SHA256 Credential=SGABC/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            ),
        );
        assert_eq!(access_key_id(&h, &[]).as_deref(), Some("SGABC"));
        let empty = HeaderMap::new();
        assert_eq!(
            access_key_id(
                &empty,
                &q(&[(
                    "X-Amz-Credential",
                    "SGXYZ/20250101/us-east-1/s3/aws4_request"
                )])
            )
            .as_deref(),
            Some("SGXYZ")
        );
        let mut v2 = HeaderMap::new();
        v2.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("AWS SGV2:sig"),
        );
        assert_eq!(access_key_id(&v2, &[]).as_deref(), Some("SGV2"));
        assert_eq!(access_key_id(&empty, &[]), None);
    }

    #[test]
    fn paths() {
        assert_eq!(split_path("/"), (None, None));
        assert_eq!(split_path("/b"), (Some("b".into()), None));
        assert_eq!(split_path("/b/"), (Some("b".into()), None));
        assert_eq!(
            split_path("/b/a%20b/c"),
            (Some("b".into()), Some("a b/c".into()))
        );
    }

    #[test]
    fn actions() {
        let c =
            |m: Method, k: Option<&str>, qs: &[(&str, &str)]| classify(&m, "b", k, &q(qs)).action;
        assert_eq!(c(Method::GET, None, &[("list-type", "2")]), "s3:ListBucket");
        assert_eq!(c(Method::HEAD, None, &[]), "s3:ListBucket");
        assert_eq!(
            c(Method::GET, None, &[("versions", "")]),
            "s3:ListBucketVersions"
        );
        assert_eq!(
            c(Method::GET, None, &[("versioning", "")]),
            "s3:GetBucketVersioning"
        );
        assert_eq!(c(Method::PUT, None, &[]), "s3:CreateBucket");
        assert_eq!(c(Method::DELETE, None, &[]), "s3:DeleteBucket");
        assert_eq!(c(Method::POST, None, &[("delete", "")]), "s3:DeleteObject");
        assert_eq!(c(Method::GET, Some("k"), &[]), "s3:GetObject");
        assert_eq!(
            c(Method::GET, Some("k"), &[("versionId", "1")]),
            "s3:GetObjectVersion"
        );
        assert_eq!(
            c(Method::PUT, Some("k"), &[("x-id", "PutObject")]),
            "s3:PutObject"
        );
        assert_eq!(c(Method::DELETE, Some("k"), &[]), "s3:DeleteObject");
        assert_eq!(
            c(Method::POST, Some("k"), &[("uploads", "")]),
            "s3:PutObject"
        );
        assert_eq!(
            classify(&Method::GET, "b", Some("x/y"), &[]).resource,
            "arn:aws:s3:::b/x/y"
        );
        assert_eq!(
            classify(&Method::GET, "b", None, &[]).resource,
            "arn:aws:s3:::b"
        );
        assert!(classify(&Method::PUT, "b", Some("k"), &[]).write);
    }
}
