//! The IAM calls keeper makes on S3-compatible providers that have an IAM API (AWS IAM, Ceph
//! RGW): one user per bucket, its inline policy and its access keys. Every call answers what IAM
//! says now; "already gone" and "already there" are answered, not failed, where the caller asked
//! for that state. Errors are classified here into the one [`BackendError`].

use aws_sdk_iam::Client;
use aws_sdk_iam::config::http::HttpResponse;
use aws_sdk_iam::config::retry::RetryConfig;
use aws_sdk_iam::config::timeout::TimeoutConfig;
use aws_sdk_iam::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_iam::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_iam::types::Tag;

use crate::backends::Keys;
use crate::backends::call::measured;
use crate::backends::rate::RateLimit;
use crate::backends::s3::https_client_trusting;
use crate::config::BackendTimeouts;
use crate::error::{BackendError, ErrorClass};
use crate::metrics::Metrics;

/// Label of this backend in `keeper_backend_requests_total{backend}`.
const BACKEND: &str = "iam";

/// Where and as whom to call IAM.
#[derive(Clone)]
pub struct IamSettings {
    /// The IAM endpoint; `None` for AWS IAM (the SDK's own endpoint resolution).
    pub endpoint: Option<String>,
    pub region: String,
    pub keys: Keys,
    /// `runtime.backendTimeouts`, as for every other backend client.
    pub timeouts: BackendTimeouts,
    /// The provider's `tls.caBundleFile` (a Ceph RGW with a private CA serves IAM too), already
    /// checked when the provider registry was built.
    pub ca_bundle: Option<Vec<u8>>,
    /// The provider's request rate, shared with its S3 clients.
    pub rate_limit: RateLimit,
}

/// An IAM client bound to one endpoint and one set of (admin) credentials.
#[derive(Clone)]
pub struct IamStore {
    client: Client,
    rate_limit: RateLimit,
}

/// A user's access key as IAM lists it (the secret is only ever shown at creation).
pub type AccessKeyId = String;

/// Error codes that heal by themselves.
const TRANSIENT_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "ServiceFailure",
    "ServiceUnavailable",
    "ExpiredToken",
    "RequestExpired",
];

fn classify<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> BackendError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let e = service.err();
            let code = e.code().unwrap_or("Unknown").to_string();
            let message = e.message().unwrap_or_default().to_string();
            let class = match code.as_str() {
                "NoSuchEntity" => ErrorClass::NotFound,
                // Something else changed the user meanwhile (a concurrent create, keys or
                // policies still attached, the two-keys limit): the next look decides.
                "EntityAlreadyExists"
                | "DeleteConflict"
                | "LimitExceeded"
                | "ConcurrentModification" => ErrorClass::Conflict,
                c if TRANSIENT_CODES.contains(&c) => ErrorClass::Transient,
                _ if status >= 500 || status == 429 => ErrorClass::Transient,
                // Access denied, bad credentials, validation: the platform team's to fix.
                _ => ErrorClass::Permanent,
            };
            BackendError::new(BACKEND, operation, class, code, message)
        }
        // Timeouts, connection failures and unparseable answers are worth another try.
        _ => BackendError::new(
            BACKEND,
            operation,
            ErrorClass::Transient,
            "Unavailable",
            DisplayErrorContext(&err).to_string(),
        ),
    }
}

/// `Ok(None)` when IAM says the thing does not exist.
fn found<T>(result: Result<T, BackendError>) -> Result<Option<T>, BackendError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.is_gone() => Ok(None),
        Err(e) => Err(e),
    }
}

