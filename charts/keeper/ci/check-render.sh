#!/usr/bin/env bash
# Asserts what the chart renders for its default values and three other value sets: the objects,
# replicas and update strategy, leader election, pod security, RBAC without wildcards, the webhook
# wiring. (ci/check-monitoring.sh covers the monitoring value set.)
#
#   charts/keeper/ci/check-render.sh HELM   no subcommands; HELM is the helm binary to use
set -euo pipefail
helm=$1
chart=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "check-render ($set): $*" >&2; exit 1; }
render() { "$helm" template keeper "$chart" -n keeper-system "$@"; }
kinds() { grep -E '^kind: ' | sed 's/^kind: //' | sort | tr '\n' ' '; }
# A leading `--` (for a pattern that starts with a dash) is skipped: the pattern is the next word.
has() { [ "$1" != -- ] || shift; grep -qE -- "$1" <<<"$out" || fail "expected /$1/"; }
lacks() { [ "$1" != -- ] || shift; if grep -qE -- "$1" <<<"$out"; then fail "unexpected /$1/"; fi; }
has_block() { [[ "$out" == *"$1"* ]] || fail "expected the lines:"$'\n'"$1"; }
lacks_block() { if [[ "$out" == *"$1"* ]]; then fail "unexpected lines:"$'\n'"$1"; fi; }

# Pod security and RBAC hold for every value set.
common() {
  has '^        runAsNonRoot: true$'
  has '^        runAsUser: 65532$'
  has 'seccompProfile: \{type: RuntimeDefault\}'
  has 'allowPrivilegeEscalation: false'
  has 'readOnlyRootFilesystem: true'
  has 'capabilities: \{drop: \[ALL\]\}'
  lacks "verbs: \[.*\*.*\]|resources: \[.*\*.*\]|apiGroups: \[.*\*.*\]"
  has 'resources: \[secrets\]'
  has 'resources: \[s3tenants/status, s3buckets/status, clouddatabases/status\]'
}

set=defaults
out=$(render)
[ "$(kinds <<<"$out")" = "ClusterRole ClusterRole ClusterRoleBinding ClusterRoleBinding ConfigMap Deployment PodDisruptionBudget Role Role RoleBinding RoleBinding Service ServiceAccount ValidatingWebhookConfiguration " ] \
  || fail "objects: $(kinds <<<"$out")"
common
has '^  replicas: 2$'
has '^    type: RollingUpdate$'
has -- '- --leader-election=true'
has 'resources: \[leases\]'
has 'minAvailable: 1'
has 'podAntiAffinity'
has 'failurePolicy: Ignore'
has 'path: /validate'
has 'image: "ghcr.io/keeper-dev/keeper:0.1.0"'
lacks 'resources: \[namespaces\]'

set=demo-values
out=$(render -f "$chart/ci/demo-values.yaml")
common
has 'adminEndpoint: https://grid-admin.example.com'
has -- '- --log-format=json'

set=single-values
out=$(render -f "$chart/ci/single-values.yaml")
[ "$(kinds <<<"$out")" = "ClusterRole ClusterRoleBinding ConfigMap Deployment Service ServiceAccount " ] \
  || fail "objects: $(kinds <<<"$out")"
common
has '^  replicas: 1$'
has '^    type: Recreate$'
has -- '- --leader-election=false'
has -- '- --log-format=text'
lacks 'ValidatingWebhookConfiguration|--webhook|name: webhook'
lacks 'resources: \[leases\]'
has 'sharedCredentials: true'

set=external-webhook-values
out=$(render -f "$chart/ci/external-webhook-values.yaml")
common
has 'url: "https://127.0.0.1:9443/validate"'
has 'caBundle: Y2EtYnVuZGxl'
lacks 'path: /validate'
lacks 'name: keeper-webhook-cert'
has 'resources: \[namespaces\]'
has 'verbs: \[get, list, watch\]'

set=adoption-by-label
out=$(render --set-json 'config.providers.s3.s3Compatible={"endpoint":"https://s3","credentialsSecret":{"name":"s3"},"iam":{},"adoption":{"allowedNamespaces":{"selector":{"matchLabels":{"adopt":"yes"}}}}}')
has 'adoption:'
has 'resources: \[namespaces\]'

