#!/usr/bin/env bash
# Checks the chart's monitoring objects: the PrometheusRule the chart renders is a valid rules file
# (`promtool check rules`), with the default thresholds identical to files/alerts.yaml and passing
# the alerts' unit tests (`promtool test rules ci/alerts-test.yaml`, run against the rendered
# rules), and with other thresholds (ci/day2-values.yaml) still valid; the dashboard ConfigMap
# carries valid JSON and the sidecar label, the ServiceMonitor scrapes the metrics port; with the
# defaults none is rendered.
#
#   charts/keeper/ci/check-monitoring.sh HELM   no subcommands; HELM is the helm binary to use
set -euo pipefail
helm=$1
chart=$(cd "$(dirname "$0")/.." && pwd)
command -v promtool >/dev/null || { echo "promtool is required (Debian package prometheus: e2e/stack.sh deps)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "check-monitoring: $*" >&2; exit 1; }
render() { "$helm" template keeper "$chart" -n keeper-system -f "$chart/ci/monitoring-values.yaml" --show-only "$1" "${@:2}"; }
# The rules as rendered: the PrometheusRule's spec, dedented (the command files/alerts.yaml names).
rules() { awk 'found {print substr($0, 3)} /^spec:/ {found=1}'; }

render templates/prometheusrule.yaml | rules >"$work/rules.yaml"
promtool check rules "$work/rules.yaml" >/dev/null || fail "the rendered PrometheusRule is not a valid rules file"
diff -u "$chart/files/alerts.yaml" "$work/rules.yaml" >&2 \
  || fail "files/alerts.yaml is not the rules the chart renders with the default thresholds (regenerate it with the command in its header)"
render templates/prometheusrule.yaml | grep -q '^    release: kube-prometheus-stack$' || fail "PrometheusRule lacks its extra labels"
# The unit tests, against the rendered rules (alerts-test.yaml names files/alerts.yaml, which the
# diff above holds to be the same, so that `promtool test rules` also runs on its own).
sed 's|^  - \.\./files/alerts\.yaml$|  - rules.yaml|' "$chart/ci/alerts-test.yaml" >"$work/alerts-test.yaml"
grep -qx '  - rules.yaml' "$work/alerts-test.yaml" || fail "ci/alerts-test.yaml does not name ../files/alerts.yaml in rule_files"
(cd "$work" && promtool test rules alerts-test.yaml >/dev/null) || {
  (cd "$work" && promtool test rules alerts-test.yaml) >&2; fail "alert unit tests failed"; }
# Other thresholds (metrics.prometheusRule.thresholds; ci/check-render.sh asserts where they land)
# still make a valid rules file.
render templates/prometheusrule.yaml -f "$chart/ci/day2-values.yaml" | rules >"$work/day2-rules.yaml"
promtool check rules "$work/day2-rules.yaml" >/dev/null || fail "the PrometheusRule with ci/day2-values.yaml is not a valid rules file"

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
echo "monitoring: rules valid and tested (default and day-2 thresholds), dashboard valid, ServiceMonitor scrapes the metrics port"
