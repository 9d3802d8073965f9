//! # keeper-e2e-apiserver: a Kubernetes API emulator for keeper's tests
//!
//! An in-memory, single-process stand-in for kube-apiserver that real `kubectl` (v1.32) and
//! kube-rs 5 clients (including kube-runtime's `Controller`, finalizer helper and event
//! `Recorder`) talk to through a kubeconfig. It binds 127.0.0.1 only and speaks HTTP/1.1, over
//! TLS and in plain text on the same port (module [`tls`]: kubectl sends tokens only to `https`).
//!
//! ```text
//! keeper-e2e-apiserver --listen 127.0.0.1:0 --kubeconfig <path> [--ready-file <path>]
//!                  [--watch-history N] [--bookmark-interval SECONDS]
//!                  [--webhook-service NAMESPACE/NAME=PORT ...]
//!                  [--token-auth-file <path>] [--audit-log-path <path>]
//! ```
//! It writes a kubeconfig (cluster, user and context `keeper-dev`, namespace `default`, server
//! `https://127.0.0.1:PORT` with the CA it made at start, the admin token), prints
//! `listening on http://127.0.0.1:PORT`, writes the URL atomically to `--ready-file`, and exits 0
//! on SIGTERM/SIGINT. In-process: [`Server::start`] / [`Server::url`] / [`Server::stop`], or
//! [`serve`] on your own listener.
//!
//! ## What is emulated
//! - **Discovery**: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]` as plain
//!   APIVersions / APIGroupList / APIResourceList (kubectl falls back from aggregated discovery).
//!   Built-ins: core/v1 namespaces, secrets, configmaps, services, serviceaccounts, events;
//!   events.k8s.io/v1 events; coordination.k8s.io/v1 leases; apps/v1 deployments; rbac/v1 roles,
//!   rolebindings, clusterroles, clusterrolebindings; apiextensions.k8s.io/v1 CRDs;
//!   admissionregistration.k8s.io/v1 validatingwebhookconfigurations. Namespaces `default`,
//!   `kube-system` and `kube-public` exist from the start (and cannot be deleted).
//! - **Objects**: uid, creationTimestamp, one global monotonically increasing resourceVersion,
//!   generation (bumped on spec changes for kinds with a status subresource, on any non-metadata
//!   change otherwise), no-op writes that keep the resourceVersion, optimistic concurrency
//!   (409 Conflict, uid preconditions), generateName, validation of names, labels, annotations,
//!   finalizers, ownerReferences and Secret/ConfigMap keys (and `immutable`), `metav1.Status`
//!   errors shaped like kube-apiserver's (NotFound, AlreadyExists, Conflict, Invalid with causes, BadRequest,
//!   Forbidden, MethodNotAllowed, UnsupportedMediaType, Expired).
//! - **Verbs**: get, list (label selectors `=`, `==`, `!=`, `in`, `notin`, exists, `!key`; field
//!   selectors `metadata.name`/`metadata.namespace` plus the event fields kubectl uses;
//!   `limit`/`continue`), watch (from a resourceVersion, synthetic ADDED for `0`/unset,
//!   `sendInitialEvents`, BOOKMARKs, `timeoutSeconds`, 410 Gone as an ERROR event once the bounded
//!   history window has moved past the requested version; objects that start or stop matching a
//!   selector appear as ADDED/DELETED), create, update, patch (JSON merge, JSON patch with
//!   kube's `test`-for-null semantics, strategic merge for built-ins incl. `$patch`,
//!   `$setElementOrder`, `$retainKeys`, `$deleteFromPrimitiveList` and the usual merge keys,
//!   server-side apply that creates, merges (associative lists by key) and removes fields its
//!   manager no longer applies unless another manager owns them), delete (preconditions,
//!   propagationPolicy), deletecollection, `dryRun=All`, namespaced and cluster-wide paths.
//! - **Field ownership** (module [`managed`]): `metadata.managedFields` on every kind and
//!   subresource, per manager (`fieldManager`, else the User-Agent before its first `/`),
//!   operation, subresource and (updates) apiVersion, with kube's `fieldsV1`; updates take the
//!   fields they change, applies own what they apply; an apply changing a field another manager
//!   owns gets kube's 409 (`Apply failed with 1 conflict: conflict with "kubectl-create" using
//!   v1: .data.foo`, `FieldManagerConflict` causes) unless forced, equal values are co-owned;
//!   plus kube's details (server-set metadata unowned, `status` only through `/status`,
//!   `ancient-changes`, client-written `managedFields` and their reset with `[]`/`[{}]`,
//!   `before-first-apply`, kubectl's takeover from client-side apply and its last-applied
//!   annotation).
//! - **Bodies**: JSON and YAML; the protobuf envelope kubectl's typed clients send is decoded for
//!   Secret, ConfigMap, Namespace, ServiceAccount and the four RBAC kinds (`kubectl create
//!   secret|configmap|namespace|serviceaccount|role|clusterrole|rolebinding|clusterrolebinding`,
//!   Helm's release Secrets). Responses are always JSON.
//! - **Deletion**: finalizers and deletionTimestamp (+ `deletionGracePeriodSeconds: 0`), no new
//!   finalizers while deleting, ownerReference garbage collection (background, foreground,
//!   orphan), namespace termination (`Terminating`, 403 on create inside, namespace removed once
//!   empty), CRD deletion removing its objects. A namespace controller (module
//!   `server::namespaces`) empties a terminating namespace as kube-controller-manager's does:
//!   API DELETEs (propagation Background) that validating webhooks review as user
//!   `system:serviceaccount:kube-system:namespace-controller`; a denied object stays, the
//!   namespace stays `Terminating` with kube's status conditions (`NamespaceDeletionContentFailure`
//!   with the denial, `NamespaceContentRemaining`, `NamespaceFinalizersRemaining`, ...), and the
//!   controller looks again every second.
//! - **CRDs**: served as soon as created (Established/NamesAccepted conditions set at once),
//!   structural-schema pruning, defaulting and validation (types, required, enum, pattern,
//!   minimum/maximum, min/maxLength, min/maxItems, nullable, int-or-string,
//!   preserve-unknown-fields, int32/int64, allOf/anyOf/oneOf/not, set/map list uniqueness)
//!   with kube-apiserver's messages and causes, status subresource, printer columns, categories,
//!   short names, `fieldValidation=Strict|Warn|Ignore` (Warn by default, as a `Warning` header);
//!   no new objects while the CRD is terminating.
//! - **CEL rules** (`x-kubernetes-validations`, module `cel`): evaluated on create and update
//!   (also patch, apply and the status subresource) at every schema node with a value; transition
//!   rules (`oldSelf`) only on update where the old object has a value at the same place;
//!   `message`, `messageExpression`, `reason`, `fieldPath`, validation ratcheting; failures,
//!   rules that do not compile and rules that fail to evaluate answer 422 Invalid with kube's
//!   wording (`spec.provider: Invalid value: "string": <message>`).
//! - **Events**: one store with core/v1 and events.k8s.io/v1 views (`note`↔`message`,
//!   `regarding`↔`involvedObject`, `series`↔`count`/`lastTimestamp`, ...).
//! - **Tables** (`as=Table;v=v1;g=meta.k8s.io`) for get, list and watch, `includeObject`;
//!   PartialObjectMetadata(List) for metadata-only clients.
//! - **OpenAPI v3** index and per group-version documents (CRD schemas; permissive schemas for
//!   built-ins) whose PATCH operations advertise `fieldValidation`, so `kubectl apply` validates
//!   server-side and `kubectl explain` works for custom resources. `/openapi/v2` answers a
//!   document without definitions (JSON or protobuf), so kubectl's client-side check of
//!   `kind: List` manifests passes instead of failing.
//! - **Validating admission webhooks** over HTTPS (`clientConfig.url`, or a `service` mapped
//!   with `--webhook-service`), trusting only `caBundle`; rules (groups, versions, operations,
//!   resources incl. `*` and subresources, scope), namespace/object selectors, failurePolicy,
//!   timeoutSeconds, kube's denial messages and codes, warnings as `Warning: 299` headers,
//!   DELETE reviewed with `oldObject`.
//! - **Authentication** (module [`auth`]): bearer tokens — the admin token of the kubeconfig
//!   (`system:masters`), `--token-auth-file` (kube's CSV), ServiceAccount tokens from TokenRequest
//!   (`kubectl create token`); 401 `Unauthorized` without a valid one; impersonation headers
//!   (`kubectl --as`) for callers allowed to `impersonate`.
//! - **Authorization** (module [`rbac`]): kube's RBAC over the stored Roles, ClusterRoles and
//!   bindings (verbs, apiGroups, resources and subresources, resourceNames, nonResourceURLs) plus
//!   the bootstrap grants to `system:authenticated` (discovery, health, self access reviews);
//!   403 with kube-apiserver's message; `SelfSubjectAccessReview` (`kubectl auth can-i`).
//! - `GET /debug/requests` / `DELETE /debug/requests`: an audit-style request log (bounded) with
//!   the user of each request; `--audit-log-path` appends the same entries to a file. `/debug/*`
//!   needs no token by design (the harness's side channel on a loopback address).
//! - `GET|PUT|DELETE /debug/faults`: fault injection per resource and verb (latency, a seeded
//!   share of 409/429/500/503 answers shaped like kube-apiserver's, watches closed after N
//!   events or seconds); see [`faults`].
//!
//! ## Cost per request
//! About the same whatever the number of stored objects (module [`store`]): the garbage
//! collector looks only at what a write affects (dependents indexed by owner uid), lists and
//! watches narrow to a name, a namespace or an indexed `key=value` label before matching their
//! selectors, and watches find their resourceVersion in the history by binary search. Lists
//! without such a term read their resource's objects in scope; a terminating namespace costs its
//! content and a CRD being deleted its objects. `tests/scaling.rs` measures it.
//!
//! ## What is not emulated (known deviations)
//! - Authentication: no client certificates, OIDC, webhook tokens or anonymous requests;
//!   ServiceAccount tokens are opaque (not JWTs) and in memory; `Impersonate-Extra-*` is ignored.
//!   Authorization: RBAC only; bootstrap ClusterRoles are evaluated, not stored; no role
//!   aggregation, no escalation/bind checks on RBAC writes, no SubjectAccessReview,
//!   LocalSubjectAccessReview or SelfSubjectRulesReview (`kubectl auth can-i --list`).
//! - No persistence, no HTTP/2, a throwaway serving CA per start, no aggregated discovery, no protobuf
//!   responses and protobuf request bodies only for the kinds above (`kubectl create deployment`
//!   is refused with 415).
//! - No controllers besides the garbage collector, the namespace controller and the CRD finalizer: Deployments
//!   never get pods or status, Services get no cluster IP, there are no pods, no `scale`
//!   subresource.
//! - Field ownership of built-in kinds follows field names rather than kube's Go types (maps,
//!   atomic label selectors, the merge keys strategic merge patch knows; other lists atomic), so
//!   `.` markers on nested built-in structs can differ; fields a kind's rules set on write (a
//!   Namespace's `spec.finalizers`) belong to the writer, where kube leaves them unowned; field
//!   sets are not converted between versions; managed fields count against no size limit.
//! - Lists are served from the current state (a `continue` token does not pin a snapshot);
//!   `resourceVersion`/`resourceVersionMatch` on lists are ignored.
//! - CEL rules (module `cel`): no static type checking or cost limits, CRDs with rules that do
//!   not compile are accepted, no `optionalOldSelf`, `format`ted strings stay strings, no
//!   Kubernetes CEL libraries (`quantity`, `url`, `ip`, ...).
//! - CRD schemas: metadata constraints and `format`s other than int32/int64 are not enforced; no version conversion (every served version
//!   returns the stored object with its `apiVersion` rewritten).
//! - Built-in kinds are not schema-validated (beyond metadata and Secret data) and their OpenAPI
//!   schemas are permissive, so `kubectl explain` shows no fields for them; strategic merge patch
//!   knows the common merge keys rather than the full Go type metadata.
//! - `generation` is kept for every kind (kube leaves it unset on e.g. Secrets and ConfigMaps).
//! - Mutating webhooks are not supported; webhooks are not called for garbage-collector
//!   deletions (the namespace controller's deletions do go through them) and `sideEffects` is not checked for dry-run requests.
//! - DELETE of an object removed at once answers a `Status` of `Success`, not the object.