# config.watchNamespaces: the namespaced rights as a Role per watched namespace, a smaller Role in
# keeper's own, no cluster-wide grant but the webhook's own configuration (and namespaces when a
# provider selects them by label); the webhook sees the watched namespaces only.
set=watch-namespaces
out=$(render --set-json 'config.watchNamespaces=["team-a","team-b"]')
[ "$(kinds <<<"$out")" = "ClusterRole ClusterRoleBinding ConfigMap Deployment PodDisruptionBudget Role Role Role Role Role RoleBinding RoleBinding RoleBinding RoleBinding RoleBinding Service ServiceAccount ValidatingWebhookConfiguration " ] \
  || fail "objects: $(kinds <<<"$out")"
common
lacks 'resources: \[namespaces\]'
# The one ClusterRole is the webhook's (its configuration, by name); secrets only in Roles.
[ "$(grep -A4 '^kind: ClusterRole$' <<<"$out" | grep -c '^  name: keeper-webhook$')" = 1 ] \
  || fail "a ClusterRole other than keeper-webhook"
for ns in team-a team-b; do
  has_block "kind: Role
metadata:
  name: keeper
  namespace: $ns"
  has_block "kind: RoleBinding
metadata:
  name: keeper
  namespace: $ns"
done
has_block '  name: keeper-own-namespace
  namespace: keeper-system'
has_block '    resources: [secrets]
    verbs: [get, list, watch, create, update]'
[ "$(grep -c 'resources: \[s3tenants/status' <<<"$out")" = 2 ] || fail "keeper's kinds granted other than in the two Roles"
has_block '    namespaceSelector:
      matchExpressions:
        - key: kubernetes.io/metadata.name
          operator: In
          values: ["team-a","team-b"]'
has '^    watchNamespaces:$'
# Namespaces by label: a ClusterRole of cluster-scoped kinds only. A provider Secret in a namespace
# keeper does not watch: read by name.
out=$(render --set webhook.enabled=false --set-json 'config.watchNamespaces=["team-a"]' \
  --set-json 'config.providers.s3.s3Compatible={"endpoint":"https://s3","credentialsSecret":{"name":"s3","namespace":"creds"},"iam":{},"allowedNamespaces":{"selector":{"matchLabels":{"a":"b"}}}}')
[ "$(grep -A2 '^kind: ClusterRole$' <<<"$out" | grep -c '^  name: ')" = 1 ] || fail "more than one ClusterRole"
has_block 'rules:
  - apiGroups: [""]
    resources: [namespaces]
    verbs: [get, list, watch]
---
# Source: keeper/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding'
has_block '  name: keeper-provider-s3
  namespace: creds'
has_block '    resources: [secrets]
    resourceNames: [s3]
    verbs: [get, list, watch]'
lacks 'namespaceSelector'
# A provider Secret in a watched namespace or keeper's own needs no Role of its own.
out=$(render --set-json 'config.watchNamespaces=["creds"]' \
  --set-json 'config.providers.s3.s3Compatible={"endpoint":"https://s3","credentialsSecret":{"name":"s3","namespace":"creds"},"iam":{}}')
lacks 'keeper-provider-'
# Without watchNamespaces: what the chart renders today (the defaults above), no Role of keeper's kinds.
out=$(render)
lacks 'keeper-own-namespace|namespaceSelector|^  namespace: team-'

# The webhook's certificate (webhook.tls.mode). Nothing random and nothing looked up in the cluster:
# `helm template`, as Argo CD renders, gives the same output every time.
set=webhook-templates
if grep -nE 'lookup|genCA|genSelfSignedCert|genSignedCert|genPrivateKey|randAlpha|randNumeric|randBytes|uuidv4|\bnow\b' \
    "$chart/templates/webhook.yaml" "$chart/templates/deployment.yaml" "$chart/templates/rbac.yaml" "$chart/templates/_helpers.tpl"; then
  fail "a template looks the cluster up or makes something random"
fi
for values in "" "$chart/ci/webhook-cert-manager-values.yaml"; do
  set="webhook-twice ${values:-defaults}"
  first=$(render ${values:+-f "$values"}); second=$(render ${values:+-f "$values"})
  [ "$first" = "$second" ] || fail "two renders differ: $(diff <(echo "$first") <(echo "$second") | head -5)"
done

set=webhook-self-managed
out=$(render)
has -- '- --webhook-cert-secret=keeper-webhook-tls$'
has -- '- --webhook-configuration=keeper$'
has -- '- --webhook-service=keeper$'
has -- '- --webhook-cert-validity=8760h$'
lacks -- '--webhook-cert-dir|name: webhook-cert,|caBundle:|inject-ca-from|cert-manager.io/v1|^kind: Secret$'
# keeper's own configuration and Secret by name, get/patch only; create cannot be narrowed by name.
has_block '    resources: [validatingwebhookconfigurations]
    resourceNames: [keeper]
    verbs: [get, patch]'
