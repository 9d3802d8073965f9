# Sourced by run-e2e.sh and run-bench.sh: one run at a time on a private stack. Each of them stops
# its stack when it exits, however it ends, so a second run on the same stack must be refused
# before it builds (replacing binaries the first run starts) or touches the stack, or its exit
# would stop the stack under the first run.
#
#   hold_stack DIR WHO   takes DIR/run.lock on fd 9 for the life of the calling shell, or exits 1
#                        saying that another run holds it
# Start what may outlive the run (the stack's servers, keeper) with `9>&-`, so that nothing left
# running keeps the lock.
hold_stack() {
  mkdir -p "$1"
  exec 9>"$1/run.lock"
  if ! flock -n 9; then
    echo "$2: another run is using the stack in $1 (it holds $1/run.lock): wait for it" >&2
    exit 1
  fi
}
