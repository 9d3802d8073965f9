#!/usr/bin/env bash
# `make bench`: builds keeper, the emulators and the benchmark in release mode, starts a private
# local control plane (the Kubernetes control plane built from e2e/kube and the backend emulators)
# in .keeper-dev/bench (beside any demo or e2e stack), runs keeper-bench against it and stops it
# again, whatever happens.
#
#   e2e/run-bench.sh [ARGS...]   no subcommands; ARGS go to keeper-bench (e.g. --smoke,
#                                --only buckets,drains, --only latency; `keeper-bench --help`
#                                lists them)
#
# The stack runs as for the e2e suite, except: RDS instances have no phases (KEEPER_RDS_PHASE=0s,
# so that keeper and the floor measure their own overhead, not the emulated waits) and the
# StorageGRID emulator drains 20,000 objects per second (KEEPER_DRAIN_RATE), so that a drain's
# figure shows how soon keeper notices the end rather than the emulator's pace.
#
# Environment: CARGO_TARGET_DIR (default target/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export KEEPER_DEV_DIR="$ROOT/.keeper-dev/bench"
# shellcheck source=e2e/hold-stack.sh
. "$ROOT/e2e/hold-stack.sh"
hold_stack "$KEEPER_DEV_DIR" run-bench
(cd "$ROOT" && cargo build --release --quiet -p keeper -p keeper-e2e-storagegrid -p keeper-e2e-awsproxy \
  -p keeper-e2e-bench)
export KEEPER_BIN_DIR="$CARGO_TARGET_DIR/release"
export KEEPER_RDS_PHASE=0s KEEPER_DRAIN_RATE=20000
# The benchmark is not run by cargo: it finds the checkout (keeper's webhook files) here.
export KEEPER_REPO_ROOT="$ROOT"
trap '"$ROOT/e2e/stack.sh" down' EXIT
"$ROOT/e2e/stack.sh" up 9>&-
"$ROOT/e2e/stack.sh" config 9>&-
# shellcheck source=/dev/null
. "$KEEPER_DEV_DIR/env"
cd "$ROOT" && "$KEEPER_BIN_DIR/keeper-bench" "$@" 9>&-
