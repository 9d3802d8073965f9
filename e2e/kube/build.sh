#!/usr/bin/env bash
# The real Kubernetes control plane for keeper's local stack, built from pinned Go modules.
#
#   e2e/kube/build.sh [bin-dir] [MINOR]   build kube-apiserver, kube-controller-manager, kubectl
#                                         and etcd for Kubernetes MINOR (default: $KEEPER_K8S, else
#                                         the newest minor pinned here) into the cache, once, and
#                                         print the directory that holds them
#   e2e/kube/build.sh version [MINOR]     print the pinned release (v1.37.2)
#   e2e/kube/build.sh minors              print the minors pinned here, oldest first
#   e2e/kube/build.sh pin VERSION         (maintainers) write e2e/kube/k8s-MAJOR.MINOR/go.mod for
#                                         release VERSION (e.g. 1.37.2) and its go.sum
#
# Kubernetes does not support use as a Go module, but it builds as one (kubernetes#79384): each
# e2e/kube/k8s-X.Y/ is a module that requires k8s.io/kubernetes vX.Y.Z and `replace`s each of its
# staging modules (k8s.io/api, k8s.io/apimachinery, ...) with the published v0.Y.Z, keeping
# kubernetes' own `go` and `godebug` lines. etcd is a module of its own (e2e/kube/etcd), so that
# minimal version selection does not move the etcd client, grpc and otel that kube-apiserver was
# released with; it requires go.etcd.io/etcd/server/v3 whose own `replace` lines stop a plain
# `go install`. Every go.sum is committed: a build downloads exactly what was pinned.
#
# Binaries go to ${XDG_CACHE_HOME:-~/.cache}/keeper/k8s/vX.Y.Z/ with a stamp of the inputs (the
# go.mod and go.sum files and this script); a cached build with the same stamp is reused at once.
# Go's own module and build caches (GOMODCACHE, GOCACHE) are reused as well, so after a change of
# flags only the link steps run again. The first build downloads about 900 MB of modules and takes
# 6-10 minutes on 2 cores (measured: 364 s alone); the binaries take about 320 MB per release.
#
# Versions are stamped into the binaries the way Kubernetes' own build does
# (k8s.io/component-base/version), so `kubectl version` and /version tell the truth.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/keeper/k8s"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# The minors pinned here, oldest first (directories k8s-1.NN).
minors() {
  local d
  for d in "$HERE"/k8s-*/; do
    d=${d%/}
    echo "${d##*/k8s-}"
  done | sort -V
}

