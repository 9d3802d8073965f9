//! Client of the NetApp StorageGRID grid and tenant management API (`/api/v4`), following the
//! contract in `shared/reference/storagegrid-api.md`.
//!
//! One [`Client`] serves one grid. It signs in on demand with the [`Login`] each call is given
//! (the grid administrator, or a tenant's root user), keeps one token per login until it
//! expires, and signs in again once when a token is refused with 401. Every call goes through
//! [`measured`] and fails with an [`Error`] whose class tells the controllers what
//! to do: only [`Error::NotFound`] means "gone".
//!
//! This module is the client core (construction, tokens, request plumbing, error
//! classification); the calls are in `grid` (grid administrator: accounts) and `tenant` (tenant
//! user: containers, users, groups, access keys).

mod error;
mod grid;
mod model;
mod tenant;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{CACHE_CONTROL, EXPIRES, HeaderMap};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use sha2::{Digest, Sha256};

pub use error::Error;
use error::{classify, data, error_message};
pub use model::{
    AccessKey, Account, AccountPolicy, AccountSpec, BucketUsage, Container, DrainState, Group,
    GroupPolicies, KeyOwner, Login, ManagementPolicy, NewContainer, NewGroup, NewUser, ObjectLock,
    Sensitive, Usage, User,
};

use crate::backends::call::measured;
use crate::backends::rate::RateLimit;
use crate::config::{BackendTimeouts, TlsConfig};
use crate::metrics::Metrics;

/// The `backend` label of keeper's backend metrics for this client.
pub const BACKEND: &str = "storagegrid";

/// Tokens are dropped this long before the server says they expire, so a call never races
/// the expiry.
const EXPIRY_MARGIN: Duration = Duration::from_secs(60);
/// Used when the login answer has neither a usable `Expires` nor `max-age` header. Short, since
/// a 401 costs only one extra login.
const FALLBACK_TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Page size when listing accounts.
const ACCOUNT_PAGE: usize = 100;
/// How many times a request the grid did not act on (429, 503) is sent in all, and the pause
/// before the first resend (it doubles).
const ATTEMPTS: u32 = 3;
const FIRST_RESEND_AFTER: Duration = Duration::from_millis(200);

/// The client could not be built from the provider configuration.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("cannot read the CA bundle {path}: {source}")]
    CaBundleRead {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid CA bundle {path}: {source}")]
    CaBundle {
        path: std::path::PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
    #[error("invalid admin endpoint {0}")]
    Endpoint(String),
}

#[derive(Clone)]
struct Token {
    value: Sensitive,
    valid_until: Instant,
}

/// Tokens are cached per login; the password is part of the key (hashed, so the cache holds no
/// password) so that changed credentials sign in again instead of reusing the old session.
type SessionKey = (Option<String>, String, [u8; 32]);

fn session_key(login: &Login) -> SessionKey {
    let digest = Sha256::digest(login.password.0.as_bytes());
    (
        login.account_id.clone(),
        login.username.clone(),
        digest.into(),
    )
}

/// One request to the management API: the login that signs it, its name (in metrics, errors and
/// logs), and what it sends to `path` below `/api/v4/`.
struct Call<'a, B> {
    login: &'a Login,
    operation: &'static str,
    method: Method,
    path: &'a str,
    /// Sent as JSON.
    body: Option<&'a B>,
}

impl<'a> Call<'a, ()> {
    fn get(login: &'a Login, operation: &'static str, path: &'a str) -> Self {
        Call::new(login, operation, Method::GET, path, None)
    }

    fn delete(login: &'a Login, operation: &'static str, path: &'a str) -> Self {
        Call::new(login, operation, Method::DELETE, path, None)
    }
}

impl<'a, B: Serialize> Call<'a, B> {
    fn new(
        login: &'a Login,
        operation: &'static str,
        method: Method,
        path: &'a str,
        body: Option<&'a B>,
    ) -> Self {
        Call {
            login,
            operation,
            method,
            path,
            body,
        }
    }
}

/// A StorageGRID management API client (cheap to clone; clones share the token cache).
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `<admin endpoint>/api/v4/`.
    base: Url,
    metrics: Arc<Metrics>,
    /// The provider's request rate, shared with its S3 clients.
    rate_limit: RateLimit,
    tokens: Arc<Mutex<HashMap<SessionKey, Token>>>,
}

