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
[ "$(kinds <<<"$out")" = "ClusterRole ClusterRoleBinding ConfigMap Deployment PodDisruptionBudget Role RoleBinding Secret Service ServiceAccount ValidatingWebhookConfiguration " ] \
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

echo "render: defaults, demo, single-replica and external-webhook value sets render what they promise; adoption by label reads namespaces"
