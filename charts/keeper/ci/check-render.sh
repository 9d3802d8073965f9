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

# The webhook's certificate (webhook.tls.mode). Nothing random and nothing looked up in the cluster:
# `helm template`, as Argo CD renders, gives the same output every time.
has_block() { [[ "$out" == *"$1"* ]] || fail "expected the lines:"$'\n'"$1"; }
lacks_block() { if [[ "$out" == *"$1"* ]]; then fail "unexpected lines:"$'\n'"$1"; fi; }
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

echo "render: defaults, demo, single-replica and external-webhook value sets render what they promise; adoption by label reads namespaces"
echo "render: webhook certificate modes selfManaged (RBAC by name), certManager (own CA chain or an issuer), secret (caBundle or CA injection); defaults and certManager render identically twice"
