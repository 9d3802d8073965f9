# keeper — see README.md. `make test` is the one test command.
SHELL := /bin/bash
# One target dir reused across runs and clones (set CARGO_TARGET_DIR to share it).
export CARGO_TARGET_DIR ?= $(CURDIR)/target
CARGO ?= cargo
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)

.PHONY: all build crds fmt fmt-check clippy doc chart unit e2e e2e-compat chaos bench bench-smoke test deps deps-moto kube dev-up dev-down demo image image-test

all: build

build:
	$(CARGO) build --workspace

## crds: regenerate crds/ from the Rust types
crds:
	$(CARGO) run --quiet -p keeper -- crdgen --output-dir crds
	$(CARGO) run --quiet -p keeper -- crdgen --output-dir charts/keeper/crds

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## doc: the operator's developer docs (private items included) build without a broken link
doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p keeper --no-deps --document-private-items

## unit: unit tests and the emulators' own suites (no stack needed: moto, no Prometheus)
unit: deps-moto
ifeq ($(NEXTEST),yes)
	KEEPER_MOTO_SERVER=$$(e2e/stack.sh moto-path) $(CARGO) nextest run --workspace --exclude keeper-e2e-scenarios --no-fail-fast
else
	KEEPER_MOTO_SERVER=$$(e2e/stack.sh moto-path) $(CARGO) test --workspace --exclude keeper-e2e-scenarios --no-fail-fast
endif

## e2e: the end-to-end scenarios with kubectl against the local control plane, Kubernetes 1.37
## (KEEPER_K8S picks another pinned release; KEEPER_E2E_KUBECONFIG a cluster of your own: see docs/development.md)
e2e: deps
	e2e/run-e2e.sh

## e2e-compat: the same scenarios on every older Kubernetes release pinned in e2e/kube (1.33 to
## 1.36), oldest first, stopping at the first that fails; each control plane is built once (4-10
## minutes cold), each run takes about 25 minutes; not part of `make test`.
## KEEPER_K8S=1.35 make e2e runs one of them.
e2e-compat:
	@newest=$$(e2e/kube/build.sh minors | tail -1); \
	for minor in $$(e2e/kube/build.sh minors); do \
	  [ "$$minor" != "$$newest" ] || continue; \
	  echo "==> the e2e suite on Kubernetes $$minor"; \
	  KEEPER_K8S=$$minor $(MAKE) e2e || { echo "e2e-compat: Kubernetes $$minor failed" >&2; exit 1; }; \
	done

## chaos: the long chaos run, three scenarios: crash (200 objects of every kind a round created,
## filled, drained and deleted while keeper is SIGKILLed every 2-10 s, at least 50 times), two
## managers (the same with two keepers, leader election off) and faults (3 rounds of 200 objects
## while the API and every backend refuse a share of keeper's requests); then checked for orphans,
## duplicates, lost objects, stuck or removed finalizers, leaked secrets, backoff and hot loops;
## each prints a summary table. Then kills and faults (issue 26 item 9): 54 objects a round while
## keeper is SIGKILLed every 1-4 s (at least 40 times) and 20% of its API and 15% of its backend
## requests fail; every object must be Ready within the round's bound. Their short forms are part
## of `make e2e`.
chaos: deps
	KEEPER_CHAOS_OBJECTS=200 KEEPER_CHAOS_KILL_MS=2000-10000 KEEPER_CHAOS_MIN_KILLS=50 \
	  KEEPER_CHAOS_FAULT_ROUNDS=3 e2e/run-e2e.sh crash_chaos two_managers fault_chaos --nocapture
	KEEPER_CHAOS_OBJECTS=54 KEEPER_CHAOS_KILL_MS=1000-4000 KEEPER_CHAOS_MIN_KILLS=40 \
	  KEEPER_CHAOS_API_FAULTS=20 KEEPER_CHAOS_BACKEND_FAULTS=15 \
	  e2e/run-e2e.sh kills_and_faults --nocapture

## bench: keeper beside the sequential floor of the same backend work, in release mode on a private
## stack (.keeper-dev/bench): buckets, tenants, databases, memory and start, drains, and at 200 ms
## per backend call (latency). Prints the table and writes bench/results.md (not part of `make
## test`; one section: e2e/run-bench.sh --only latency)
bench: deps
	e2e/run-bench.sh --out bench/results.md

## bench-smoke: the benchmark at small sizes (a few minutes): checks that it runs, judges nothing
bench-smoke: deps
	e2e/run-bench.sh --smoke

## chart: lint and render the Helm chart, check that its values schema refuses wrong values, assert
## what four value sets render (check-render.sh), and check its alert rules (promtool check/test rules), dashboard and ServiceMonitor (helm is fetched
## once into ~/.cache/keeper; promtool comes with Debian's prometheus, installed by deps), and run
## the Argo CD health check (charts/keeper/health/) on its samples under Lua 5.1 (check-health.py;
## lupa, from PyPI, is installed by deps into keeper's venv), and check the documentation's links:
## relative links and anchors of README.md, CHANGELOG.md and docs/, and that every alert's
## runbook_url names a heading, and that every repository path a tracked file names exists
## (check-docs.py)
chart: deps
	HELM=$$(e2e/stack.sh helm-path) && $$HELM lint --strict charts/keeper \
	  && $$HELM lint --strict charts/keeper -f charts/keeper/ci/monitoring-values.yaml \
	  && $$HELM template keeper charts/keeper -n keeper-system -f charts/keeper/ci/demo-values.yaml >/dev/null \
	  && charts/keeper/ci/check-schema.sh $$HELM \
	  && charts/keeper/ci/check-render.sh $$HELM \
	  && charts/keeper/ci/check-monitoring.sh $$HELM \
	  && "$$(e2e/stack.sh python-path)" charts/keeper/ci/check-health.py \
	  && python3 charts/keeper/ci/check-docs.py

## image: the OCI image (release build + buildah, no daemon, no registry) as an OCI archive at
## $(CARGO_TARGET_DIR)/image/keeper.oci.tar (the last line printed)
image:
	e2e/image.sh build

## image-test: build the image, then run keeper from its own root filesystem and check its user,
## entrypoint, labels and size
image-test: image
	e2e/image.sh test

## test: everything CI runs
test: fmt-check clippy doc chart unit image-test e2e

## deps: install what the local stack needs (moto in a Python venv, Debian's prometheus, curl, openssl)
## and build its Kubernetes control plane from Go modules once (see kube)
deps:
	e2e/stack.sh deps

## kube: build etcd, kube-apiserver, kube-controller-manager and kubectl of the pinned release
## (KEEPER_K8S, default the newest in e2e/kube) into ~/.cache/keeper/k8s/<version>/ and print where;
## 6-10 minutes and ~900 MB of Go modules the first time, seconds after that
kube:
	e2e/kube/build.sh bin-dir $(KEEPER_K8S)

## deps-moto: install only moto (in a Python venv): what `make unit` needs
deps-moto:
	e2e/stack.sh deps-moto

dev-up:
	e2e/stack.sh up

dev-down:
	e2e/stack.sh down

## demo: the local stack, keeper, and the samples, Ready
demo:
	e2e/stack.sh demo
