//! Authentication (tokens, TokenRequest, 401), RBAC authorization (Roles, ClusterRoles, their
//! bindings, subresources, resourceNames, kube's 403 wording), impersonation,
//! `kubectl auth can-i` and the user in the request log.

use super::common::*;
use keeper_e2e_apiserver::Config;
use serde_json::{Value, json};

const SA: &str = "system:serviceaccount:team-a:robot";

impl Env {
    /// Namespaces team-a and team-b, ServiceAccount team-a/robot and a token for it, minted with
    /// `kubectl create token` (TokenRequest) as an administrator.
    async fn robot(&self) -> String {
        for ns in ["team-a", "team-b"] {
            self.kubectl_ok(&["create", "namespace", ns]).await;
        }
        self.kubectl_ok(&["create", "serviceaccount", "robot", "-n", "team-a"])
            .await;
        self.kubectl_ok(&["create", "token", "robot", "-n", "team-a"])
            .await
            .trim()
            .to_string()
    }

    /// Role cm-reader (`verbs` on configmaps) in team-a, bound to team-a/robot.
    async fn grant_configmaps_in_team_a(&self, verbs: &str) {
        let verbs = format!("--verb={verbs}");
        let role = [
            "create",
            "role",
            "cm-reader",
            "-n",
            "team-a",
            &verbs,
            "--resource=configmaps",
        ];
        self.kubectl_ok(&role).await;
        let binding = [
            "create",
            "rolebinding",
            "cm-reader",
            "-n",
            "team-a",
            "--role=cm-reader",
            "--serviceaccount=team-a:robot",
        ];
        self.kubectl_ok(&binding).await;
    }

    /// kubectl with `token` instead of the kubeconfig's admin token.
    async fn kubectl_as_token(&self, token: &str, args: &[&str]) -> Run {
        let mut all = vec!["--token", token];
        all.extend_from_slice(args);
        self.kubectl(&all).await
    }

    async fn raw_token(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let http = Env::http_client(token);
        let mut req = http.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", self.url()),
        );
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let code = resp.status().as_u16();
        (code, resp.json().await.unwrap_or(Value::Null))
    }
}

