//! What a request to moto is: the AWS service and the action (operation name), from the S3 REST
//! method, path and query, or the `Action=` of the Query API (IAM, RDS).

use http::{HeaderMap, Method, header};

/// One classified request.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// `s3`, `iam`, `rds` (the SigV4 signing name), `moto` for moto's own API, or another
    /// signing name as sent.
    pub service: String,
    /// The AWS operation name, e.g. `PutObject`, `CreateDBInstance`; empty for moto's API.
    pub action: String,
    /// The Query API parameters (form body and query string); empty for S3.
    pub params: Vec<(String, String)>,
}

impl Call {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn is_query_api(&self) -> bool {
        !self.params.is_empty() || matches!(self.service.as_str(), "iam" | "rds")
    }
}

/// Classifies a request from its parts and its whole body.
pub fn classify(
    method: &Method,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Call {
    let query: Vec<(String, String)> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    if path.starts_with("/moto-api") {
        return Call {
            service: "moto".into(),
            action: String::new(),
            params: Vec::new(),
        };
    }
    let form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
    let mut params: Vec<(String, String)> = if form {
        form_urlencoded::parse(body).into_owned().collect()
    } else {
        Vec::new()
    };
    let signing_name = signing_name(headers, &query);
    let action = params
        .iter()
        .chain(query.iter())
        .find(|(k, _)| k == "Action")
        .map(|(_, v)| v.clone());
    match action {
        Some(action) if signing_name.as_deref() != Some("s3") => {
            params.extend(query);
            let version = params
                .iter()
                .find(|(k, _)| k == "Version")
                .map(|(_, v)| v.as_str());
            // Unsigned requests (moto accepts them) are told apart by the API version.
            let service = signing_name.unwrap_or_else(|| {
                match version {
                    Some("2010-05-08") => "iam",
                    Some("2014-10-31") => "rds",
                    _ => "unknown",
                }
                .into()
            });
            Call {
                service,
                action,
                params,
            }
        }
        _ => Call {
            service: signing_name.unwrap_or_else(|| "s3".into()),
            action: s3_action(method, path, &query, headers),
            params: Vec::new(),
        },
    }
}

/// The service of the SigV4 credential scope (`Credential=AKID/DATE/REGION/SERVICE/aws4_request`),
/// from the `Authorization` header or a presigned URL's `X-Amz-Credential`.
fn signing_name(headers: &HeaderMap, query: &[(String, String)]) -> Option<String> {
    let scope = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| a.split("Credential=").nth(1))
        .map(|c| c.split([',', ' ']).next().unwrap_or_default().to_string())
        .or_else(|| {
            query
                .iter()
                .find(|(k, _)| k == "X-Amz-Credential")
                .map(|(_, v)| v.clone())
        })?;
    scope.split('/').nth(3).map(str::to_string)
}

/// Bucket subresources (query keys) and the operation names they form with Get/Put/Delete.
const BUCKET_SUBRESOURCES: [(&str, &str); 14] = [
    ("versioning", "BucketVersioning"),
    ("policy", "BucketPolicy"),
    ("tagging", "BucketTagging"),
    ("lifecycle", "BucketLifecycleConfiguration"),
    ("object-lock", "ObjectLockConfiguration"),
    ("encryption", "BucketEncryption"),
    ("cors", "BucketCors"),
    ("acl", "BucketAcl"),
    ("location", "BucketLocation"),
    ("ownershipControls", "BucketOwnershipControls"),
    ("publicAccessBlock", "PublicAccessBlock"),
    ("notification", "BucketNotificationConfiguration"),
    ("logging", "BucketLogging"),
    ("website", "BucketWebsite"),
];

/// Object subresources, likewise.
const OBJECT_SUBRESOURCES: [(&str, &str); 4] = [
    ("tagging", "ObjectTagging"),
    ("retention", "ObjectRetention"),
    ("legal-hold", "ObjectLegalHold"),
    ("acl", "ObjectAcl"),
];