has_block '  - apiGroups: [""]
    resources: [secrets]
    resourceNames: [keeper-webhook-tls]
    verbs: [get, patch]
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create]'
[ "$(grep -c 'validatingwebhookconfigurations' <<<"$out")" = 1 ] || fail "validatingwebhookconfigurations granted more than once"
has_block 'kind: RoleBinding
metadata:
  name: keeper-webhook
  namespace: keeper-system'
has_block 'kind: ClusterRoleBinding
metadata:
  name: keeper-webhook'
# Outside the cluster (the e2e scenario): a URL and no caBundle, keeper sets it.
out=$(render --set webhook.url=https://127.0.0.1:9443/validate)
has 'url: "https://127.0.0.1:9443/validate"'
lacks 'caBundle:|path: /validate'

set=webhook-cert-manager
out=$(render -f "$chart/ci/webhook-cert-manager-values.yaml")
[ "$(kinds <<<"$out")" = "Certificate Certificate ClusterRole ClusterRoleBinding ConfigMap Deployment Issuer Issuer PodDisruptionBudget Role RoleBinding Service ServiceAccount ValidatingWebhookConfiguration " ] \
  || fail "objects: $(kinds <<<"$out")"
common
has '^    cert-manager.io/inject-ca-from: keeper-system/keeper-webhook$'
lacks 'caBundle:|validatingwebhookconfigurations|--webhook-cert-secret'
has -- '- --webhook-cert-dir=/etc/keeper/webhook$'
has 'secret: \{secretName: keeper-webhook-cert-manager\}'
has_block 'spec:
  secretName: keeper-webhook-cert-manager
  commonName: keeper.keeper-system.svc
  dnsNames:
    - keeper.keeper-system.svc'
has_block '  issuerRef:
    name: keeper-webhook-ca
    kind: Issuer'
has 'selfSigned: \{\}'
has 'isCA: true'
out=$(render -f "$chart/ci/webhook-cert-manager-values.yaml" --set-json 'webhook.tls.certManager.issuerRef={"name":"corp-ca","kind":"ClusterIssuer"}')
[ "$(kinds <<<"$out" | grep -o 'Certificate\|Issuer' | tr '\n' ' ')" = "Certificate " ] || fail "objects: $(kinds <<<"$out")"
has_block '  issuerRef:
    name: corp-ca
    kind: ClusterIssuer
    group: cert-manager.io'
lacks 'selfSigned|isCA'

set=webhook-secret
out=$(render -f "$chart/ci/webhook-secret-values.yaml")
common
has 'caBundle: bXktY2E=$'
has 'secret: \{secretName: my-webhook-tls\}'
has -- '- --webhook-cert-dir=/etc/keeper/webhook$'
has 'path: /validate'
lacks 'inject-ca-from|validatingwebhookconfigurations|--webhook-cert-secret|cert-manager.io/v1'
out=$(render -f "$chart/ci/webhook-secret-values.yaml" --set webhook.caBundle= --set webhook.caInjectFrom=certs/keeper-webhook)
has '^    cert-manager.io/inject-ca-from: certs/keeper-webhook$'
lacks 'caBundle:'

echo "render: defaults, demo, single-replica and external-webhook value sets render what they promise; adoption by label reads namespaces; watchNamespaces renders Roles per namespace and a webhook limited to them"

# Day-2 values (ci/day2-values.yaml sets them all): what each renders, and that the defaults render
# none of them.
block() {  # block REGEX N EXPECTED: the first line matching REGEX and the N after it are EXPECTED
  local got
  got=$(grep -m1 -A"$2" -E -- "$1" <<<"$out" | sed -E 's/(checksum\/config: ).*/\1HASH/')
  [ "$got" = "$3" ] || fail "after /$1/ expected
$3
got
$got"
}
# Every object carries the chart's labels, and LABEL right after them when given.
labelled() {
  local objects labels follow
  objects=$(grep -c '^kind: ' <<<"$out")
  labels=$(grep -c '^    helm.sh/chart: keeper-' <<<"$out")
  [ "$objects" = "$labels" ] || fail "$labels of $objects objects carry the chart's labels"
  follow=$(grep -A1 '^    helm.sh/chart: keeper-' <<<"$out" | grep -v '^    helm.sh/chart: ' \
    | grep -cE -- "^    ${1:-[a-z][^ ]*}: " || true)
  [ "$follow" = "$([ -n "${1:-}" ] && echo "$objects" || echo 0)" ] \
    || fail "extra label ${1:-(none expected)} on $follow of $objects objects"
}

set=day2-defaults
out=$(render)
lacks 'imagePullSecrets|priorityClassName|topologySpreadConstraints|envFrom|RUST_LOG|@sha256:'
lacks '^kind: NetworkPolicy$'
labelled
block '^  template:$' 8 '  template:
    metadata:
      labels:
        app.kubernetes.io/name: keeper
        app.kubernetes.io/instance: keeper
      annotations:
        checksum/config: HASH
    spec:
      serviceAccountName: keeper'
block '^      serviceAccountName: ' 1 '      serviceAccountName: keeper
      securityContext:'
block '^          env:$' 5 '          env:
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
          ports:'
block '^          volumeMounts:$' 2 '          volumeMounts:
            - {name: config, mountPath: /etc/keeper/keeper.yaml, subPath: keeper.yaml, readOnly: true}
      volumes:'
block '^      volumes:$' 3 '      volumes:
        - name: config
          configMap: {name: keeper-config}
      # Replicas on different nodes where possible, so a node failure leaves a standby.'
# Kubernetes versions: Chart.yaml's kubeVersion (keeper is tested on v1.33 to v1.37).
render --kube-version 1.33.0 >/dev/null || fail "refused Kubernetes v1.33"
if out=$(render --kube-version 1.32.9 2>&1); then fail "accepted Kubernetes v1.32"; fi
has 'chart requires kubeVersion: >=1.33.0-0'

set=day2-values
out=$(render -f "$chart/ci/day2-values.yaml")
[ "$(kinds <<<"$out")" = "ClusterRole ClusterRole ClusterRoleBinding ClusterRoleBinding ConfigMap Deployment NetworkPolicy PodDisruptionBudget PrometheusRule Role Role RoleBinding RoleBinding Service ServiceAccount ValidatingWebhookConfiguration " ] \
  || fail "objects: $(kinds <<<"$out")"
common
# image.digest wins over image.tag.
has '^          image: "registry.example.com/platform/keeper@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"$'
lacks '9\.9\.9'
# fullnameOverride names every object; the Lease keeps its name.
lacks '^  name: keeper'
has '^  name: platform-keeper$'
has 'configMap: \{name: platform-keeper-config\}'
has -- '- --webhook-cert-secret=platform-keeper-webhook-tls$'
has '^        name: platform-keeper$'          # the webhook's Service
# commonLabels on every object and on the pods; podLabels and podAnnotations on the pods only.
labelled 'team'
block '^  template:$' 10 '  template:
    metadata:
      labels:
        app.kubernetes.io/name: keeper
        app.kubernetes.io/instance: keeper
        team: platform
        tier: control-plane
      annotations:
        checksum/config: HASH
        example.com/owner: platform
    spec:'
[ "$(grep -c 'tier: control-plane' <<<"$out")" = 1 ] || fail "podLabels outside the pod template"
[ "$(grep -c 'example.com/owner' <<<"$out")" = 1 ] || fail "podAnnotations outside the pod template"
block '^      serviceAccountName: ' 4 '      serviceAccountName: platform-keeper
      imagePullSecrets:
        - name: regcred
      priorityClassName: platform-critical
      securityContext:'
# logLevel as RUST_LOG, envFrom after env.
block '^            - name: RUST_LOG$' 4 '            - name: RUST_LOG
              value: "info,keeper=debug"
          envFrom:
            - secretRef:
                name: keeper-aws'
# extraVolumes and extraVolumeMounts after the chart's own; the CA's path in keeper's configuration.
block '^            - \{name: config, mountPath' 3 '            - {name: config, mountPath: /etc/keeper/keeper.yaml, subPath: keeper.yaml, readOnly: true}
            - mountPath: /etc/keeper/ca
              name: grid-ca
              readOnly: true'
block '^          configMap: \{name: platform-keeper-config\}$' 3 '          configMap: {name: platform-keeper-config}
        - configMap:
            name: grid-ca
          name: grid-ca'
has 'caBundleFile: /etc/keeper/ca/ca.crt'
# topologySpreadConstraints: a constraint without a labelSelector gets the pods' selector labels.
block '^      topologySpreadConstraints:$' 13 '      topologySpreadConstraints:
        - labelSelector:
            matchLabels:
              app.kubernetes.io/instance: keeper
              app.kubernetes.io/name: keeper
          maxSkew: 1
          topologyKey: topology.kubernetes.io/zone
          whenUnsatisfiable: ScheduleAnyway
        - labelSelector:
            matchLabels:
              app.kubernetes.io/name: keeper
          maxSkew: 2
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: DoNotSchedule'
# The NetworkPolicy: keeper's pods; metrics from the monitoring namespace, the webhook from
# anywhere; egress only to DNS and the backends.
block '^kind: NetworkPolicy$' 45 "$(cat <<'POLICY'
kind: NetworkPolicy
metadata:
  name: platform-keeper
  namespace: keeper-system
  labels:
    app.kubernetes.io/name: keeper
    app.kubernetes.io/instance: keeper
    app.kubernetes.io/version: "0.1.0"
    app.kubernetes.io/managed-by: Helm
    helm.sh/chart: keeper-0.1.0
    team: platform
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: keeper
      app.kubernetes.io/instance: keeper
  policyTypes:
    - Ingress
    - Egress
  ingress:
    - ports:
        - {port: 8080, protocol: TCP}
      from:
        - namespaceSelector:
            matchLabels:
              kubernetes.io/metadata.name: monitoring
    - ports:
        - {port: 9443, protocol: TCP}
  egress:
    - ports:
      - port: 53
        protocol: UDP
      - port: 53
        protocol: TCP
      to:
      - namespaceSelector: {}
        podSelector:
          matchLabels:
            k8s-app: kube-dns
    - ports:
      - port: 443
        protocol: TCP
      to:
      - ipBlock:
          cidr: 192.0.2.0/24
---
POLICY
)"
# Alert thresholds: each alert's `for`, its expression's threshold and the durations in its text.
has '^          for: 10m$'
has 'keeper_leader 1 for 10 minutes \(or no replica'
has 'rate\(keeper_reconcile_total\[10m\]\)\) > 0\.5$'
has '^          for: 30m$'
has 'rate\(keeper_backend_requests_total\[10m\]\)\) > 0\.4$'
has '^          for: 20m$'
has 'max by \(namespace, job\) \(keeper_drains_stuck\) > 2$'
has 'max by \(namespace, job, kind\) \(keeper_deletion_blocked\) > 3$'
has '^          for: 2d$'
has 'deletion has waited on its owner for 2 days"$'
has 'blocked \(DeletionBlocked=True\) for 2 days\."$'
has '^            \)\) > 1$'
has 'in phase Failed for 1 hour\."$'
[ "$(grep -c '^          for: 1h$' <<<"$out")" = 2 ] || fail "drainStuck and objectsFailed: for: 1h"
lacks '^          for: (5m|15m|24h)$'

