#!/usr/bin/env bash
# Runs the end-to-end scenarios (e2e/scenarios, package keeper-e2e-scenarios) one at a time.
#
#   e2e/run-e2e.sh [ARGS...]   no subcommands; ARGS go to `cargo nextest run` (when installed) or
#                              to the test binaries after `cargo test --`, e.g. a test name filter
#
# Without KEEPER_E2E_KUBECONFIG: starts a private local control plane in .keeper-dev/e2e (beside
# any `make demo` stack) with `e2e/stack.sh up` and `config`, runs the scenarios against it, and
# stops it again (`e2e/stack.sh down`), whatever happens. keeper runs there as ServiceAccount
# keeper-system/keeper under the chart's RBAC, which kube-apiserver enforces; after a whole-suite
# run (no ARGS) e2e/rbac-usage.py checks from kube-apiserver's audit log that every granted verb was
# used by keeper and nothing keeper asked for was denied (the chart's RBAC is minimal and sufficient).
# With KEEPER_E2E_KUBECONFIG (and KEEPER_E2E_CONFIG): builds keeper, applies crds/ to that cluster
# and runs the scenarios against it instead.
#
# Environment:
#   KEEPER_E2E_KUBECONFIG  a real cluster's kubeconfig (default: the local control plane); with it,
#                          KEEPER_E2E_ALLOW_SKIP=1 is set: scenarios that need the local stack skip
#                          (without it, such a scenario fails rather than pass without running)
#   KEEPER_E2E_CONFIG      keeper's configuration for that cluster's backends (required with it)
#   KEEPER_E2E_OPERATOR_NAMESPACE  keeper's namespace in that cluster (default keeper-system)
#   KEEPER_E2E_KEEPER_KUBECONFIG   the kubeconfig keeper runs with there (default: KEEPER_E2E_KUBECONFIG)
#   KEEPER_S3_ENDPOINT, KEEPER_RDS_ENDPOINT
#                          S3 and RDS endpoints for the real-cluster path (omit for AWS)
#   CARGO_TARGET_DIR       where keeper and the emulators are built (default target/)
# It sets KEEPER_HELM (helm, from `e2e/stack.sh helm-path`) for the chart scenario.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"

export KEEPER_HELM; KEEPER_HELM=$("$ROOT/e2e/stack.sh" helm-path)

run_scenarios() {
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run -p keeper-e2e-scenarios --test-threads 1 --no-fail-fast "$@"
  else
    cargo test -p keeper-e2e-scenarios --no-fail-fast -- --test-threads 1 "$@"
  fi
}

if [ -n "${KEEPER_E2E_KUBECONFIG:-}" ]; then
  : "${KEEPER_E2E_CONFIG:?set KEEPER_E2E_CONFIG to keeper's configuration for that cluster's backends}"
  # Scenarios that need the local stack (its audit log, the backend emulators) say so and skip.
  export KEEPER_E2E_ALLOW_SKIP=1
  (cd "$ROOT" && cargo build --quiet -p keeper)
  export KEEPER_BIN="$CARGO_TARGET_DIR/debug/keeper"
  KUBECONFIG="$KEEPER_E2E_KUBECONFIG" kubectl apply -f "$ROOT/crds/"
  cd "$ROOT" && run_scenarios "$@"
  exit
fi

export KEEPER_DEV_DIR="$ROOT/.keeper-dev/e2e"
# shellcheck source=e2e/hold-stack.sh
. "$ROOT/e2e/hold-stack.sh"
hold_stack "$KEEPER_DEV_DIR" run-e2e
trap '"$ROOT/e2e/stack.sh" down' EXIT
"$ROOT/e2e/stack.sh" up 9>&-
"$ROOT/e2e/stack.sh" config 9>&-
# shellcheck source=/dev/null
. "$KEEPER_DEV_DIR/env"
status=0
cd "$ROOT" && run_scenarios "$@" 9>&- || status=$?
if [ $# -eq 0 ]; then
  # moto's venv has PyYAML, which the check reads the rendered chart with.
  "$(dirname "$("$ROOT/e2e/stack.sh" moto-path)")/python" "$ROOT/e2e/rbac-usage.py" \
    "$KEEPER_DEV_DIR/keeper-rbac.yaml" "$KEEPER_AUDIT_LOG" || status=1
fi
exit $status
