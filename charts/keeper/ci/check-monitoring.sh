#!/usr/bin/env bash
# Checks the chart's monitoring objects: the PrometheusRule the chart renders is a valid rules file
# (`promtool check rules`) identical to files/alerts.yaml, the alerts pass their unit tests
# (`promtool test rules ci/alerts-test.yaml`), the dashboard ConfigMap carries valid JSON and the
# sidecar label, the ServiceMonitor scrapes the metrics port; with the defaults none is rendered.
#
#   charts/keeper/ci/check-monitoring.sh HELM   no subcommands; HELM is the helm binary to use
set -euo pipefail
helm=$1
chart=$(cd "$(dirname "$0")/.." && pwd)
command -v promtool >/dev/null || { echo "promtool is required (Debian package prometheus: e2e/stack.sh deps)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check-monitoring: $*" >&2; exit 1; }
render() { "$helm" template keeper "$chart" -n keeper-system -f "$chart/ci/monitoring-values.yaml" --show-only "$1"; }

# The rules as rendered: the PrometheusRule's spec, dedented.
render templates/prometheusrule.yaml | awk 'found {print substr($0, 3)} /^spec:/ {found=1}' >"$work/rules.yaml"
promtool check rules "$work/rules.yaml" >/dev/null || fail "the rendered PrometheusRule is not a valid rules file"
diff -q <(grep -v '^\s*#' "$chart/files/alerts.yaml" | grep -v '^\s*$') \
        <(grep -v '^\s*#' "$work/rules.yaml" | grep -v '^\s*$') >/dev/null \
  || fail "the rendered PrometheusRule differs from files/alerts.yaml"
render templates/prometheusrule.yaml | grep -q '^    release: kube-prometheus-stack$' || fail "PrometheusRule lacks its extra labels"
(cd "$chart/ci" && promtool test rules alerts-test.yaml >/dev/null) || {
  (cd "$chart/ci" && promtool test rules alerts-test.yaml) >&2; fail "alert unit tests failed"; }

# The dashboard: valid JSON with panels, in the namespace asked for, with the sidecar label.
render templates/dashboard.yaml >"$work/dashboard.yaml"
grep -q '^  namespace: monitoring$' "$work/dashboard.yaml" || fail "dashboard ConfigMap not in the namespace asked for"
grep -q '^    grafana_dashboard: "1"$' "$work/dashboard.yaml" || fail "dashboard ConfigMap lacks the grafana_dashboard label"
awk 'found {print substr($0, 5)} /keeper.json: \|-/ {found=1}' "$work/dashboard.yaml" \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["panels"], "no panels"' \
  || fail "the dashboard is not valid JSON with panels"

# The ServiceMonitor scrapes the Service's metrics port and carries its extra labels.
render templates/service.yaml >"$work/service.yaml"
grep -q '^kind: ServiceMonitor$' "$work/service.yaml" || fail "no ServiceMonitor rendered"
grep -q -- '- port: metrics$' "$work/service.yaml" || fail "the ServiceMonitor does not scrape the metrics port"
grep -q '^    release: kube-prometheus-stack$' "$work/service.yaml" || fail "ServiceMonitor lacks its extra labels"

# Off by default: clusters without the Prometheus operator must not get its kinds.
if "$helm" template keeper "$chart" -f "$chart/ci/demo-values.yaml" | grep -qE '^kind: (ServiceMonitor|PrometheusRule)$'; then
  fail "monitoring.coreos.com objects rendered with the default values"
fi
echo "monitoring: rules valid and tested, dashboard valid, ServiceMonitor scrapes the metrics port"
