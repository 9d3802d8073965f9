#!/usr/bin/env bash
# Checks that values.schema.json refuses wrong values at `helm template` (as at `helm install`)
# with a message naming the value, and accepts the chart's own value sets.
#
#   charts/keeper/ci/check-schema.sh HELM   no subcommands; HELM is the helm binary to use
set -euo pipefail
helm=$1
chart=$(cd "$(dirname "$0")/.." && pwd)
for values in "$chart"/ci/*-values.yaml; do
  "$helm" template keeper "$chart" -f "$values" >/dev/null
done
refused() {  # refused EXPECTED-TEXT --set ...
  local expected=$1; shift
  local out
  if out=$("$helm" template keeper "$chart" "$@" 2>&1); then
    echo "schema accepted $*" >&2; exit 1
  fi
  grep -qF -- "$expected" <<<"$out" || { echo "refusal of $* does not say $expected: $out" >&2; exit 1; }
}
refused "/logFormat" --set logFormat=xml
refused "/metrics/port" --set metrics.port=abc
refused "/webhook/failurePolicy" --set webhook.failurePolicy=Sometimes
refused "/controllers/0" --set 'controllers={tenant2}'
refused "replicas" --set replicas=2
refused "/replicaCount" --set replicaCount=two
refused "/leaderElection/enabled" --set-string leaderElection.enabled=yes
refused "/config/runtime/concurrency" --set config.runtime.concurrency=0
refused "/config/runtime/controllers/bucket/concurrency" --set config.runtime.controllers.bucket.concurrency=100
refused "/config/runtime/controllers" --set config.runtime.controllers.buckets.concurrency=8
refused "/config/runtime/backendTimeouts/request" --set config.runtime.backendTimeouts.request=60
# keeper reads namespaces only when a provider admits namespaces by label.
namespaces_rule() { "$helm" template keeper "$chart" "$@" | grep -c 'resources: \[namespaces\]' || true; }
[ "$(namespaces_rule)" = 0 ] || { echo "namespaces RBAC granted without a selector" >&2; exit 1; }
[ "$(namespaces_rule --set-json 'config.providers.p.s3Compatible.allowedNamespaces={"selector":{"matchLabels":{"a":"b"}}}')" = 1 ] \
  || { echo "no namespaces RBAC for allowedNamespaces.selector" >&2; exit 1; }
echo "values.schema.json: wrong values refused, chart value sets accepted; namespaces RBAC follows allowedNamespaces.selector"
