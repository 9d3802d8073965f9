//! Authentication, impersonation and the authorization gate in front of every API request, as
//! kube-apiserver runs them (module [`crate::rbac`] decides):
//!
//! - **Bearer tokens**: the static tokens of `--token-auth-file` (kube-apiserver's CSV format
//!   `token,user,uid,"group1,group2"`), the admin token written into `--kubeconfig`
//!   (`keeper-dev-token`, user `keeper-dev` in `system:masters`), and ServiceAccount tokens
//!   minted by the TokenRequest subresource (`kubectl create token NAME -n NS`), valid until
//!   they expire or the ServiceAccount is deleted (they are opaque strings, not JWTs). A
//!   ServiceAccount is user `system:serviceaccount:NS:NAME` in groups `system:serviceaccounts`,
//!   `system:serviceaccounts:NS`; everyone authenticated is also in `system:authenticated`.
//!   No token or an unknown one: 401 `Unauthorized` (kube with `--anonymous-auth=false`).
//! - **Impersonation** (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`), allowed
//!   when the caller may `impersonate` the users/groups/serviceaccounts/uids named (RBAC, so
//!   `system:masters` may), with the groups kube adds (a ServiceAccount's own groups when no
//!   group is given, `system:authenticated`): `kubectl --as=system:serviceaccount:NS:NAME`.
//! - **Request attributes** parsed from the path like kube's `RequestInfoFactory` (a list or
//!   watch with a `metadata.name` field selector is authorized for that name; a namespace is its
//!   own namespace), a 403 `Forbidden` in kube-apiserver's words when RBAC denies.
//! - **SelfSubjectAccessReview** (`kubectl auth can-i`) and **TokenRequest** are answered here.
//!
//! `/debug/*` (the emulator's own request log and test hooks, not part of the Kubernetes API) is
//! served without authentication by design: it is the harness's side channel, the server binds
//! loopback addresses only, and tests read it whatever identity they hold.

use crate::error::{ApiError, ApiResult};
use crate::rbac;
use crate::store::{State, meta_str};
use bytes::Bytes;
use http::{HeaderMap, Method, header};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The token the emulator writes into `--kubeconfig`: an administrator (`system:masters`).
pub const ADMIN_TOKEN: &str = "keeper-dev-token";
const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const SA_PREFIX: &str = "system:serviceaccount:";
/// kube's default lifetime of a requested token (`kubectl create token` without `--duration`).
const DEFAULT_TOKEN_SECONDS: u64 = 3600;

/// Who makes a request (kube's `user.Info`, as admission webhooks see it).
#[derive(Debug, Clone, PartialEq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    fn new(name: &str, uid: &str, groups: &[&str]) -> Self {
        UserInfo {
            name: name.into(),
            uid: uid.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    /// The AdmissionReview `userInfo` form.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        v
    }

    /// kube's authenticated-group adder: `system:authenticated` unless already there.
    fn authenticated(mut self) -> Self {
        if !self
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            self.groups.push(AUTHENTICATED.into());
        }
        self
    }
}

fn service_account_user(ns: &str, name: &str, uid: &str) -> UserInfo {
    UserInfo::new(
        &format!("{SA_PREFIX}{ns}:{name}"),
        uid,
        &[
            "system:serviceaccounts",
            &format!("system:serviceaccounts:{ns}"),
        ],
    )
}

/// The static token file of kube-apiserver's `--token-auth-file`: `token,user,uid[,"g1,g2"]`
/// per line; blank lines and `#` comments are skipped.
pub fn parse_token_file(text: &str) -> anyhow::Result<HashMap<String, UserInfo>> {
    let mut tokens = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut cols = line.splitn(4, ',');
        let (Some(token), Some(user), Some(uid)) = (cols.next(), cols.next(), cols.next()) else {
            anyhow::bail!("line {}: expected token,user,uid[,\"groups\"]", i + 1);
        };
        let groups: Vec<&str> = cols
            .next()
            .map(|g| g.trim().trim_matches('"'))
            .into_iter()
            .flat_map(|g| g.split(','))
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .collect();
        if token.is_empty() || user.is_empty() {
            anyhow::bail!("line {}: the token and the user must not be empty", i + 1);
        }
        tokens.insert(token.to_string(), UserInfo::new(user, uid, &groups));
    }
    Ok(tokens)
}

