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
refused "/config/runtime/drainConcurrency" --set config.runtime.drainConcurrency=0
refused "/config/runtime/backendTimeouts/request" --set config.runtime.backendTimeouts.request=60
refused "/config/providers/p/s3Compatible/requestsPerSecond" --set config.providers.p.s3Compatible.requestsPerSecond=0
refused "/config/providers/p/storageGrid/requestsPerSecond" --set config.providers.p.storageGrid.requestsPerSecond=-5
refused "/config/rds/requestsPerSecond" --set-string config.rds.requestsPerSecond=fast
refused "/config/rds/requestBurst" --set config.rds.requestsPerSecond=5 --set config.rds.requestBurst=0
refused "requestsPerSecond" --set config.rds.requestBurst=10
refused "/config/providers/p/s3Compatible/adoption" --set config.providers.p.s3Compatible.adoption.namespaces=a
refused "/config/providers/p/s3Compatible/adoption/allowedNamespaces/names" --set config.providers.p.s3Compatible.adoption.allowedNamespaces.names=a
refused "/config/providers/p/s3Compatible/adoption/allowedNamespaces" --set-json 'config.providers.p.s3Compatible.adoption.allowedNamespaces={}'
refused "/config/watchNamespaces" --set-json 'config.watchNamespaces=[]'
refused "/config/watchNamespaces" --set-json 'config.watchNamespaces=["a","a"]'
refused "/config/watchNamespaces/0" --set-json 'config.watchNamespaces=["Team_A"]'
refused "/config/watchNamespaces" --set config.watchNamespaces=team-a
# The webhook's certificate mode, and values of another mode than the one chosen.
refused "/webhook/tls/mode" --set webhook.tls.mode=auto
refused "/webhook/tls/selfManaged/validity" --set webhook.tls.selfManaged.validity=1y
refused "/webhook/tls/certManager" --set webhook.tls.certManager.issuer=ca
refused "/webhook/caInjectFrom" --set webhook.caInjectFrom=just-a-name
refused "webhook.certSecret is set but webhook.tls.mode is selfManaged" --set webhook.certSecret=mine
refused "webhook.caBundle is set but webhook.tls.mode is certManager" --set webhook.tls.mode=certManager --set webhook.caBundle=Y2E=
refused "webhook.tls.mode=secret needs webhook.certSecret" --set webhook.tls.mode=secret --set webhook.caBundle=Y2E=
refused "needs webhook.caBundle" --set webhook.tls.mode=secret --set webhook.certSecret=mine
refused "both set" --set webhook.tls.mode=secret --set webhook.certSecret=mine --set webhook.caBundle=Y2E= --set webhook.caInjectFrom=a/b
# A rate renders into keeper's configuration as given (a fraction needs --set-json: --set makes it a string).
rendered=$("$helm" template keeper "$chart" --set-json config.providers.p.s3Compatible.requestsPerSecond=2.5 \
  --set config.rds.requestsPerSecond=20 --set config.rds.requestBurst=40)
for line in 'requestsPerSecond: 2.5' 'requestBurst: 40' 'requestsPerSecond: 20'; do
  grep -qF "$line" <<<"$rendered" || { echo "request rate not rendered: $line" >&2; exit 1; }
done
echo "values.schema.json: wrong values refused (request rates included), chart value sets accepted; namespaces RBAC follows allowedNamespaces.selector"

# Day-2 values (ci/day2-values.yaml, accepted above).
refused "/imagePullSecrets" --set imagePullSecrets=regcred
refused "/imagePullSecrets/0" --set-json 'imagePullSecrets=[{"secret":"regcred"}]'
refused "/image/digest" --set image.digest=latest
refused "/fullnameOverride" --set fullnameOverride=Keeper_1
refused "/commonLabels" --set 'commonLabels.app\.kubernetes\.io/name=other'
refused "/podLabels/tier" --set podLabels.tier=-x
refused "/podAnnotations" --set podAnnotations.checksum/config=x
refused "/logLevel" --set logLevel=verbose
refused "/priorityClassName" --set priorityClassName=High_Priority
refused "/topologySpreadConstraints/0" --set-json 'topologySpreadConstraints=[{"maxSkew":1}]'
refused "/envFrom/0" --set-json 'envFrom=[{"secretRef":{"name":"a"},"configMapRef":{"name":"b"}}]'
refused "/extraVolumeMounts/0" --set-json 'extraVolumeMounts=[{"name":"grid-ca"}]'
refused "/networkPolicy" --set networkPolicy.ingress=x
refused "/networkPolicy/metrics/from/0" --set-json 'networkPolicy.metrics.from=[{"pods":{}}]'
refused "/networkPolicy/enabled" --set-string networkPolicy.enabled=yes
refused "/metrics/prometheusRule/thresholds/noLeader/for" --set metrics.prometheusRule.thresholds.noLeader.for=5
refused "/metrics/prometheusRule/thresholds/reconcileErrors/ratio" --set-json metrics.prometheusRule.thresholds.reconcileErrors.ratio=2
refused "/metrics/prometheusRule/thresholds/drainStuck/count" --set metrics.prometheusRule.thresholds.drainStuck.count=-1
refused "/metrics/prometheusRule/thresholds" --set metrics.prometheusRule.thresholds.leader.for=5m
echo "values.schema.json: day-2 values (image digest, pull secrets, names, labels, annotations, log level, scheduling, volumes, envFrom, NetworkPolicy, alert thresholds) refused when wrong"