impl Client {
    /// A client for the admin node at `endpoint`. TLS certificates are verified against the
    /// system roots plus the configured CA bundle; `insecureSkipVerify` turns verification off
    /// and says so in the log.
    pub fn new(endpoint: &Url, tls: &TlsConfig, metrics: Arc<Metrics>) -> Result<Self, BuildError> {
        Self::with_timeouts(
            endpoint,
            tls,
            &BackendTimeouts::default(),
            RateLimit::default(),
            metrics,
        )
    }

    /// As [`Client::new`], with the configured timeouts and the provider's request rate. Bucket
    /// deletes can take a while on a real grid (the docs warn of "a few minutes"); a timeout is
    /// transient, so the caller looks again later.
    pub fn with_timeouts(
        endpoint: &Url,
        tls: &TlsConfig,
        timeouts: &BackendTimeouts,
        rate_limit: RateLimit,
        metrics: Arc<Metrics>,
    ) -> Result<Self, BuildError> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeouts.request)
            .connect_timeout(timeouts.connect)
            .user_agent(concat!("keeper/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &tls.ca_bundle_file {
            let pem = std::fs::read(path).map_err(|source| BuildError::CaBundleRead {
                path: path.clone(),
                source,
            })?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| {
                BuildError::CaBundle {
                    path: path.clone(),
                    source,
                }
            })?;
            builder = builder.tls_certs_merge(certs);
        }
        if tls.insecure_skip_verify {
            tracing::warn!(
                endpoint = %endpoint,
                "TLS certificate verification is OFF for this StorageGRID endpoint (insecureSkipVerify); use only for test grids"
            );
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        let http = builder.build().map_err(BuildError::Http)?;
        let mut root = endpoint.clone();
        if !root.path().ends_with('/') {
            root.set_path(&format!("{}/", root.path()));
        }
        let base = root
            .join("api/v4/")
            .map_err(|e| BuildError::Endpoint(format!("{endpoint}: {e}")))?;
        Ok(Client {
            http,
            base,
            metrics,
            rate_limit,
            tokens: Arc::default(),
        })
    }

    /// A call whose answer carries `data`.
    async fn call<B: Serialize, T: DeserializeOwned>(&self, call: Call<'_, B>) -> Result<T, Error> {
        measured(
            &self.metrics,
            &self.rate_limit,
            BACKEND,
            call.operation,
            async {
                let text = self.authorized(&call).await?;
                data(call.operation, &text)
            },
        )
        .await
    }

    /// A call whose answer body does not matter (204 deletes, PUTs keeper does not read).
    async fn call_empty<B: Serialize>(&self, call: Call<'_, B>) -> Result<(), Error> {
        measured(
            &self.metrics,
            &self.rate_limit,
            BACKEND,
            call.operation,
            async { self.authorized(&call).await.map(|_| ()) },
        )
        .await
    }

    /// Sends the request, and again (at most [`ATTEMPTS`] times in all, after a pause that starts
    /// at [`FIRST_RESEND_AFTER`] and doubles) while the grid answers 429 or 503: it did not act
    /// on the request, so resending even a create is safe, as the AWS SDKs do. A reconcile makes
    /// a dozen grid calls, and one that fails redoes them all after backing off: without this, a
    /// grid refusing a fifth of its requests let a reconcile through one time in fourteen.
    async fn authorized<B: Serialize>(&self, call: &Call<'_, B>) -> Result<String, Error> {
        let mut pause = FIRST_RESEND_AFTER;
        for _ in 1..ATTEMPTS {
            match self.authorized_once(call).await {
                Err(e) if e.not_acted_on() => {
                    tracing::debug!(error = %e, "sending again");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                answer => return answer,
            }
        }
        self.authorized_once(call).await
    }

    /// Sends the request with a (cached or fresh) token; on 401 signs in again once and resends.
    async fn authorized_once<B: Serialize>(&self, call: &Call<'_, B>) -> Result<String, Error> {
        let Call {
            login,
            operation,
            ref method,
            path,
            body,
        } = *call;
        let url = self.url(operation, path)?;
        let mut fresh = false;
        loop {
            let token = match self.cached_token(login) {
                Some(token) => token,
                None => {
                    fresh = true;
                    self.sign_in(login, operation).await?
                }
            };
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .bearer_auth(&token.0)
                .header(reqwest::header::ACCEPT, "application/json");
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request
                .send()
                .await
                .map_err(|source| Error::Transport { operation, source })?;
            let status = response.status();
            let text = response
                .text()
                .await
                .map_err(|source| Error::Transport { operation, source })?;
            if status == StatusCode::UNAUTHORIZED {
                self.forget_token(login);
                if fresh {
                    return Err(Error::Unauthorized {
                        operation,
                        message: error_message(&text),
                    });
                }
                // The cached token expired or was revoked: one fresh sign-in, one more try.
                continue;
            }
            return if status.is_success() {
                Ok(text)
            } else {
                Err(classify(operation, status, &text))
            };
        }
    }

    fn url(&self, operation: &'static str, path: &str) -> Result<Url, Error> {
        self.base.join(path).map_err(|e| Error::InvalidResponse {
            operation,
            message: format!("cannot build the URL for {path:?}: {e}"),
        })
    }

    fn cached_token(&self, login: &Login) -> Option<Sensitive> {
        let tokens = self.tokens.lock().expect("token cache poisoned");
        tokens
            .get(&session_key(login))
            .filter(|t| Instant::now() < t.valid_until)
            .map(|t| t.value.clone())
    }

    fn forget_token(&self, login: &Login) {
        self.tokens
            .lock()
            .expect("token cache poisoned")
            .remove(&session_key(login));
    }

    /// `POST /authorize`; a 401 here means the credentials are wrong.
    async fn sign_in(&self, login: &Login, operation: &'static str) -> Result<Sensitive, Error> {
        let url = self.url(operation, "authorize")?;
        let mut body = json!({
            "username": login.username,
            "password": login.password.0,
            "cookie": false,
            "csrfToken": false,
        });
        if let Some(account) = &login.account_id {
            body["accountId"] = json!(account);
        }
        let response = self
            .http
            .post(url)
            .header(reqwest::header::ACCEPT, "application/json")
            .json(&body)
            .send()
            .await
            .map_err(|source| Error::Transport { operation, source })?;
        let status = response.status();
        let lifetime = token_lifetime(response.headers());
        let text = response
            .text()
            .await
            .map_err(|source| Error::Transport { operation, source })?;
        if status == StatusCode::UNAUTHORIZED {
            return Err(Error::BadCredentials {
                operation,
                username: login.username.clone(),
                message: error_message(&text),
            });
        }
        if !status.is_success() {
            return Err(classify(operation, status, &text));
        }
        let token: String = data(operation, &text)?;
        let token = Sensitive(token);
        self.tokens.lock().expect("token cache poisoned").insert(
            session_key(login),
            Token {
                value: token.clone(),
                valid_until: Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN),
            },
        );
        Ok(token)
    }
}