// Every handler returns `ApiError`, which carries the whole Status body a client receives; errors
// are the exception on a test server, so boxing them would only add noise.
#![allow(clippy::result_large_err)]

pub mod auth;
pub mod cel;
pub mod error;
pub mod events;
pub mod faults;
pub mod managed;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod resources;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod store;
pub mod table;
pub mod tls;
pub mod webhook;

pub use server::Config;
use server::Shared;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Serve the API on `listener` until `shutdown` resolves; open connections (watches included)
/// are closed then.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let tls = match &config.tls {
        Some(t) => t.clone(),
        None => tls::Tls::generate()?,
    };
    let shared = Arc::new(Shared::new(config, addr.to_string())?);
    serve_shared(listener, shared, tls, shutdown).await
}

async fn serve_shared(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Arc<tls::Tls>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let mut conns = tokio::task::JoinSet::new();
    let namespace_controller = tokio::spawn(server::namespaces::run(shared.clone()));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let shared = shared.clone();
                let tls = tls.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| server::handle(shared.clone(), req));
                    let http = hyper::server::conn::http1::Builder::new();
                    let served = if tls::starts_with_tls(&stream).await {
                        match tls.acceptor.accept(stream).await {
                            Ok(s) => http.serve_connection(hyper_util::rt::TokioIo::new(s), svc).await,
                            Err(e) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                        }
                    } else {
                        http.serve_connection(hyper_util::rt::TokioIo::new(stream), svc).await
                    };
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "connection ended");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    namespace_controller.abort();
    conns.shutdown().await;
    Ok(())
}