/// A token minted by TokenRequest.
#[derive(Debug, Clone)]
struct BoundToken {
    namespace: String,
    name: String,
    uid: String,
    expires: SystemTime,
}

/// The tokens this server accepts.
#[derive(Debug, Default)]
pub struct Authenticator {
    static_tokens: HashMap<String, UserInfo>,
    service_account_tokens: Mutex<HashMap<String, BoundToken>>,
}

impl Authenticator {
    pub fn new(static_tokens: &HashMap<String, UserInfo>) -> Self {
        let mut tokens = static_tokens.clone();
        tokens.insert(
            ADMIN_TOKEN.into(),
            UserInfo::new("keeper-dev", "", &[rbac::PRIVILEGED_GROUP]),
        );
        Authenticator {
            static_tokens: tokens,
            service_account_tokens: Mutex::new(HashMap::new()),
        }
    }

    fn authenticate(&self, st: &State, headers: &HeaderMap) -> Option<UserInfo> {
        let token = headers
            .get(header::AUTHORIZATION)?
            .to_str()
            .ok()?
            .strip_prefix("Bearer ")?
            .trim();
        if let Some(u) = self.static_tokens.get(token) {
            return Some(u.clone().authenticated());
        }
        let bound = self
            .service_account_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()?;
        // As kube's service-account lookup: the token dies with its ServiceAccount.
        let sa = st.get("/serviceaccounts", &bound.namespace, &bound.name)?;
        (meta_str(sa, "uid") == bound.uid && SystemTime::now() < bound.expires).then(|| {
            service_account_user(&bound.namespace, &bound.name, &bound.uid).authenticated()
        })
    }

    fn mint(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        lifetime: Duration,
    ) -> (String, SystemTime) {
        let token = format!(
            "sa.{}.{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let expires = SystemTime::now() + lifetime;
        self.service_account_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                token.clone(),
                BoundToken {
                    namespace: namespace.into(),
                    name: name.into(),
                    uid: uid.into(),
                    expires,
                },
            );
        (token, expires)
    }
}

/// kube's authorizer attributes of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributes {
    pub resource_request: bool,
    pub verb: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The URL path (what nonResourceURLs match).
    pub path: String,
}