/// POST ConfigMap `name` into `ns` with `token`.
async fn create_configmap(env: &Env, token: &str, ns: &str, name: &str) -> (u16, Value) {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    env.raw_token(Some(token), "POST", &path, Some(cm)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_an_unknown_one_is_unauthorized() {
    let env = Env::new().await;
    for token in [None, Some("made-up")] {
        let (code, body) = env
            .raw_token(token, "GET", "/api/v1/namespaces/default/configmaps", None)
            .await;
        assert_eq!(code, 401, "{body}");
        assert_eq!(
            body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
    let (code, _) = env.raw_token(None, "GET", "/version", None).await;
    assert_eq!(code, 401);
    // The emulator's own debug side channel stays open (loopback only, by design).
    let (code, _) = env.raw_token(None, "GET", "/debug/requests", None).await;
    assert_eq!(code, 200);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_allows_in_its_namespace_only_and_a_denial_reads_like_kubes() {
    let env = Env::new().await;
    let token = env.robot().await;
    // Authenticated, allowed nothing yet (discovery aside): kubectl's own discovery works.
    let denied = env
        .kubectl_as_token(&token, &["get", "configmaps", "-n", "team-a"])
        .await;
    assert!(!denied.ok);
    assert!(
        denied.stderr.contains(&format!(
            "configmaps is forbidden: User \"{SA}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"team-a\""
        )),
        "{}",
        denied.stderr
    );
    env.grant_configmaps_in_team_a("get,list").await;
    env.kubectl_ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "team-a",
        "--from-literal=k=v",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "configmap",
        "c",
        "-n",
        "team-b",
        "--from-literal=k=v",
    ])
    .await;
    let ok = env
        .kubectl_as_token(
            &token,
            &["get", "configmap", "c", "-n", "team-a", "-o", "name"],
        )
        .await;
    assert!(ok.ok, "{}", ok.stderr);
    assert_eq!(ok.stdout.trim(), "configmap/c");
    let (code, body) = env
        .raw_token(
            Some(&token),
            "GET",
            "/api/v1/namespaces/team-b/configmaps/c",
            None,
        )
        .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "configmaps \"c\" is forbidden: User \"{SA}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"team-b\""
        )
    );
    assert_eq!(body["reason"], "Forbidden");
    assert_eq!(body["details"], json!({"name": "c", "kind": "configmaps"}));
    // get and list were granted, create was not.
    let (code, body) = create_configmap(&env, &token, "team-a", "d").await;
    assert_eq!(code, 403, "{body}");
    // A cluster-scoped denial says so.
    let (code, body) = env
        .raw_token(Some(&token), "GET", "/api/v1/namespaces", None)
        .await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        format!(
            "namespaces is forbidden: User \"{SA}\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
        )
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_role_bound_by_a_role_binding_grants_in_that_namespace_and_missing_roles_are_named()
 {
    let env = Env::new().await;
    let token = env.robot().await;
    env.apply(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cm-writer}
rules:
- {apiGroups: [''], resources: [configmaps], verbs: ['*']}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm-writer, namespace: team-b}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cm-writer}
subjects: [{kind: ServiceAccount, name: robot, namespace: team-a}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: dangling, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gone}
subjects: [{kind: ServiceAccount, name: robot, namespace: team-a}]
",
    )
    .await;
    let (code, body) = create_configmap(&env, &token, "team-b", "d").await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = env
        .raw_token(
            Some(&token),
            "DELETE",
            "/api/v1/namespaces/team-b/configmaps",
            None,
        )
        .await;
    assert_eq!(code, 200, "deletecollection is covered by '*': {body}");
    let (code, body) = create_configmap(&env, &token, "team-a", "d").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        format!(
            "configmaps is forbidden: User \"{SA}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team-a\": RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found"
        )
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subresources_and_resource_names_are_authorized_separately() {
    let env = Env::new().await;
    env.install_crd().await;
    let token = env.robot().await;
    env.apply(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: buckets, namespace: team-a}
rules:
- {apiGroups: [keeper.dev], resources: [s3buckets], verbs: [get, create, update]}
- {apiGroups: [keeper.dev], resources: [s3buckets/status], verbs: [update], resourceNames: [mine]}
- {apiGroups: [''], resources: [secrets], verbs: [get], resourceNames: [mine]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: buckets, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: buckets}
subjects: [{kind: ServiceAccount, name: robot}]
",
    )
    .await;
    for name in ["mine", "theirs"] {
        let bucket = json!({"apiVersion": "keeper.dev/v1alpha1", "kind": "S3Bucket",
            "metadata": {"name": name}, "spec": {"tenantRef": {"name": "t"}}});
        let (code, body) = env
            .raw_token(
                Some(&token),
                "POST",
                "/apis/keeper.dev/v1alpha1/namespaces/team-a/s3buckets",
                Some(bucket),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }
    let (code, body) = put_status(&env, &token, "mine").await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = put_status(&env, &token, "theirs").await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        format!(
            "s3buckets.keeper.dev \"theirs\" is forbidden: User \"{SA}\" cannot update resource \"s3buckets/status\" in API group \"keeper.dev\" in the namespace \"team-a\""
        )
    );
    // A rule on s3buckets grants nothing on s3buckets/finalizers or s3buckets/status (get).
    let (code, _) = env
        .raw_token(
            Some(&token),
            "GET",
            &format!("{}/status", bucket_path("team-a", "mine")),
            None,
        )
        .await;
    assert_eq!(code, 403);
    // resourceNames: the named Secret only, and never a list.
    env.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "mine",
        "-n",
        "team-a",
        "--from-literal=k=v",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "theirs",
        "-n",
        "team-a",
        "--from-literal=k=v",
    ])
    .await;
    let get = |name: &str| format!("/api/v1/namespaces/team-a/secrets/{name}");
    let token = token.as_str();
    assert_eq!(
        env.raw_token(Some(token), "GET", &get("mine"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        env.raw_token(Some(token), "GET", &get("theirs"), None)
            .await
            .0,
        403
    );
    assert_eq!(
        env.raw_token(
            Some(token),
            "GET",
            "/api/v1/namespaces/team-a/secrets",
            None
        )
        .await
        .0,
        403
    );
    env.stop().await;
}

/// PUT the status subresource of bucket team-a/`name`.
async fn put_status(env: &Env, token: &str, name: &str) -> (u16, Value) {
    let path = bucket_path("team-a", name);
    let (_, mut obj) = env.raw_token(Some(token), "GET", &path, None).await;
    obj["status"] = json!({"phase": "Ready"});
    env.raw_token(Some(token), "PUT", &format!("{path}/status"), Some(obj))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_impersonate_and_kubectl_auth_can_i_answers_for_the_impersonated() {
    let env = Env::new().await;
    let token = env.robot().await;
    env.grant_configmaps_in_team_a("get,list,watch").await;
    let as_robot = format!("--as={SA}");
    let cases = [
        (
            &["list", "configmaps", "-n", "team-a", &as_robot][..],
            "yes",
        ),
        (&["list", "configmaps", "-n", "team-b", &as_robot], "no"),
        (&["delete", "configmaps", "-n", "team-a", &as_robot], "no"),
        (&["delete", "configmaps", "-n", "team-b"], "yes"), // the admin may
    ];
    for (args, answer) in cases {
        let r = env.kubectl(&[&["auth", "can-i"][..], args].concat()).await;
        assert_eq!(r.stdout.trim(), answer, "can-i {args:?}: {}", r.stderr);
        // kubectl's exit code says the same.
        assert_eq!(r.ok, answer == "yes", "can-i {args:?}");
    }
    // The ServiceAccount asks for itself with its own token.
    let own = env
        .kubectl_as_token(
            &token,
            &["auth", "can-i", "watch", "configmaps", "-n", "team-a"],
        )
        .await;
    assert_eq!(own.stdout.trim(), "yes", "{}", own.stderr);
    // An impersonated request is authorized as the impersonated user, with its groups.
    let denied = env
        .kubectl(&["get", "secrets", "-n", "team-a", &as_robot])
        .await;
    assert!(
        denied.stderr.contains(&format!(
            "secrets is forbidden: User \"{SA}\" cannot list resource \"secrets\" in API group \"\" in the namespace \"team-a\""
        )),
        "{}",
        denied.stderr
    );
    let ok = env
        .kubectl(&["get", "configmaps", "-n", "team-a", &as_robot, "-o", "name"])
        .await;
    assert!(ok.ok, "{}", ok.stderr);
    // Only who may `impersonate` may impersonate.
    let refused = env
        .kubectl_as_token(
            &token,
            &["get", "configmaps", "-n", "team-a", "--as=keeper-dev"],
        )
        .await;
    assert!(
        refused.stderr.contains(&format!(
            "users \"keeper-dev\" is forbidden: User \"{SA}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        )),
        "{}",
        refused.stderr
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_log_records_who_asked_and_tokens_follow_their_service_account() {
    let env = Env::new().await;
    let token = env.robot().await;
    env.raw_token(
        Some(&token),
        "GET",
        "/api/v1/namespaces/team-a/configmaps",
        None,
    )
    .await;
    let (_, _, log) = env.raw("GET", "/debug/requests", None, None).await;
    let users: Vec<(&str, &str, i64)> = log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["resource"] == "configmaps" || r["resource"] == "serviceaccounts")
        .map(|r| {
            (
                r["verb"].as_str().unwrap(),
                r["user"].as_str().unwrap(),
                r["code"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(users.contains(&("create", "keeper-dev", 201)), "{users:?}");
    assert!(users.contains(&("list", SA, 403)), "{users:?}");
    let denial = log["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user"] == SA && r["resource"] == "configmaps")
        .unwrap();
    assert_eq!(denial["authorization"], "forbid", "{denial}");
    // Deleting the ServiceAccount invalidates its tokens, as kube's service-account lookup does.
    env.kubectl_ok(&["delete", "serviceaccount", "robot", "-n", "team-a"])
        .await;
    let (code, _) = env
        .raw_token(
            Some(&token),
            "GET",
            "/api/v1/namespaces/team-a/configmaps",
            None,
        )
        .await;
    assert_eq!(code, 401);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_tokens_come_from_a_kube_token_file() {
    let tokens =
        keeper_e2e_apiserver::auth::parse_token_file("ops-token,olivia,1001,\"ops\"\n").unwrap();
    let env = Env::with(Config {
        static_tokens: tokens,
        ..Config::default()
    })
    .await;
    env.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "ops-view",
        "--clusterrole=ns-view",
        "--group=ops",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "clusterrole",
        "ns-view",
        "--verb=list",
        "--resource=namespaces",
    ])
    .await;
    let (code, body) = env
        .raw_token(Some("ops-token"), "GET", "/api/v1/namespaces", None)
        .await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = env
        .raw_token(
            Some("ops-token"),
            "GET",
            "/api/v1/namespaces/default/secrets",
            None,
        )
        .await;
    assert_eq!(code, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("User \"olivia\" cannot list"),
        "{body}"
    );
    env.stop().await;
}
