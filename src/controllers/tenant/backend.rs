//! The backends a tenant lives on, behind two small traits so that tests swap them:
//! [`AccountBackend`] (StorageGRID: a real account with a root user and S3 keys) and
//! [`CredentialScope`] (an S3-compatible store: the provider's keys, verified and published).

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::plan::{AccountSettings, ObservedAccount};
use crate::backends::storagegrid::{
    self, Account, AccountPolicy, AccountSpec, KeyOwner, Login, description_has_marker,
};
use crate::metrics::{BackendOutcome, Metrics};

/// A backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(transparent)]
    Grid(#[from] storagegrid::Error),
    #[error("S3 endpoint refused the provider's credentials: {0}")]
    S3Refused(String),
    #[error("S3 endpoint unavailable: {0}")]
    S3Unavailable(String),
}

impl BackendError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, BackendError::Grid(e) if e.is_not_found())
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, BackendError::Grid(e) if e.is_conflict())
    }

    /// Errors retrying cannot fix; see [`storagegrid::Error::is_permanent`].
    pub fn is_permanent(&self) -> bool {
        match self {
            BackendError::Grid(e) => e.is_permanent(),
            BackendError::S3Refused(_) => true,
            BackendError::S3Unavailable(_) => false,
        }
    }

    /// A tenant sign-in refused: the stored root password does not match the account.
    pub fn is_bad_credentials(&self) -> bool {
        matches!(
            self,
            BackendError::Grid(storagegrid::Error::BadCredentials { .. })
        )
    }
}

impl BackendOutcome for BackendError {
    fn outcome(&self) -> &'static str {
        match self {
            BackendError::Grid(e) => e.outcome(),
            BackendError::S3Refused(_) => "permanent",
            BackendError::S3Unavailable(_) => "transient",
        }
    }
}

/// S3 credentials as published to applications.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// A newly issued key: its credential id (to revoke it) and its credentials (shown once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssuedKey {
    pub id: String,
    pub credentials: S3Credentials,
}

/// Tenant accounts with a root user and S3 keys (StorageGRID).
pub trait AccountBackend: Send + Sync {
    /// The account with this id; `None` only when the backend says 404.
    fn get_account<'a>(
        &'a self,
        id: &'a str,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>>;
    /// The account carrying keeper's ownership marker (after a create whose answer was lost).
    fn find_account<'a>(
        &'a self,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>>;
    /// Creates an account; returns its id.
    fn create_account<'a>(
        &'a self,
        settings: &'a AccountSettings,
        marker: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<String, BackendError>>;
    fn update_account<'a>(
        &'a self,
        id: &'a str,
        settings: &'a AccountSettings,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
    fn set_root_password<'a>(
        &'a self,
        id: &'a str,
        password: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
    /// Credential ids of the root user's keys.
    fn list_keys<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>>;
    /// The credential id of the key with this access key id; `None` when it does not exist.
    fn key_id<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
        access_key_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>>;
    fn issue_key<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<IssuedKey, BackendError>>;
    /// Revokes a key; a key already gone counts as revoked.
    fn revoke_key<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
    /// Names of the account's buckets: from the tenant API (authoritative) when the root
    /// password is known, else from the grid's usage report (which can lag by minutes).
    fn list_buckets<'a>(
        &'a self,
        id: &'a str,
        root_password: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>>;
    /// Deletes the account; 404 comes back as an error the caller reads as "gone".
    fn delete_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackendError>>;
}

/// An S3-compatible store where a tenant is the provider's credential scope.
pub trait CredentialScope: Send + Sync {
    /// Checks that the credentials work (ListBuckets).
    fn verify<'a>(
        &'a self,
        credentials: &'a S3Credentials,
    ) -> BoxFuture<'a, Result<(), BackendError>>;
}

/// [`AccountBackend`] over the StorageGRID client, signed in as the grid administrator.
pub struct GridAccounts {
    pub client: storagegrid::Client,
    pub admin: Login,
}

impl GridAccounts {
    fn spec(settings: &AccountSettings, marker: &str, policy: AccountPolicy) -> AccountSpec {
        AccountSpec {
            name: settings.name.clone(),
            description: marker.to_string(),
            capabilities: AccountSpec::standard_capabilities(),
            policy: AccountPolicy {
                allow_platform_services: settings.allow_platform_services,
                quota_object_bytes: settings.quota_bytes,
                ..policy
            },
        }
    }
}

/// What keeper manages of a grid account, for comparison with the spec.
fn observe(account: Account, marker: &str) -> ObservedAccount {
    let capabilities_ok = AccountSpec::standard_capabilities()
        .iter()
        .all(|c| account.capabilities.contains(c));
    let marker_ok = description_has_marker(account.description.as_deref(), marker);
    ObservedAccount {
        settings: AccountSettings {
            name: account.name,
            quota_bytes: account.policy.quota_object_bytes,
            allow_platform_services: account.policy.allow_platform_services,
        },
        id: account.id,
        managed_fields_ok: capabilities_ok && marker_ok,
    }
}

