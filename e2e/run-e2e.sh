#!/usr/bin/env bash
# Runs the end-to-end scenarios (e2e/scenarios) one at a time.
#
# Without KEEPER_E2E_KUBECONFIG: starts a private local control plane in .keeper-dev/e2e (beside
# any `make demo` stack), runs the scenarios against it, and stops it again, whatever happens.
# With KEEPER_E2E_KUBECONFIG (and KEEPER_E2E_CONFIG): runs them against that cluster instead.
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
  (cd "$ROOT" && cargo build --quiet -p keeper)
  export KEEPER_BIN="$CARGO_TARGET_DIR/debug/keeper"
  KUBECONFIG="$KEEPER_E2E_KUBECONFIG" kubectl apply -f "$ROOT/crds/"
  cd "$ROOT" && run_scenarios "$@"
  exit
fi

export KEEPER_DEV_DIR="$ROOT/.keeper-dev/e2e"
trap '"$ROOT/e2e/stack.sh" down' EXIT
"$ROOT/e2e/stack.sh" up
"$ROOT/e2e/stack.sh" config
# shellcheck source=/dev/null
. "$KEEPER_DEV_DIR/env"
cd "$ROOT" && run_scenarios "$@"