/// The S3 operation of a path-style REST request.
fn s3_action(
    method: &Method,
    path: &str,
    query: &[(String, String)],
    headers: &HeaderMap,
) -> String {
    let has = |k: &str| query.iter().any(|(q, _)| q == k);
    let (bucket, key) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path.trim_start_matches('/'), ""));
    let verb = match *method {
        Method::GET => "Get",
        Method::PUT => "Put",
        Method::DELETE => "Delete",
        _ => "",
    };
    let subresource = |table: &[(&str, &'static str)]| {
        table
            .iter()
            .find(|(q, _)| has(q))
            .filter(|_| !verb.is_empty())
            .map(|(_, name)| format!("{verb}{name}"))
    };
    let copy = headers.contains_key("x-amz-copy-source");
    let action = if bucket.is_empty() {
        match *method {
            Method::GET => "ListBuckets",
            _ => "Unknown",
        }
    } else if key.is_empty() {
        if let Some(a) = subresource(&BUCKET_SUBRESOURCES) {
            return a;
        }
        match *method {
            Method::PUT => "CreateBucket",
            Method::DELETE => "DeleteBucket",
            Method::HEAD => "HeadBucket",
            Method::POST if has("delete") => "DeleteObjects",
            Method::GET if has("versions") => "ListObjectVersions",
            Method::GET if has("uploads") => "ListMultipartUploads",
            Method::GET if query.iter().any(|(k, v)| k == "list-type" && v == "2") => {
                "ListObjectsV2"
            }
            Method::GET => "ListObjects",
            _ => "Unknown",
        }
    } else {
        if let Some(a) = subresource(&OBJECT_SUBRESOURCES) {
            return a;
        }
        let upload = has("uploadId");
        match *method {
            Method::PUT if upload && copy => "UploadPartCopy",
            Method::PUT if upload => "UploadPart",
            Method::PUT if copy => "CopyObject",
            Method::PUT => "PutObject",
            Method::GET if upload => "ListParts",
            Method::GET => "GetObject",
            Method::HEAD => "HeadObject",
            Method::DELETE if upload => "AbortMultipartUpload",
            Method::DELETE => "DeleteObject",
            Method::POST if has("uploads") => "CreateMultipartUpload",
            Method::POST if upload => "CompleteMultipartUpload",
            _ => "Unknown",
        }
    };
    action.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(service: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            format!("AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=x")
                .parse()
                .unwrap(),
        );
        h
    }

    fn s3(method: Method, path: &str, query: Option<&str>) -> String {
        classify(&method, path, query, &signed("s3"), b"").action
    }

    #[test]
    fn s3_rest_requests_are_named_by_method_path_and_query() {
        assert_eq!(s3(Method::GET, "/", None), "ListBuckets");
        assert_eq!(s3(Method::PUT, "/b", None), "CreateBucket");
        assert_eq!(s3(Method::DELETE, "/b", None), "DeleteBucket");
        assert_eq!(s3(Method::HEAD, "/b", None), "HeadBucket");
        assert_eq!(
            s3(Method::GET, "/b", Some("list-type=2&prefix=x")),
            "ListObjectsV2"
        );
        assert_eq!(
            s3(Method::GET, "/b", Some("versions")),
            "ListObjectVersions"
        );
        assert_eq!(s3(Method::POST, "/b", Some("delete")), "DeleteObjects");
        assert_eq!(
            s3(Method::PUT, "/b", Some("versioning")),
            "PutBucketVersioning"
        );
        assert_eq!(s3(Method::GET, "/b", Some("policy")), "GetBucketPolicy");
        assert_eq!(
            s3(Method::DELETE, "/b", Some("policy")),
            "DeleteBucketPolicy"
        );
        assert_eq!(s3(Method::PUT, "/b/k/with/slashes", None), "PutObject");
        assert_eq!(s3(Method::GET, "/b/k", None), "GetObject");
        assert_eq!(s3(Method::HEAD, "/b/k", None), "HeadObject");
        assert_eq!(
            s3(Method::DELETE, "/b/k", Some("versionId=1")),
            "DeleteObject"
        );
        assert_eq!(s3(Method::PUT, "/b/k", Some("tagging")), "PutObjectTagging");
        assert_eq!(
            s3(Method::POST, "/b/k", Some("uploads")),
            "CreateMultipartUpload"
        );
        assert_eq!(
            s3(Method::PUT, "/b/k", Some("partNumber=1&uploadId=u")),
            "UploadPart"
        );
        assert_eq!(
            s3(Method::POST, "/b/k", Some("uploadId=u")),
            "CompleteMultipartUpload"
        );
        let mut copy = signed("s3");
        copy.insert("x-amz-copy-source", "/b/src".parse().unwrap());
        assert_eq!(
            classify(&Method::PUT, "/b/k", None, &copy, b"").action,
            "CopyObject"
        );
    }

    #[test]
    fn query_api_requests_are_named_by_their_action_and_signing_service() {
        let mut h = signed("rds");
        h.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded; charset=utf-8"
                .parse()
                .unwrap(),
        );
        let call = classify(
            &Method::POST,
            "/",
            None,
            &h,
            b"Action=CreateDBInstance&Version=2014-10-31&DBInstanceIdentifier=db-1",
        );
        assert_eq!(
            (call.service.as_str(), call.action.as_str()),
            ("rds", "CreateDBInstance")
        );
        assert_eq!(call.param("DBInstanceIdentifier"), Some("db-1"));
        assert!(call.is_query_api());

        // IAM at the S3 endpoint, told apart by its signing name.
        let mut h = signed("iam");
        h.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        let call = classify(
            &Method::POST,
            "/",
            None,
            &h,
            b"Action=CreateUser&Version=2010-05-08&UserName=u",
        );
        assert_eq!(
            (call.service.as_str(), call.action.as_str()),
            ("iam", "CreateUser")
        );

        // Unsigned: by the API version; a GET with the action in the query string.
        let call = classify(
            &Method::GET,
            "/",
            Some("Action=DescribeDBInstances&Version=2014-10-31"),
            &HeaderMap::new(),
            b"",
        );
        assert_eq!(
            (call.service.as_str(), call.action.as_str()),
            ("rds", "DescribeDBInstances")
        );

        // An S3 object named by a form upload stays S3.
        let mut h = signed("s3");
        h.insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().unwrap(),
        );
        let call = classify(&Method::PUT, "/b/k", None, &h, b"Action=x");
        assert_eq!(
            (call.service.as_str(), call.action.as_str()),
            ("s3", "PutObject")
        );
        assert!(!call.is_query_api());

        let moto = classify(
            &Method::POST,
            "/moto-api/recorder/start-recording",
            None,
            &HeaderMap::new(),
            b"",
        );
        assert_eq!(moto.service, "moto");
    }
}