fn tenant_login(id: &str, root_password: &str) -> Login {
    Login::tenant_root(id, root_password)
}

impl AccountBackend for GridAccounts {
    fn get_account<'a>(
        &'a self,
        id: &'a str,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>> {
        async move {
            match self.client.get_account(&self.admin, id).await {
                Ok(account) => Ok(Some(observe(account, marker))),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        .boxed()
    }

    fn find_account<'a>(
        &'a self,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<Option<ObservedAccount>, BackendError>> {
        async move {
            Ok(self
                .client
                .find_account(&self.admin, marker)
                .await?
                .map(|a| observe(a, marker)))
        }
        .boxed()
    }

    fn create_account<'a>(
        &'a self,
        settings: &'a AccountSettings,
        marker: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<String, BackendError>> {
        async move {
            let spec = Self::spec(settings, marker, AccountPolicy::default());
            Ok(self
                .client
                .create_account(&self.admin, &spec, root_password)
                .await?
                .id)
        }
        .boxed()
    }

    fn update_account<'a>(
        &'a self,
        id: &'a str,
        settings: &'a AccountSettings,
        marker: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            // GET → modify → PUT keeps policy fields keeper does not manage.
            let current = self.client.get_account(&self.admin, id).await?;
            let mut spec = Self::spec(settings, marker, current.policy);
            let mut capabilities = current.capabilities;
            for c in AccountSpec::standard_capabilities() {
                if !capabilities.contains(&c) {
                    capabilities.push(c);
                }
            }
            spec.capabilities = capabilities;
            let description = current.description.unwrap_or_default();
            if !description_has_marker(Some(&description), marker) {
                spec.description = format!("{description} {marker}").trim().to_string();
            } else {
                spec.description = description;
            }
            self.client.update_account(&self.admin, id, &spec).await?;
            Ok(())
        }
        .boxed()
    }

    fn set_root_password<'a>(
        &'a self,
        id: &'a str,
        password: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            Ok(self
                .client
                .set_root_password(&self.admin, id, password)
                .await?)
        }
        .boxed()
    }

    fn list_keys<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        async move {
            let keys = self
                .client
                .list_access_keys(&tenant_login(id, root_password), KeyOwner::CurrentUser)
                .await?;
            Ok(keys.into_iter().map(|k| k.id).collect())
        }
        .boxed()
    }

    fn key_id<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
        access_key_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, BackendError>> {
        async move {
            match self
                .client
                .get_access_key(
                    &tenant_login(id, root_password),
                    KeyOwner::CurrentUser,
                    access_key_id,
                )
                .await
            {
                Ok(key) => Ok(Some(key.id)),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) => Err(e.into()),
            }
        }
        .boxed()
    }

    fn issue_key<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
    ) -> BoxFuture<'a, Result<IssuedKey, BackendError>> {
        async move {
            let key = self
                .client
                .create_access_key(&tenant_login(id, root_password), KeyOwner::CurrentUser)
                .await?;
            // create_access_key guarantees both halves are present.
            Ok(IssuedKey {
                credentials: S3Credentials {
                    access_key_id: key.access_key.unwrap_or_default(),
                    secret_access_key: key.secret_access_key.map(|s| s.0).unwrap_or_default(),
                },
                id: key.id,
            })
        }
        .boxed()
    }

    fn revoke_key<'a>(
        &'a self,
        id: &'a str,
        root_password: &'a str,
        key_id: &'a str,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            match self
                .client
                .delete_access_key(
                    &tenant_login(id, root_password),
                    KeyOwner::CurrentUser,
                    key_id,
                )
                .await
            {
                Err(e) if !e.is_not_found() => Err(e.into()),
                _ => Ok(()),
            }
        }
        .boxed()
    }

    fn list_buckets<'a>(
        &'a self,
        id: &'a str,
        root_password: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, BackendError>> {
        async move {
            let names = match root_password {
                Some(root) => self
                    .client
                    .list_containers(&tenant_login(id, root))
                    .await?
                    .into_iter()
                    .map(|c| c.name)
                    .collect(),
                None => self
                    .client
                    .account_usage(&self.admin, id)
                    .await?
                    .buckets
                    .into_iter()
                    .map(|b| b.name)
                    .collect(),
            };
            Ok(names)
        }
        .boxed()
    }

    fn delete_account<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), BackendError>> {
        async move { Ok(self.client.delete_account(&self.admin, id).await?) }.boxed()
    }
}

/// [`CredentialScope`] over aws-sdk-s3.
pub struct S3Scope {
    pub endpoint: String,
    pub region: String,
    pub force_path_style: bool,
    pub metrics: std::sync::Arc<Metrics>,
}