impl Attributes {
    /// kube's `RequestInfoFactory.NewRequestInfo` for the paths this server serves.
    pub fn from_request(method: &Method, path: &str, query: &HashMap<String, String>) -> Self {
        let mut a = Attributes {
            resource_request: false,
            verb: method.as_str().to_lowercase(),
            api_group: String::new(),
            api_version: String::new(),
            resource: String::new(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
            path: path.to_string(),
        };
        let parts: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            })
            .collect();
        let rest = match parts.first().map(String::as_str) {
            Some("api") if parts.len() >= 3 => {
                a.api_version = parts[1].clone();
                &parts[2..]
            }
            Some("apis") if parts.len() >= 4 => {
                a.api_group = parts[1].clone();
                a.api_version = parts[2].clone();
                &parts[3..]
            }
            _ => return a,
        };
        a.resource_request = true;
        a.verb = match *method {
            Method::POST => "create",
            Method::GET | Method::HEAD => "get",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => "",
        }
        .into();
        let mut rest = rest;
        if rest[0] == "namespaces" && rest.len() > 1 {
            a.namespace = rest[1].clone();
            if rest.len() > 2 && !matches!(rest[2].as_str(), "status" | "finalize") {
                rest = &rest[2..];
            }
        }
        a.resource = rest[0].clone();
        if let Some(name) = rest.get(1) {
            a.name = name.clone();
        }
        if let Some(sub) = rest.get(2) {
            a.subresource = sub.clone();
        }
        if a.name.is_empty() && a.verb == "get" {
            a.verb = if matches!(query.get("watch").map(String::as_str), Some("true" | "1")) {
                "watch".into()
            } else {
                "list".into()
            };
            // kube authorizes a list or watch of one object (by field selector) for its name.
            if let Some(name) = query.get("fieldSelector").and_then(|fs| {
                let terms: Vec<&str> = fs.split(',').collect();
                terms.iter().find_map(|t| {
                    t.strip_prefix("metadata.name==")
                        .or_else(|| t.strip_prefix("metadata.name="))
                })
            }) {
                a.name = name.to_string();
            }
        }
        if a.name.is_empty() && a.verb == "delete" {
            a.verb = "deletecollection".into();
        }
        a
    }

    /// The request-log fields of a resource request.
    pub fn log_entry(&self) -> Option<Value> {
        self.resource_request.then(|| {
            json!({"verb": self.verb, "resource": self.resource, "subresource": self.subresource,
                "namespace": self.namespace, "name": self.name, "apiGroup": self.api_group,
                "apiVersion": self.api_version})
        })
    }

    /// kube-apiserver's 403 for these attributes (`responsewriters.Forbidden`).
    pub fn forbidden(&self, user: &str, reason: &str) -> ApiError {
        let what = if !self.resource_request {
            format!(
                "User \"{user}\" cannot {} path \"{}\"",
                self.verb, self.path
            )
        } else {
            let resource = if self.subresource.is_empty() {
                self.resource.clone()
            } else {
                format!("{}/{}", self.resource, self.subresource)
            };
            let scope = if self.namespace.is_empty() {
                "at the cluster scope".to_string()
            } else {
                format!("in the namespace \"{}\"", self.namespace)
            };
            format!(
                "User \"{user}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
                self.verb, self.api_group
            )
        };
        let why = if reason.is_empty() {
            what
        } else {
            format!("{what}: {reason}")
        };
        if self.resource.is_empty() {
            return ApiError::new(403, "Forbidden", format!("forbidden: {why}"));
        }
        ApiError::forbidden(&self.api_group, &self.resource, &self.name, &why)
    }
}

/// What the gate decided for one request.
pub enum Gate {
    /// Serve the request on behalf of this user.
    Pass(UserInfo),
    /// Answered here: refused (401, 403, bad impersonation) or a review/token request served.
    Answered(Box<Answer>),
}

/// A request the gate answered itself, and what the request log gets for it.
pub struct Answer {
    pub user: Option<UserInfo>,
    pub result: ApiResult<(u16, Value)>,
    pub log: Option<Value>,
}