/// A running in-process server; stopped by [`Server::stop`] or on drop.
pub struct Server {
    addr: SocketAddr,
    tls: Arc<tls::Tls>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Server {
    /// Start on 127.0.0.1 with a free port and default settings.
    pub async fn start() -> anyhow::Result<Server> {
        Self::start_with(Config::default()).await
    }

    /// Start on 127.0.0.1 with a free port.
    pub async fn start_with(config: Config) -> anyhow::Result<Server> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        Self::from_listener(listener, config)
    }

    /// Start on an already bound listener.
    pub fn from_listener(listener: TcpListener, config: Config) -> anyhow::Result<Server> {
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let tls = match &config.tls {
            Some(t) => t.clone(),
            None => tls::Tls::generate()?,
        };
        let shared = Arc::new(Shared::new(config, addr.to_string())?);
        let task = tokio::spawn(serve_shared(listener, shared, tls.clone(), async move {
            let _ = rx.await;
        }));
        Ok(Server {
            addr,
            tls,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (the same port serves HTTPS, see [`Server::kubeconfig`]).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (cluster, user and context `keeper-dev`, namespace `default`,
    /// the admin token, `https://` with the server's CA).
    pub fn kubeconfig(&self) -> String {
        kubeconfig(&self.url(), &self.tls.ca_pem)
    }

    /// Stop accepting, close every connection and wait for the server task.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Kubeconfig text for the server at `url` (`http://` or `https://`; written as `https://`,
/// trusting `ca_pem`), as the admin (token [`auth::ADMIN_TOKEN`]).
pub fn kubeconfig(url: &str, ca_pem: &str) -> String {
    use base64::Engine;
    let url = url.replacen("http://", "https://", 1);
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let token = auth::ADMIN_TOKEN;
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: keeper-dev
  cluster:
    server: {url}
    certificate-authority-data: {ca}
contexts:
- name: keeper-dev
  context:
    cluster: keeper-dev
    user: keeper-dev
    namespace: default
current-context: keeper-dev
users:
- name: keeper-dev
  user:
    token: {token}
preferences: {{}}
"
    )
}
