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
echo "values.schema.json: wrong values refused, chart value sets accepted"