/// Authenticates, impersonates and authorizes one request; answers SelfSubjectAccessReviews and
/// TokenRequests itself.
pub fn gate(
    authn: &Authenticator,
    st: &State,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Gate {
    if path == "/debug" || path.starts_with("/debug/") {
        return Gate::Pass(UserInfo::new("system:anonymous", "", &[UNAUTHENTICATED]));
    }
    let attrs = Attributes::from_request(method, path, query);
    let answered = |user: Option<UserInfo>, result| {
        Gate::Answered(Box::new(Answer {
            user,
            result,
            log: attrs.log_entry(),
        }))
    };
    let Some(authenticated) = authn.authenticate(st, headers) else {
        return answered(
            None,
            Err(ApiError::new(401, "Unauthorized", "Unauthorized")),
        );
    };
    let user = match impersonate(st, authenticated.clone(), headers) {
        Ok(u) => u,
        Err(e) => return answered(Some(authenticated), Err(e)),
    };
    let decision = rbac::authorize(st, &user, &attrs);
    if !decision.allowed {
        // Told apart in the log from other 403s (e.g. a terminating namespace), as kube's audit
        // annotation `authorization.k8s.io/decision: forbid` does.
        let mut log = attrs.log_entry();
        if let Some(entry) = log.as_mut() {
            entry["authorization"] = json!("forbid");
        }
        return Gate::Answered(Box::new(Answer {
            user: Some(user.clone()),
            result: Err(attrs.forbidden(&user.name, &decision.reason)),
            log,
        }));
    }
    let special = (
        attrs.api_group.as_str(),
        attrs.resource.as_str(),
        attrs.subresource.as_str(),
        attrs.verb.as_str(),
    );
    match special {
        ("authorization.k8s.io", "selfsubjectaccessreviews", "", "create") => {
            let result = decode(headers, body).and_then(|review| access_review(st, &user, review));
            answered(Some(user), result)
        }
        ("", "serviceaccounts", "token", "create") => {
            let result =
                decode(headers, body).and_then(|request| token_request(authn, st, &attrs, request));
            answered(Some(user), result)
        }
        _ => Gate::Pass(user),
    }
}

/// kube's impersonation filter: every `Impersonate-*` header must be allowed by an
/// `impersonate` grant to the caller.
fn impersonate(st: &State, caller: UserInfo, headers: &HeaderMap) -> ApiResult<UserInfo> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let user = values("Impersonate-User").into_iter().next();
    let groups = values("Impersonate-Group");
    let uid = values("Impersonate-Uid").into_iter().next();
    let Some(name) = user else {
        if groups.is_empty() && uid.is_none() {
            return Ok(caller);
        }
        return Err(ApiError::internal(format!(
            "requested impersonation of groups {groups:?} or uid {uid:?} without impersonating a user"
        )));
    };
    let asked = |resource: &str, group: &str, ns: &str, target: &str| Attributes {
        resource_request: true,
        verb: "impersonate".into(),
        api_group: group.into(),
        api_version: "v1".into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: ns.into(),
        name: target.into(),
        path: String::new(),
    };
    let service_account = name
        .strip_prefix(SA_PREFIX)
        .and_then(|rest| rest.split_once(':'));
    let mut checks = vec![match service_account {
        Some((ns, sa)) => asked("serviceaccounts", "", ns, sa),
        None => asked("users", "", "", &name),
    }];
    checks.extend(groups.iter().map(|g| asked("groups", "", "", g)));
    checks.extend(
        uid.iter()
            .map(|u| asked("uids", "authentication.k8s.io", "", u)),
    );
    for check in &checks {
        let decision = rbac::authorize(st, &caller, check);
        if !decision.allowed {
            return Err(check.forbidden(&caller.name, &decision.reason));
        }
    }
    let mut user = match (service_account, groups.is_empty()) {
        (Some((ns, sa)), true) => service_account_user(ns, sa, ""),
        _ => UserInfo {
            name: name.clone(),
            uid: String::new(),
            groups,
        },
    };
    user.uid = uid.unwrap_or_default();
    Ok(if name == "system:anonymous" {
        user
    } else {
        user.authenticated()
    })
}

fn decode(headers: &HeaderMap, body: &Bytes) -> ApiResult<Value> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.starts_with("application/vnd.kubernetes.protobuf") {
        return crate::protobuf::decode(body).map_err(|e| {
            ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("the body of the request could not be decoded: {e}"),
            )
        });
    }
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("json parse error: {e}")))
}

