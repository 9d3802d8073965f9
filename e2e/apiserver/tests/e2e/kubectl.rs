//! Scenarios driven by the real kubectl binary.

use crate::common::*;
use std::time::Duration;

const BUCKET_A: &str = include_str!("../fixtures/s3bucket-a.yaml");

async fn with_crd() -> Env {
    let env = Env::new().await;
    let out = env.apply(CRD_YAML).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/s3buckets.keeper.dev created"),
        "{out}"
    );
    env.kubectl_ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/s3buckets.keeper.dev",
        "--timeout=10s",
    ])
    .await;
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_version_and_namespaces() {
    let env = Env::new().await;
    let out = env.kubectl_ok(&["version"]).await;
    assert!(out.contains("Server Version: v1.32"), "{out}");
    let out = env.kubectl_ok(&["get", "namespaces"]).await;
    assert!(
        out.contains("default") && out.contains("kube-system") && out.contains("Active"),
        "{out}"
    );
    let out = env.kubectl_ok(&["api-resources"]).await;
    assert!(
        out.contains("validatingwebhookconfigurations") && out.contains("leases"),
        "{out}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_crd_and_get_with_printer_columns_and_category() {
    let env = with_crd().await;
    let out = env.apply(BUCKET_A).await;
    assert_eq!(out.trim(), "s3bucket.keeper.dev/a created");
    env.kubectl_ok(&[
        "patch",
        "s3b",
        "a",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Ready","bucketName":"bucket-a"}}"#,
    ])
    .await;
    let out = env.kubectl_ok(&["get", "s3buckets"]).await;
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "PHASE", "BUCKET", "AGE"]);
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], &["a", "Ready", "bucket-a"]);
    let out = env.kubectl_ok(&["get", "keeper", "-A"]).await;
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(
        out.starts_with("NAMESPACE") && row[..3] == ["default", "a", "Ready"],
        "{out}"
    );
    let out = env.kubectl_ok(&["get", "s3b", "-o", "name"]).await;
    assert_eq!(out.trim(), "s3bucket.keeper.dev/a");
    let out = env.kubectl_ok(&["get", "crd"]).await;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], vec!["NAME", "CREATED", "AT"], "{out}");
    assert_eq!(lines[1][0], "s3buckets.keeper.dev");
    assert!(lines[1][1].ends_with('Z'), "{out}");
    let out = env
        .kubectl_ok(&[
            "get",
            "s3b",
            "a",
            "-o",
            "jsonpath={.spec.deletionPolicy}/{.spec.versioning}",
        ])
        .await;
    assert_eq!(out, "Delete/false", "defaults applied");
    // Re-applying unchanged is a no-op, changed is configured.
    assert_eq!(
        env.apply(BUCKET_A).await.trim(),
        "s3bucket.keeper.dev/a unchanged"
    );
    let changed = BUCKET_A.replace("bucket-a", "bucket-b");
    assert_eq!(
        env.apply(&changed).await.trim(),
        "s3bucket.keeper.dev/a configured"
    );
    let out = env
        .kubectl_ok(&["get", "s3b", "a", "-o", "jsonpath={.metadata.generation}"])
        .await;
    assert_eq!(out, "2");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reports_schema_errors_like_kube() {
    let env = with_crd().await;
    let bad = "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: bad\nspec:\n  tenantRef: {name: t}\n  bucketName: X\n";
    let r = env.kubectl_in(&["apply", "-f", "-"], Some(bad)).await;
    assert!(!r.ok);
    assert!(
        r.stderr.contains("The S3Bucket \"bad\" is invalid: spec.bucketName: Invalid value: \"X\": spec.bucketName in body should match '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$'"),
        "{}",
        r.stderr
    );
    let unknown = "apiVersion: keeper.dev/v1alpha1\nkind: S3Bucket\nmetadata:\n  name: u\nspec:\n  tenantRef: {name: t}\n  bogus: 1\n";
    let r = env.kubectl_in(&["apply", "-f", "-"], Some(unknown)).await;
    assert!(!r.ok);
    assert!(
        r.stderr.contains("unknown field \"spec.bogus\""),
        "{}",
        r.stderr
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_sees_added_modified_deleted() {
    let env = with_crd().await;
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--cache-dir")
        .arg(env.dir.path().join("cache"))
        .args([
            "get",
            "s3buckets",
            "-w",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.name}{\"\\n\"}",
            "--request-timeout=20s",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    env.wait_for_request("watch", "s3buckets").await;
    env.apply(BUCKET_A).await;
    env.kubectl_ok(&["label", "s3b", "a", "x=y"]).await;
    env.kubectl_ok(&["delete", "s3b", "a"]).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec!["ADDED a", "MODIFIED a", "DELETED a"],
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_delete_wait_false_keeps_finalized_object() {
    let env = with_crd().await;
    let y = BUCKET_A.replace(
        "metadata:\n",
        "metadata:\n  finalizers: [keeper.dev/cleanup]\n",
    );
    env.apply(&y).await;
    let out = env
        .kubectl_ok(&["delete", "s3b", "a", "--wait=false"])
        .await;
    assert!(out.contains("deleted"), "{out}");
    let ts = env
        .kubectl_ok(&[
            "get",
            "s3b",
            "a",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await;
    assert!(!ts.is_empty());
    // kubectl delete --wait watches until the finalizer is removed.
    let del = env.kubectl(&["delete", "s3b", "a", "--timeout=20s"]);
    let remove = async {
        env.wait_for_request("watch", "s3buckets").await;
        env.kubectl_ok(&[
            "patch",
            "s3b",
            "a",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ])
        .await
    };
    let (r, _) = tokio::join!(del, remove);
    assert!(r.ok, "{}", r.stderr);
    let r = env.kubectl(&["get", "s3b", "a"]).await;
    assert!(
        r.stderr.contains("s3buckets.keeper.dev \"a\" not found"),
        "{}",
        r.stderr
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_wait_for_condition_annotate_and_label() {
    let env = with_crd().await;
    env.apply(BUCKET_A).await;
    let wait = env.kubectl(&["wait", "--for=condition=Ready", "s3b/a", "--timeout=20s"]);
    let set = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        env.kubectl_ok(&[
            "patch",
            "s3b",
            "a",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#,
        ])
        .await
    };
    let (r, _) = tokio::join!(wait, set);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.contains("condition met"), "{}", r.stdout);
    assert!(
        env.kubectl_ok(&["annotate", "s3b", "a", "note=hi"])
            .await
            .contains("annotated")
    );
    assert!(
        env.kubectl_ok(&["label", "s3b", "a", "env=dev"])
            .await
            .contains("labeled")
    );
    let out = env
        .kubectl_ok(&[
            "get",
            "s3b",
            "-l",
            "env=dev",
            "-o",
            "jsonpath={.items[0].metadata.annotations.note}",
        ])
        .await;
    assert_eq!(out, "hi");
    let out = env
        .kubectl_ok(&["get", "s3b", "-l", "env!=dev", "-o", "name"])
        .await;
    assert_eq!(out.trim(), "");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_uses_openapi_v3() {
    let env = with_crd().await;
    let out = env.kubectl_ok(&["explain", "s3bucket.spec"]).await;
    assert!(out.contains("KIND:       S3Bucket"), "{out}");
    assert!(out.contains("Desired state of the bucket."), "{out}");
    assert!(out.contains("bucketName\t<string>"), "{out}");
    assert!(out.contains("tenantRef\t<Object> -required-"), "{out}");
    let out = env
        .kubectl_ok(&["explain", "s3buckets.spec.tenantRef.name"])
        .await;
    assert!(
        out.contains("Name of the S3Tenant in the same namespace."),
        "{out}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_lists_events_and_get_events() {
    let env = with_crd().await;
    env.apply(BUCKET_A).await;
    let uid = env
        .kubectl_ok(&["get", "s3b", "a", "-o", "jsonpath={.metadata.uid}"])
        .await;
    let ev = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: a.1\neventTime: \"2026-01-01T00:00:00.000000Z\"\nreportingController: keeper\nreportingInstance: keeper-0\naction: Reconcile\nreason: BucketCreated\nnote: created bucket bucket-a\ntype: Normal\nregarding:\n  apiVersion: keeper.dev/v1alpha1\n  kind: S3Bucket\n  name: a\n  namespace: default\n  uid: {uid}\n"
    );
    let r = env.kubectl_in(&["create", "-f", "-"], Some(&ev)).await;
    assert!(r.ok, "{}", r.stderr);
    let out = env.kubectl_ok(&["describe", "s3bucket", "a"]).await;
    let events = out.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("BucketCreated")
            && events.contains("created bucket bucket-a")
            && events.contains("keeper"),
        "{out}"
    );
    let out = env.kubectl_ok(&["get", "events"]).await;
    assert!(
        out.contains("BucketCreated") && out.contains("s3bucket/a"),
        "{out}"
    );
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    let out = env
        .kubectl_ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=other",
        ])
        .await;
    assert!(!out.contains("BucketCreated"), "{out}");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_server_side() {
    let env = with_crd().await;
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(BUCKET_A))
        .await;
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "s3bucket.keeper.dev/a serverside-applied");
    let changed = BUCKET_A.replace("bucket-a", "bucket-c");
    let r = env
        .kubectl_in(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&changed),
        )
        .await;
    assert!(r.ok, "{}", r.stderr);
    let out = env
        .kubectl_ok(&["get", "s3b", "a", "-o", "jsonpath={.spec.bucketName}"])
        .await;
    assert_eq!(out, "bucket-c");
    // Server-side apply of the CRD itself (kubectl takes it over from client-side apply, a
    // write of managed fields): unchanged re-applies do not write.
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(CRD_YAML))
        .await;
    assert!(r.ok, "{}", r.stderr);
    let before = crd_rv(&env).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let r = env
        .kubectl_in(&["apply", "--server-side", "-f", "-"], Some(CRD_YAML))
        .await;
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(
        crd_rv(&env).await,
        before,
        "no-op applies keep the resourceVersion"
    );
    env.stop().await;
}

async fn crd_rv(env: &Env) -> String {
    env.kubectl_ok(&[
        "get",
        "crd",
        "s3buckets.keeper.dev",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ])
    .await
}

const BUILTINS: &str = r#"apiVersion: v1
kind: Namespace
metadata:
  name: keeper-system
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: keeper
  namespace: keeper-system
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
  namespace: keeper-system
type: Opaque
stringData:
  accessKey: AKIA
data:
  secretKey: c2VjcmV0
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: keeper-system
data:
  level: info
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: keeper
rules:
- apiGroups: ["keeper.dev"]
  resources: ["s3buckets", "s3buckets/status"]
  verbs: ["get", "list", "watch", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: keeper
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: keeper
subjects:
- kind: ServiceAccount
  name: keeper
  namespace: keeper-system
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: keeper-leader
  namespace: keeper-system
spec:
  holderIdentity: keeper-0
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: keeper
  namespace: keeper-system
spec:
  replicas: 1
  selector:
    matchLabels: {app: keeper}
  template:
    metadata:
      labels: {app: keeper}
    spec:
      serviceAccountName: keeper
      containers:
      - name: keeper
        image: keeper:dev
        env:
        - name: RUST_LOG
          value: info
        ports:
        - containerPort: 8080
          name: metrics
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_builtins_and_reapply_with_strategic_merge() {
    let env = Env::new().await;
    let out = env.apply(BUILTINS).await;
    for want in [
        "namespace/keeper-system created",
        "serviceaccount/keeper created",
        "secret/creds created",
        "configmap/settings created",
        "clusterrole.rbac.authorization.k8s.io/keeper created",
        "clusterrolebinding.rbac.authorization.k8s.io/keeper created",
        "lease.coordination.k8s.io/keeper-leader created",
        "deployment.apps/keeper created",
    ] {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
    let data = env
        .kubectl_ok(&[
            "-n",
            "keeper-system",
            "get",
            "secret",
            "creds",
            "-o",
            "jsonpath={.data.accessKey}",
        ])
        .await;
    assert_eq!(data, "QUtJQQ==");
    let out = env
        .kubectl_ok(&["-n", "keeper-system", "get", "secrets"])
        .await;
    assert!(
        out.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["NAME", "TYPE", "DATA", "AGE"]),
        "{out}"
    );
    assert!(out.contains("Opaque") && out.contains(" 2 "), "{out}");
    // Re-apply with a changed env var and an added container: strategic merge patch.
    let changed = BUILTINS.replace("value: info", "value: debug").replace(
        "      containers:\n      - name: keeper\n",
        "      containers:\n      - name: sidecar\n        image: side:1\n      - name: keeper\n",
    );
    let out = env.apply(&changed).await;
    assert!(out.contains("deployment.apps/keeper configured"), "{out}");
    let names = env
        .kubectl_ok(&["-n", "keeper-system", "get", "deploy", "keeper", "-o", "jsonpath={.spec.template.spec.containers[*].name} {.spec.template.spec.containers[?(@.name==\"keeper\")].env[0].value}"])
        .await;
    assert_eq!(names, "sidecar keeper debug");
    let out = env
        .kubectl_ok(&["-n", "keeper-system", "get", "deploy,sa,cm,lease"])
        .await;
    assert!(
        out.contains("deployment.apps/keeper")
            && out.contains("serviceaccount/keeper")
            && out.contains("lease.coordination.k8s.io/keeper-leader"),
        "{out}"
    );
    // Deleting the namespace takes its content along.
    let out = env
        .kubectl_ok(&["delete", "namespace", "keeper-system", "--timeout=20s"])
        .await;
    assert!(out.contains("namespace \"keeper-system\" deleted"), "{out}");
    let r = env.kubectl(&["get", "ns", "keeper-system"]).await;
    assert!(!r.ok && r.stderr.contains("not found"), "{}", r.stderr);
    let out = env
        .kubectl_ok(&["get", "secrets", "-A", "-o", "name"])
        .await;
    assert_eq!(out.trim(), "");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_imperative_creates_send_protobuf() {
    let env = Env::new().await;
    assert!(
        env.kubectl_ok(&["create", "namespace", "team1"])
            .await
            .contains("namespace/team1 created")
    );
    env.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "-n",
        "team1",
        "--from-literal=a=b",
        "--from-literal=c=d",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "configmap",
        "c1",
        "-n",
        "team1",
        "--from-literal=x=y",
    ])
    .await;
    env.kubectl_ok(&["create", "serviceaccount", "bot", "-n", "team1"])
        .await;
    let out = env
        .kubectl_ok(&[
            "get",
            "secret",
            "s1",
            "-n",
            "team1",
            "-o",
            "jsonpath={.type} {.data.a} {.data.c}",
        ])
        .await;
    assert_eq!(out, "Opaque Yg== ZA==");
    let out = env
        .kubectl_ok(&["get", "cm", "c1", "-n", "team1", "-o", "jsonpath={.data.x}"])
        .await;
    assert_eq!(out, "y");
    let out = env
        .kubectl_ok(&[
            "get",
            "ns",
            "team1",
            "-o",
            "jsonpath={.status.phase} {.metadata.labels}",
        ])
        .await;
    assert_eq!(out, "Active {\"kubernetes.io/metadata.name\":\"team1\"}");
    assert_eq!(
        env.kubectl_ok(&["get", "sa", "-n", "team1", "-o", "name"])
            .await
            .trim(),
        "serviceaccount/bot"
    );
    env.kubectl_ok(&[
        "create",
        "clusterrole",
        "reader",
        "--verb=get,list",
        "--resource=secrets,configmaps",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "role",
        "r",
        "-n",
        "team1",
        "--verb=get",
        "--resource=secrets",
        "--resource-name=s1",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "rolebinding",
        "rb",
        "-n",
        "team1",
        "--clusterrole=reader",
        "--serviceaccount=team1:bot",
    ])
    .await;
    env.kubectl_ok(&[
        "create",
        "clusterrolebinding",
        "crb",
        "--clusterrole=reader",
        "--user=alice",
    ])
    .await;
    let out = env
        .kubectl_ok(&[
            "get",
            "clusterrole",
            "reader",
            "-o",
            "jsonpath={.rules[0].verbs} {.rules[0].resources}",
        ])
        .await;
    assert_eq!(out, r#"["get","list"] ["secrets","configmaps"]"#);
    let out = env
        .kubectl_ok(&[
            "get",
            "role",
            "r",
            "-n",
            "team1",
            "-o",
            "jsonpath={.rules[0].resourceNames}",
        ])
        .await;
    assert_eq!(out, r#"["s1"]"#);
    let out = env.kubectl_ok(&["get", "rolebinding", "rb", "-n", "team1", "-o", "jsonpath={.roleRef.kind}/{.roleRef.name} {.subjects[0].kind}/{.subjects[0].namespace}/{.subjects[0].name}"]).await;
    assert_eq!(out, "ClusterRole/reader ServiceAccount/team1/bot");
    let out = env
        .kubectl_ok(&[
            "get",
            "clusterrolebinding",
            "crb",
            "-o",
            "jsonpath={.subjects[0].kind}/{.subjects[0].name}/{.subjects[0].apiGroup}",
        ])
        .await;
    assert_eq!(out, "User/alice/rbac.authorization.k8s.io");
    // Kinds the protobuf decoder does not know are refused clearly.
    let r = env
        .kubectl(&["create", "deployment", "d", "--image=x"])
        .await;
    assert!(
        !r.ok && r.stderr.contains("not supported by the emulator"),
        "{}",
        r.stderr
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_table_rows_and_reapplies_crd() {
    let env = with_crd().await;
    env.apply(BUCKET_A).await;
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(&env.kubeconfig)
        .arg("--cache-dir")
        .arg(env.dir.path().join("cache"))
        .args(["get", "s3b", "-w"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    env.wait_for_request("watch", "s3buckets").await;
    env.kubectl_ok(&[
        "patch",
        "s3b",
        "a",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Provisioning"}}"#,
    ])
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], vec!["NAME", "PHASE", "BUCKET", "AGE"], "{stdout}");
    assert_eq!(lines[1][0], "a");
    assert_eq!(&lines[2][..2], &["a", "Provisioning"], "{stdout}");
    // Client-side re-apply of a changed CRD (merge patch) updates what is served.
    let crd = CRD_YAML.replace("shortNames: [s3b]", "shortNames: [s3b, bkt]");
    assert!(env.apply(&crd).await.contains("configured"));
    let out = env.kubectl_ok(&["get", "bkt", "-o", "name"]).await;
    assert_eq!(out.trim(), "s3bucket.keeper.dev/a");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_a_list_manifest() {
    let env = Env::new().await;
    let list = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: l1}\n  data: {a: b}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: l2}\n";
    let out = env.apply(list).await;
    assert!(
        out.contains("configmap/l1 created") && out.contains("configmap/l2 created"),
        "{out}"
    );
    env.stop().await;
}