# The minor to use: the argument, else KEEPER_K8S, else the newest pinned.
pick_minor() {
  local minor=${1:-${KEEPER_K8S:-}}
  [ -n "$minor" ] || minor=$(minors | tail -1)
  minor=${minor#v}
  # KEEPER_K8S=1.33.13 or 1.33 both name the module of 1.33.
  minor=$(echo "$minor" | cut -d. -f1,2)
  [ -f "$HERE/k8s-$minor/go.mod" ] || die "Kubernetes $minor is not pinned here (pinned: $(minors | tr '\n' ' '))"
  echo "$minor"
}

# The release a module pins (v1.37.2).
pinned_version() {
  awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' \
    "$HERE/k8s-$1/go.mod" | head -1
}

require_go() {
  command -v go >/dev/null || die "Go is needed to build the local control plane (see README: Prerequisites)"
}

cmd_build() {
  require_go
  local minor version dir stamp
  minor=$(pick_minor "${1:-}")
  version=$(pinned_version "$minor")
  [ -n "$version" ] || die "e2e/kube/k8s-$minor/go.mod requires no k8s.io/kubernetes"
  dir="$CACHE/$version"
  stamp=$(cat "$HERE/k8s-$minor/go.mod" "$HERE/k8s-$minor/go.sum" "$HERE/etcd/go.mod" "$HERE/etcd/go.sum" "$0" \
    | sha256sum | cut -d' ' -f1)
  if [ -f "$dir/stamp" ] && [ "$(cat "$dir/stamp")" = "$stamp" ]; then
    echo "$dir"
    return 0
  fi
  log "building Kubernetes $version (kube-apiserver, kube-controller-manager, kubectl) and etcd into $dir"
  log "the first build downloads about 900 MB of Go modules and takes 6-10 minutes on 2 cores"
  local start=$SECONDS
  mkdir -p "$dir"
  rm -f "$dir/stamp"
  local major=${version#v}; major=${major%%.*}
  local minor_number=${minor#*.}
  # The release's date, from the module proxy's record of it (kube's buildDate).
  local info built
  info=$(cd "$HERE/k8s-$minor" && go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"Info": "\(.*\)",*/\1/p')
  built=$(sed -n 's/.*"Time": *"\([^"]*\)".*/\1/p' "$info" 2>/dev/null || true)
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_number"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${built:-1970-01-01T00:00:00Z}"
  done
  # -trimpath and no VCS stamp: the same inputs give the same binaries on every machine.
  (cd "$HERE/k8s-$minor" && go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$dir/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl) \
    || die "building Kubernetes $version failed (module e2e/kube/k8s-$minor)"
  local etcd_version; etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2} $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$HERE/etcd/go.mod" | head -1)
  (cd "$HERE/etcd" && go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3) \
    || die "building etcd $etcd_version failed (module e2e/kube/etcd)"
  echo "$stamp" >"$dir/stamp"
  log "built Kubernetes $version and etcd $etcd_version in $((SECONDS - start)) s"
  echo "$dir"
}

# Writes e2e/kube/k8s-MAJOR.MINOR/go.mod for a release from kubernetes' own go.mod: its `go` and
# `godebug` lines, the release required, every staging module it replaces with a local path
# replaced with the published v0.MINOR.PATCH instead (modules that were never published, such as
# k8s.io/sample-controller, are left out: nothing that is built imports them), and the commands as
# `tool` lines so that `go mod tidy` keeps what they need.
cmd_pin() {
  require_go
  local version=${1:?usage: build.sh pin VERSION (e.g. 1.37.2)}
  version=${version#v}
  local minor; minor=$(echo "$version" | cut -d. -f1,2)
  local staging_version="v0.${version#*.}"
  local dir="$HERE/k8s-$minor"
  local proxy; proxy=$(go env GOPROXY | cut -d, -f1)
  [ "$proxy" != direct ] && [ "$proxy" != off ] || die "pin reads kubernetes' go.mod from a module proxy (GOPROXY=$proxy)"
  local upstream; upstream=$(curl -sfL "$proxy/k8s.io/kubernetes/@v/v$version.mod") \
    || die "the module proxy has no k8s.io/kubernetes v$version"
  mkdir -p "$dir"
  {
    echo "// Kubernetes v$version, built by e2e/kube/build.sh (written by \`build.sh pin $version\`)."
    echo "module keeper.dev/e2e/kube/k8s-$minor"
    echo
    grep -E '^go ' <<<"$upstream"
    echo
    grep -E '^godebug ' <<<"$upstream" || true
    echo
    echo "require k8s.io/kubernetes v$version"
    echo
    echo "replace ("
    local module
    for module in $(awk '/^replace \(/ {r=1; next} r && /^\)/ {r=0} r && $3 ~ /^\.\/staging/ {print $1}' <<<"$upstream"); do
      if curl -sf -o /dev/null "$proxy/$module/@v/$staging_version.info"; then
        printf '\t%s => %s %s\n' "$module" "$module" "$staging_version"
      fi
    done
    echo ")"
    echo
    echo "tool ("
    printf '\tk8s.io/kubernetes/cmd/%s\n' kube-apiserver kube-controller-manager kubectl
    echo ")"
  } >"$dir/go.mod"
  (cd "$dir" && go mod tidy) || die "go mod tidy failed for Kubernetes v$version"
  log "pinned Kubernetes v$version in $dir"
}

case "${1:-bin-dir}" in
  bin-dir) cmd_build "${2:-}" ;;
  version) pinned_version "$(pick_minor "${2:-}")" ;;
  minors) minors ;;
  pin) cmd_pin "${2:-}" ;;
  *) echo "usage: $0 [bin-dir [MINOR]] | version [MINOR] | minors | pin VERSION" >&2; exit 2 ;;
esac