impl IamStore {
    pub fn new(settings: &IamSettings) -> Self {
        let credentials = Credentials::new(
            settings.keys.access_key_id.clone(),
            settings.keys.secret_access_key.clone(),
            None,
            None,
            "keeper",
        );
        let mut config = aws_sdk_iam::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(settings.region.clone()))
            .credentials_provider(credentials)
            // A reconcile must not hang on a stalled backend.
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(settings.timeouts.connect)
                    .operation_attempt_timeout(settings.timeouts.request)
                    .build(),
            );
        if let Some(endpoint) = &settings.endpoint {
            config = config.endpoint_url(endpoint.clone());
        }
        if let Some(pem) = &settings.ca_bundle {
            config = config.http_client(
                https_client_trusting(pem)
                    .expect("the CA bundle was checked when the registry was built"),
            );
        }
        IamStore {
            client: Client::from_conf(config.build()),
            rate_limit: settings.rate_limit.clone(),
        }
    }

    /// Sends one IAM request at the provider's request rate, counted in the backend metrics and
    /// classified. Not an async fn: it hands the request on at once, to be boxed (see
    /// [`measured`]).
    fn call<'a, T: 'a, E>(
        &'a self,
        metrics: &'a Metrics,
        operation: &'static str,
        request: impl std::future::Future<Output = Result<T, SdkError<E, HttpResponse>>> + 'a,
    ) -> impl std::future::Future<Output = Result<T, BackendError>> + 'a
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        measured(metrics, &self.rate_limit, BACKEND, operation, async move {
            request.await.map_err(|e| classify(operation, e))
        })
    }

    /// Creates the user under `path` with `tags`; a user of that name already there is fine.
    /// Whether this call created it (a new user has no keys and no policies yet).
    pub async fn create_user(
        &self,
        metrics: &Metrics,
        user: &str,
        path: &str,
        tags: &[(&str, &str)],
    ) -> Result<bool, BackendError> {
        let tags = tags
            .iter()
            .map(|(k, v)| {
                Tag::builder().key(*k).value(*v).build().map_err(|e| {
                    BackendError::new(
                        BACKEND,
                        "create_user",
                        ErrorClass::Permanent,
                        "InvalidTag",
                        e.to_string(),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let request = self
            .client
            .create_user()
            .user_name(user)
            .path(path)
            .set_tags(Some(tags))
            .send();
        match self.call(metrics, "create_user", request).await {
            Ok(_) => Ok(true),
            // Created by an earlier attempt whose answer was lost, or by another writer.
            Err(e) if e.code == "EntityAlreadyExists" => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Sets the user's inline policy `name` to `document` (replacing it if present).
    pub async fn put_user_policy(
        &self,
        metrics: &Metrics,
        user: &str,
        name: &str,
        document: &str,
    ) -> Result<(), BackendError> {
        let request = self
            .client
            .put_user_policy()
            .user_name(user)
            .policy_name(name)
            .policy_document(document)
            .send();
        self.call(metrics, "put_user_policy", request).await?;
        Ok(())
    }

    /// The ids of the user's access keys (none when the user does not exist).
    pub async fn access_keys(
        &self,
        metrics: &Metrics,
        user: &str,
    ) -> Result<Vec<AccessKeyId>, BackendError> {
        Ok(self
            .user_access_keys(metrics, user)
            .await?
            .unwrap_or_default())
    }

    /// The ids of the user's access keys; `None` when the user does not exist. One read that
    /// answers both whether the user is there and which keys it has.
    pub async fn user_access_keys(
        &self,
        metrics: &Metrics,
        user: &str,
    ) -> Result<Option<Vec<AccessKeyId>>, BackendError> {
        let request = self.client.list_access_keys().user_name(user).send();
        Ok(
            found(self.call(metrics, "list_access_keys", request).await)?.map(|out| {
                out.access_key_metadata()
                    .iter()
                    .filter_map(|k| k.access_key_id().map(str::to_string))
                    .collect()
            }),
        )
    }

    /// The document of the user's inline policy `name`; `None` when the user or the policy does
    /// not exist. IAM answers the document URL-encoded (RFC 3986); some stores answer it as
    /// stored: decoding keeper's own plain JSON (no `%` in it) changes nothing, so it is decoded
    /// either way.
    pub async fn user_policy(
        &self,
        metrics: &Metrics,
        user: &str,
        name: &str,
    ) -> Result<Option<String>, BackendError> {
        let request = self
            .client
            .get_user_policy()
            .user_name(user)
            .policy_name(name)
            .send();
        let Some(out) = found(self.call(metrics, "get_user_policy", request).await)? else {
            return Ok(None);
        };
        // Lossy: a document that does not decode cannot be keeper's, and is written again.
        Ok(Some(
            percent_encoding::percent_decode_str(out.policy_document())
                .decode_utf8_lossy()
                .into_owned(),
        ))
    }

    /// A new access key of the user. Sent once: the SDK resends a request whose answer was lost,
    /// and IAM, which had acted on the first, makes a second key whose twin nobody ever learns
    /// of. A failure here is retried by the reconcile, which lists the user's keys first and so
    /// deletes such a key once a new one is published.
    pub async fn create_access_key(
        &self,
        metrics: &Metrics,
        user: &str,
    ) -> Result<Keys, BackendError> {
        let request = self
            .client
            .create_access_key()
            .user_name(user)
            .customize()
            .config_override(aws_sdk_iam::Config::builder().retry_config(RetryConfig::disabled()))
            .send();
        let out = self.call(metrics, "create_access_key", request).await?;
        let key = out.access_key().ok_or_else(|| {
            BackendError::new(
                BACKEND,
                "create_access_key",
                ErrorClass::Transient,
                "InvalidResponse",
                "CreateAccessKey answered without a key",
            )
        })?;
        Ok(Keys {
            access_key_id: key.access_key_id().to_string(),
            secret_access_key: key.secret_access_key().to_string(),
        })
    }

    /// Deletes an access key; already gone counts as deleted.
    pub async fn delete_access_key(
        &self,
        metrics: &Metrics,
        user: &str,
        access_key_id: &str,
    ) -> Result<(), BackendError> {
        let request = self
            .client
            .delete_access_key()
            .user_name(user)
            .access_key_id(access_key_id)
            .send();
        found(self.call(metrics, "delete_access_key", request).await)?;
        Ok(())
    }

    /// Deletes the user's inline policy `policy`, then the user (IAM refuses to delete a user
    /// that still has policies or keys: the caller deletes the keys first); already gone counts
    /// as deleted. Only when IAM refuses the user for policies someone else added are they
    /// listed and deleted too: keeper knows the one policy it puts, so it does not list first.
    pub async fn delete_user(
        &self,
        metrics: &Metrics,
        user: &str,
        policy: &str,
    ) -> Result<(), BackendError> {
        self.delete_user_policy(metrics, user, policy).await?;
        let request = self.client.delete_user().user_name(user).send();
        match found(self.call(metrics, "delete_user", request).await) {
            Err(e) if e.code == "DeleteConflict" => {}
            other => return other.map(|_| ()),
        }
        let request = self.client.list_user_policies().user_name(user).send();
        let Some(policies) = found(self.call(metrics, "list_user_policies", request).await)? else {
            return Ok(());
        };
        for policy in policies.policy_names() {
            self.delete_user_policy(metrics, user, policy).await?;
        }
        let request = self.client.delete_user().user_name(user).send();
        found(self.call(metrics, "delete_user", request).await)?;
        Ok(())
    }

    /// Deletes one inline policy; a missing one (or user) counts as deleted.
    async fn delete_user_policy(
        &self,
        metrics: &Metrics,
        user: &str,
        policy: &str,
    ) -> Result<(), BackendError> {
        let request = self
            .client
            .delete_user_policy()
            .user_name(user)
            .policy_name(policy)
            .send();
        found(self.call(metrics, "delete_user_policy", request).await)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::s3::tests::Moto;

    fn iam(moto: &Moto, ca_bundle: Option<Vec<u8>>) -> IamStore {
        IamStore::new(&IamSettings {
            endpoint: Some(moto.endpoint.clone()),
            region: "us-east-1".into(),
            keys: Keys {
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
            },
            timeouts: BackendTimeouts::default(),
            ca_bundle,
            rate_limit: RateLimit::default(),
        })
    }

    /// A server on 127.0.0.1 that reads each request and closes the connection without an
    /// answer (as if the answer were lost after IAM acted); counts the requests.
    async fn answers_lost() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buf = [0u8; 16384];
                if stream.read(&mut buf).await.unwrap_or(0) > 0 {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn a_key_whose_answer_was_lost_is_not_created_again_by_a_resend() {
        let (url, seen) = answers_lost().await;
        let store = IamStore::new(&IamSettings {
            endpoint: Some(url),
            region: "us-east-1".into(),
            keys: Keys {
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
            },
            timeouts: BackendTimeouts::default(),
            ca_bundle: None,
            rate_limit: RateLimit::default(),
        });
        let metrics = Metrics::new();
        let err = store.create_access_key(&metrics, "u").await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient, "{err}");
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Idempotent calls are still resent by the SDK.
        store.access_keys(&metrics, "u").await.unwrap_err();
        assert!(seen.load(std::sync::atomic::Ordering::SeqCst) > 2);
    }

    #[tokio::test]
    async fn a_user_goes_with_keepers_policy_and_any_other_policy_someone_added() {
        let moto = Moto::start();
        let metrics = Metrics::new();
        let iam = iam(&moto, None);
        let document = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:ListBucket","Resource":"*"}]}"#;
        for (user, policies) in [
            ("plain", &["keeper"][..]),
            ("added", &["keeper", "someone"]),
        ] {
            assert!(iam.create_user(&metrics, user, "/", &[]).await.unwrap());
            for policy in policies {
                iam.put_user_policy(&metrics, user, policy, document)
                    .await
                    .unwrap();
            }
            iam.delete_user(&metrics, user, "keeper").await.unwrap();
            assert!(
                iam.create_user(&metrics, user, "/", &[]).await.unwrap(),
                "{user} was deleted"
            );
        }
        // Already gone: deleted all the same.
        iam.delete_user(&metrics, "nobody", "keeper").await.unwrap();
    }

    #[tokio::test]
    async fn the_providers_ca_bundle_makes_a_self_signed_iam_endpoint_trusted() {
        let (moto, pem) = Moto::start_tls();
        let metrics = Metrics::new();
        // Without the bundle the certificate is refused: a transient error, nothing is "gone".
        let err = iam(&moto, None)
            .access_keys(&metrics, "nobody")
            .await
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::Transient, "{err}");
        assert_eq!(
            iam(&moto, Some(pem))
                .access_keys(&metrics, "nobody")
                .await
                .unwrap(),
            Vec::<AccessKeyId>::new()
        );
    }
}