/// `POST .../selfsubjectaccessreviews`: may the caller (after impersonation) do what the spec asks?
fn access_review(st: &State, user: &UserInfo, mut review: Value) -> ApiResult<(u16, Value)> {
    let spec = &review["spec"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let attrs = if let Some(r) = spec.get("resourceAttributes").filter(|r| r.is_object()) {
        Attributes {
            resource_request: true,
            verb: s(&r["verb"]),
            api_group: s(&r["group"]),
            api_version: s(&r["version"]),
            resource: s(&r["resource"]),
            subresource: s(&r["subresource"]),
            namespace: s(&r["namespace"]),
            name: s(&r["name"]),
            path: String::new(),
        }
    } else if let Some(n) = spec.get("nonResourceAttributes").filter(|r| r.is_object()) {
        Attributes {
            resource_request: false,
            verb: s(&n["verb"]),
            path: s(&n["path"]),
            ..Attributes::from_request(&Method::GET, "/", &HashMap::new())
        }
    } else {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "",
            vec![crate::error::Cause::new(
                "FieldValueRequired",
                "spec.resourceAttributes",
                "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            )],
        ));
    };
    let decision = rbac::authorize(st, user, &attrs);
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    review["status"] = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        review["status"]["reason"] = json!(decision.reason);
    }
    Ok((201, review))
}

/// `POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`: a token for that ServiceAccount.
fn token_request(
    authn: &Authenticator,
    st: &State,
    attrs: &Attributes,
    mut request: Value,
) -> ApiResult<(u16, Value)> {
    let sa = st
        .get("/serviceaccounts", &attrs.namespace, &attrs.name)
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", &attrs.name))?;
    let seconds = request["spec"]["expirationSeconds"]
        .as_u64()
        .unwrap_or(DEFAULT_TOKEN_SECONDS);
    if seconds < 600 {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            &attrs.name,
            vec![crate::error::Cause::new(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            )],
        ));
    }
    let (token, expires) = authn.mint(
        &attrs.namespace,
        &attrs.name,
        meta_str(sa, "uid"),
        Duration::from_secs(seconds),
    );
    let expires = jiff::Timestamp::try_from(expires)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    request["apiVersion"] = json!("authentication.k8s.io/v1");
    request["kind"] = json!("TokenRequest");
    request["metadata"] = json!({"name": attrs.name, "namespace": attrs.namespace,
        "creationTimestamp": crate::store::now()});
    request["spec"]["expirationSeconds"] = json!(seconds);
    request["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok((201, request))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn attributes_follow_kubes_request_info() {
        let a = Attributes::from_request(
            &Method::PUT,
            "/apis/keeper.dev/v1alpha1/namespaces/ns/s3buckets/b/status",
            &q(&[]),
        );
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str(), a.resource.as_str()),
            ("update", "keeper.dev", "s3buckets")
        );
        assert_eq!(
            (
                a.subresource.as_str(),
                a.namespace.as_str(),
                a.name.as_str()
            ),
            ("status", "ns", "b")
        );
        let ns = Attributes::from_request(&Method::GET, "/api/v1/namespaces/team", &q(&[]));
        assert_eq!(
            (
                ns.resource.as_str(),
                ns.namespace.as_str(),
                ns.name.as_str()
            ),
            ("namespaces", "team", "team")
        );
        let watch = Attributes::from_request(
            &Method::GET,
            "/api/v1/namespaces/ns/secrets",
            &q(&[("watch", "true"), ("fieldSelector", "metadata.name=s")]),
        );
        assert_eq!((watch.verb.as_str(), watch.name.as_str()), ("watch", "s"));
        let dc =
            Attributes::from_request(&Method::DELETE, "/api/v1/namespaces/ns/secrets", &q(&[]));
        assert_eq!(dc.verb, "deletecollection");
        let disc = Attributes::from_request(&Method::GET, "/apis/keeper.dev/v1alpha1", &q(&[]));
        assert!(!disc.resource_request);
        assert_eq!(disc.verb, "get");
    }

    #[test]
    fn the_token_file_is_kubes_csv() {
        let t =
            parse_token_file("# admins\nt1,alice,1,\"system:masters,ops\"\n\nt2,bob,2\n").unwrap();
        assert_eq!(t["t1"].groups, vec!["system:masters", "ops"]);
        assert_eq!(t["t2"].name, "bob");
        assert!(t["t2"].groups.is_empty());
        assert!(parse_token_file("just-a-token\n").is_err());
    }
}