# A NetworkPolicy with the defaults otherwise: the metrics port from anywhere, egress left open;
# no webhook port without the webhook.
set=network-policy-only
out=$(render --set networkPolicy.enabled=true --set webhook.enabled=false)
block '^  policyTypes:$' 5 '  policyTypes:
    - Ingress
  ingress:
    - ports:
        - {port: 8080, protocol: TCP}
---'

# nameOverride replaces the chart's name in the objects' names and app.kubernetes.io/name; names
# stay within 63 characters, without a trailing "-" (the release name is Helm's longest, 53).
set=name-override
release=a-release-name-of-fifty-three-characters-is-the-limit
out=$("$helm" template "$release" "$chart" -n keeper-system --set nameOverride=platform-storage-keeper)
has "^  name: $release-platform\$"
lacks "name: $release-platform-(\$|-)"
has '^    app.kubernetes.io/name: platform-storage-keeper$'
has '^      app.kubernetes.io/name: platform-storage-keeper$'  # the Deployment's selector
set=fullname-override-length
out=$(render --set fullnameOverride=keeper-for-the-platform-team-of-the-storage-departments-in-the-north-office)
has '^  name: keeper-for-the-platform-team-of-the-storage-departments-in-the$'

echo "render: day-2 values (image digest, pull secrets, names, labels, annotations, log level, priority, spread, extra volumes, envFrom, NetworkPolicy, alert thresholds) render what they say; the defaults render none of them"
echo "render: webhook certificate modes selfManaged (RBAC by name), certManager (own CA chain or an issuer), secret (caBundle or CA injection); defaults and certManager render identically twice"