/// The `backend` metrics label of S3-compatible stores.
const S3_BACKEND: &str = "s3";

impl S3Scope {
    fn client(&self, credentials: &S3Credentials) -> aws_sdk_s3::Client {
        use aws_sdk_s3::config::{
            BehaviorVersion, Credentials, Region, RequestChecksumCalculation,
            ResponseChecksumValidation, timeout::TimeoutConfig,
        };
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(self.region.clone()))
            .endpoint_url(self.endpoint.clone())
            .force_path_style(self.force_path_style)
            .credentials_provider(Credentials::new(
                credentials.access_key_id.clone(),
                credentials.secret_access_key.clone(),
                None,
                None,
                "keeper-provider-secret",
            ))
            // S3-compatible stores reject or ignore the newer default checksums.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .timeout_config(
                TimeoutConfig::builder()
                    .operation_timeout(Duration::from_secs(30))
                    .build(),
            )
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }
}

impl CredentialScope for S3Scope {
    fn verify<'a>(
        &'a self,
        credentials: &'a S3Credentials,
    ) -> BoxFuture<'a, Result<(), BackendError>> {
        async move {
            let client = self.client(credentials);
            self.metrics
                .backend_call(S3_BACKEND, "list_buckets", async {
                    client
                        .list_buckets()
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(classify_s3)
                })
                .await
        }
        .boxed()
    }
}

fn classify_s3(
    err: aws_sdk_s3::error::SdkError<aws_sdk_s3::operation::list_buckets::ListBucketsError>,
) -> BackendError {
    use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
    let message = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            if (400..500).contains(&status) && status != 408 && status != 429 {
                BackendError::S3Refused(message)
            } else {
                BackendError::S3Unavailable(message)
            }
        }
        SdkError::ConstructionFailure(_) => BackendError::S3Refused(message),
        _ => BackendError::S3Unavailable(message),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    async fn scope() -> (MockServer, S3Scope) {
        let server = MockServer::builder()
            .listener(std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .start()
            .await;
        let scope = S3Scope {
            endpoint: server.uri(),
            region: "us-east-1".into(),
            force_path_style: true,
            metrics: Arc::new(Metrics::new()),
        };
        (server, scope)
    }

    fn credentials() -> S3Credentials {
        S3Credentials {
            access_key_id: "AKIAEXAMPLE".into(),
            secret_access_key: "secret".into(),
        }
    }

    #[tokio::test]
    async fn working_credentials_are_verified_with_list_buckets() {
        let (server, scope) = scope().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string(
                r#"<?xml version="1.0" encoding="UTF-8"?><ListAllMyBucketsResult><Owner><ID>o</ID></Owner><Buckets></Buckets></ListAllMyBucketsResult>"#,
            ))
            .expect(1)
            .mount(&server)
            .await;
        scope.verify(&credentials()).await.unwrap();
        assert!(scope.metrics.encode().contains(
            r#"keeper_backend_requests_total{backend="s3",operation="list_buckets",outcome="success"} 1"#
        ));
    }

    #[tokio::test]
    async fn refused_credentials_are_permanent() {
        let (server, scope) = scope().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(403).set_body_string(
                r#"<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The key does not exist.</Message></Error>"#,
            ))
            .mount(&server)
            .await;
        let err = scope.verify(&credentials()).await.unwrap_err();
        assert!(err.is_permanent(), "{err:?}");
        assert!(err.to_string().contains("InvalidAccessKeyId"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[tokio::test]
    async fn server_errors_are_transient() {
        let (server, scope) = scope().await;
        Mock::given(method("GET"))
            .respond_with(
                ResponseTemplate::new(503).set_body_string(
                    r#"<Error><Code>SlowDown</Code><Message>busy</Message></Error>"#,
                ),
            )
            .mount(&server)
            .await;
        let err = scope.verify(&credentials()).await.unwrap_err();
        assert!(!err.is_permanent(), "{err:?}");
    }

    #[test]
    fn grid_accounts_are_observed_with_capabilities_and_marker() {
        let account: Account = serde_json::from_value(serde_json::json!({
            "id": "1", "name": "n", "description": "keeper.dev/owner-uid=u",
            "capabilities": ["management", "s3"],
            "policy": {"quotaObjectBytes": 5, "allowPlatformServices": true}
        }))
        .unwrap();
        let observed = observe(account.clone(), "keeper.dev/owner-uid=u");
        assert!(observed.managed_fields_ok);
        assert_eq!(observed.settings.quota_bytes, Some(5));
        assert!(!observe(account.clone(), "keeper.dev/owner-uid=v").managed_fields_ok);
        let mut no_s3 = account;
        no_s3.capabilities = vec!["management".into()];
        assert!(!observe(no_s3, "keeper.dev/owner-uid=u").managed_fields_ok);
    }
}
