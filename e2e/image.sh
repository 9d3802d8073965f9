#!/usr/bin/env bash
# keeper's OCI image, built without a daemon or a registry.
#
#   e2e/image.sh deps    install buildah, skopeo, umoci and ca-certificates (apt-get when root)
#   e2e/image.sh build   release-build keeper and kubectl-keeper (the kubectl plugin) and write the
#                        image as an OCI archive to $CARGO_TARGET_DIR/image/keeper.oci.tar (printed on
#                        the last line)
#   e2e/image.sh test    unpack that archive with skopeo and umoci and check it: keeper and
#                        kubectl-keeper run from the image's own root filesystem (chroot: its own glibc
#                        and loader), the user is numeric and non-root, the entrypoint is keeper, the
#                        OCI labels are set and the image is under 60 MiB
#
# Environment: CARGO_TARGET_DIR (default target/), KEEPER_IMAGE_TAG (default: the crate version).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
TAG="${KEEPER_IMAGE_TAG:-$VERSION}"
OUT="$CARGO_TARGET_DIR/image"
ARCHIVE="$OUT/keeper.oci.tar"
MAX_BYTES=$((60 * 1024 * 1024))

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

cmd_deps() {
  local missing=()
  for tool in buildah skopeo umoci; do command -v $tool >/dev/null || missing+=($tool); done
  [ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  "$ROOT/e2e/stack.sh" apt-install "${missing[@]}"
}

cmd_build() {
  cmd_deps
  log "building keeper and kubectl-keeper (release)"
  (cd "$ROOT" && cargo build --quiet --release -p keeper --bins)
  local bin="$CARGO_TARGET_DIR/release/keeper"
  local plugin="$CARGO_TARGET_DIR/release/kubectl-keeper"
  local ctx; ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' RETURN
  local rootfs="$ctx/rootfs"
  mkdir -p "$rootfs/usr/local/bin" "$rootfs/etc/ssl/certs" "$rootfs/tmp"
  chmod 1777 "$rootfs/tmp"
  install -m 0755 "$bin" "$rootfs/usr/local/bin/keeper"
  # The kubectl plugin, for `docker cp` / `kubectl cp` onto a PATH (README, "kubectl keeper").
  install -m 0755 "$plugin" "$rootfs/usr/local/bin/kubectl-keeper"
  # The shared libraries the binaries link, at the paths the loader looks them up.
  local lib
  for lib in $( (ldd "$bin"; ldd "$plugin") | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$rootfs/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
  cp "$ROOT/Containerfile" "$ctx/Containerfile"
  mkdir -p "$OUT"
  rm -f "$ARCHIVE"
  log "building the image with buildah"
  buildah --storage-driver vfs bud --isolation chroot --quiet --layers=false \
    --build-arg VERSION="$TAG" --timestamp 0 \
    -f "$ctx/Containerfile" -t "keeper:$TAG" "$ctx" >/dev/null
  buildah --storage-driver vfs push --quiet "keeper:$TAG" "oci-archive:$ARCHIVE:keeper:$TAG"
  buildah --storage-driver vfs rmi "keeper:$TAG" >/dev/null
  echo "$ARCHIVE"
}

cmd_test() {
  cmd_deps
  [ -f "$ARCHIVE" ] || die "no image at $ARCHIVE: run 'make image' first"
  local size; size=$(stat -c %s "$ARCHIVE")
  [ "$size" -lt "$MAX_BYTES" ] || die "the image is $((size / 1024 / 1024)) MiB, over 60 MiB"
  local work; work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  skopeo copy --quiet "oci-archive:$ARCHIVE" "oci:$work/layout:keeper"
  umoci unpack --image "$work/layout:keeper" "$work/bundle" >/dev/null
  python3 - "$work/bundle/config.json" <<'PY'
import json, sys
process = json.load(open(sys.argv[1]))["process"]
assert process["user"]["uid"] == 65532 and process["user"]["gid"] == 65532, process["user"]
assert process["args"][:2] == ["/usr/local/bin/keeper", "run"], process["args"]
PY
  local labels; labels=$(skopeo inspect --config "oci-archive:$ARCHIVE" \
    | python3 -c 'import json,sys; l=json.load(sys.stdin)["config"]["Labels"]; print(l["org.opencontainers.image.source"], l["org.opencontainers.image.version"], l["org.opencontainers.image.licenses"])')
  [ "$labels" = "https://github.com/keeper-dev/keeper $TAG Apache-2.0" ] || die "unexpected OCI labels: $labels"
  # Run the entrypoint from the image's own root filesystem, as its user: nothing of the host's.
  local version
  version=$(chroot --userspec=65532:65532 "$work/bundle/rootfs" /usr/local/bin/keeper --version) \
    || die "keeper does not run from the image's root filesystem"
  [ "$version" = "keeper $VERSION" ] || die "unexpected version output: $version"
  local plugin_version
  plugin_version=$(chroot --userspec=65532:65532 "$work/bundle/rootfs" /usr/local/bin/kubectl-keeper --version) \
    || die "kubectl-keeper does not run from the image's root filesystem"
  [ "$plugin_version" = "kubectl-keeper $VERSION" ] || die "unexpected kubectl-keeper version output: $plugin_version"
  log "image OK: $((size / 1024 / 1024)) MiB, user 65532, '$version' and '$plugin_version' run from its own root filesystem"
}

case "${1:-}" in
  deps) cmd_deps ;;
  build) cmd_build ;;
  test) cmd_test ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