/// Whether `marker` is one of the description's whitespace-separated words (so that
/// `uid=1` does not match `uid=12`).
pub fn description_has_marker(description: Option<&str>, marker: &str) -> bool {
    description.is_some_and(|d| d.split_whitespace().any(|word| word == marker))
}

/// Percent-encodes one path segment (ids, bucket and user names are simple, but a stray `/` or
/// `?` must not change which resource is addressed).
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// How long a fresh token lives: from `Expires`, else `Cache-Control: max-age`, else a short
/// default.
fn token_lifetime(headers: &HeaderMap) -> Duration {
    let from_expires = headers
        .get(EXPIRES)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            k8s_openapi::jiff::fmt::rfc2822::DateTimeParser::new()
                .parse_timestamp(v)
                .ok()
        })
        .map(|expires| {
            let seconds = expires.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
            // An `Expires` in the past (clock skew) means: do not reuse the token.
            Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
        });
    let from_max_age = || {
        headers
            .get(CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.split(',')
                    .filter_map(|d| d.trim().strip_prefix("max-age="))
                    .find_map(|s| s.parse::<u64>().ok())
            })
            .map(Duration::from_secs)
    };
    from_expires
        .or_else(from_max_age)
        .unwrap_or(FALLBACK_TOKEN_LIFETIME)
}
