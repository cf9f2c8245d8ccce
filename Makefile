# applyset-operator — see README.md. Every target works on a fresh machine that reaches the
# package registries: missing tools are installed by `make deps`.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
LOCAL := $(CURDIR)/.local
TESTENV := $(CURDIR)/target/debug/testenv
KUBECTL := $(LOCAL)/bin/kubectl
# Tests of one test binary run TEST_THREADS at a time (cargo test's --test-threads), sharing
# that binary's control plane, each in its own namespace; cargo runs the binaries one after
# another. Four fit 2 cores.
TEST_THREADS ?= 4
# The model-based walk of `make soak` (tests/model): its seed (a number, or random) and length.
SEED ?= random
STEPS ?= 1000
# Cases per property of `make fuzz` (make test runs 64).
CASES ?= 100000
# Builds of each kind measured by `make bench-kustomize`.
KZ_BENCH_N ?= 1000
# ApplySets of the Flux shape, and runs of it, in `make bench-scale`.
N ?= 10000
RUNS ?= 1
# The commit the plugin's --version names (read at build time; `unknown` outside a clone).
export APPLYSET_COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

# `deps` needs nothing but bash and apt-get (as root) or sudo: no coreutils (`id`, `env`),
# which a minimal image may lack.
# Chromium, its WebDriver (chromium-driver: /usr/bin/chromedriver, the same version by its
# Depends) and a font are for the ui's browser test (tests/ui_browser.rs), without their
# recommends.
# In CI (CI set) the apt-get line of `deps` always runs (a no-op when everything is
# installed), so that a broken install line fails CI even on a machine that has the packages.
APT_ALWAYS ?= $(CI)

.PHONY: deps
deps: ## install what building and testing need (apt packages; Go and Rust are on the machine)
	@missing=""; for t in openssl curl setsid git ssh ssh-keygen lua5.1 python3 chromium chromedriver; do command -v $$t >/dev/null || missing=1; done; \
	[ -x /usr/sbin/sshd ] || missing=1; \
	[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing=1; \
	[ -z "$(APT_ALWAYS)" ] || missing=1; \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  if [ "$$EUID" = 0 ]; then as_root=(); else as_root=(sudo DEBIAN_FRONTEND=noninteractive); fi; \
	  "$${as_root[@]}" apt-get update -qq && "$${as_root[@]}" apt-get install -y -qq openssl curl util-linux git openssh-client openssh-server lua5.1 python3 >/dev/null \
	    && "$${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null; \
	fi
	@command -v go >/dev/null || { echo "Go 1.26 is required (https://go.dev/dl)"; exit 1; }
	@command -v $(CARGO) >/dev/null || { echo "Rust (cargo) is required (rustup)"; exit 1; }

.PHONY: kube-binaries
kube-binaries: deps ## build (or reuse from the cache) etcd, kube-apiserver, kube-controller-manager, kubectl
	@tests/testenv/build-kube.sh >/dev/null

.PHONY: helm-binary
helm-binary: deps ## build (or reuse from the cache) helm, from the Go module helm.sh/helm/v4
	@tests/testenv/build-helm.sh >/dev/null

.PHONY: kstatus-binary
kstatus-binary: deps ## build (or reuse from the cache) the kstatus program (tests/testenv/kstatus), for tests/kstatus.rs
	@tests/testenv/build-kstatus.sh >/dev/null

.PHONY: fluxssa-binary
fluxssa-binary: deps ## build (or reuse from the cache) the fluxssa program (tests/testenv/fluxssa: fluxcd/pkg/ssa's decisions), for tests/flux_ssa.rs
	@tests/testenv/build-fluxssa.sh >/dev/null

.PHONY: flux-crds
flux-crds: deps ## fetch (or reuse from the cache) Flux's CRDs (Kustomization, GitRepository, OCIRepository, Bucket) from the controllers' Go modules, for the convert and handover tests
	@tests/testenv/fetch-flux-crds.sh >/dev/null

.PHONY: kustomize-controller-binary
kustomize-controller-binary: deps ## build (or reuse from the cache) Flux's kustomize-controller from its Go module, for the handover test
	@tests/testenv/build-kustomize-controller.sh >/dev/null

.PHONY: sops-binaries
sops-binaries: deps ## build (or reuse from the cache) sops and age-keygen, which the SOPS tests encrypt their fixtures with
	@tests/testenv/build-sops.sh >/dev/null

.PHONY: kustomize-binary
kustomize-binary: deps ## build (or reuse from the cache) kustomize, from the Go module sigs.k8s.io/kustomize/kustomize/v5
	@tests/testenv/build-kustomize.sh >/dev/null

.PHONY: krew-binary
krew-binary: deps ## build (or reuse from the cache) krew, from the Go module sigs.k8s.io/krew, for tests/krew.rs
	@tests/testenv/build-krew.sh >/dev/null

.PHONY: registry-binary
registry-binary: deps ## build (or reuse from the cache) the CNCF distribution OCI registry, for the OCI source tests
	@tests/testenv/build-registry.sh >/dev/null

.PHONY: build
build: deps ## build the operator and the test launcher
	$(CARGO) build --locked --workspace --bins

.PHONY: test
test: deps kube-binaries helm-binary kstatus-binary fluxssa-binary flux-crds kustomize-controller-binary registry-binary kustomize-binary krew-binary sops-binaries ## every test: unit, integration and end to end against a real kube-apiserver
	$(CARGO) build --locked --workspace --all-targets
	$(CARGO) build --locked --release -p applyset-operator --bin applyset-operator
	$(MAKE) -s bench-smoke APT_ALWAYS=
	APPLYSET_OPERATOR_BIN=$(CURDIR)/target/release/applyset-operator \
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) \
	APPLYSET_HELM=$$(tests/testenv/build-helm.sh)/helm \
	APPLYSET_REGISTRY=$$(tests/testenv/build-registry.sh)/registry \
	APPLYSET_KSTATUS=$$(tests/testenv/build-kstatus.sh)/kstatus \
	APPLYSET_FLUXSSA=$$(tests/testenv/build-fluxssa.sh)/fluxssa \
	APPLYSET_FLUX_CRDS=$$(tests/testenv/fetch-flux-crds.sh) \
	APPLYSET_KUSTOMIZE_CONTROLLER=$$(tests/testenv/build-kustomize-controller.sh)/kustomize-controller \
	APPLYSET_KUSTOMIZE=$$(tests/testenv/build-kustomize.sh)/kustomize \
	APPLYSET_KREW=$$(tests/testenv/build-krew.sh)/krew \
	APPLYSET_SOPS=$$(tests/testenv/build-sops.sh)/sops \
	APPLYSET_AGE_KEYGEN=$$(tests/testenv/build-sops.sh)/age-keygen \
	UI_SCREENSHOTS_DIR= \
	  $(CARGO) test --locked --workspace --no-fail-fast -- --test-threads=$(TEST_THREADS)

# The browser test writes its screenshots under target/ui-screenshots/ in `make test`; this
# target points it at docs/images/ui/ instead, to refresh the screenshots docs/ui.md shows.
.PHONY: screenshots
screenshots: deps kube-binaries ## refresh docs/images/ui/*.png: the ui's browser test (headless Chromium) with its screenshots written there
	$(CARGO) build --locked --bins
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) UI_SCREENSHOTS_DIR=$(CURDIR)/docs/images/ui \
	  $(CARGO) test --locked --test ui_browser -- --nocapture

.PHONY: fuzz
fuzz: ## the property tests of the tenant-input parsers (tests/fuzz.rs) with more cases: make fuzz CASES=<n>
	PROPTEST_CASES=$(CASES) $(CARGO) test --locked --test fuzz

.PHONY: soak
soak: deps kube-binaries ## a long model-based random walk (tests/model): make soak SEED=<n|random> STEPS=<n>
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) MODEL_SEED=$(SEED) MODEL_STEPS=$(STEPS) \
	  $(CARGO) test --locked --release --test model walk_with_seed -- --exact --nocapture

.PHONY: bench
bench: deps kube-binaries ## the benchmark (release build): operator vs kubectl vs API server ceiling, the ui's sets page with 10,000 sets; bench/results/
	$(CARGO) build --locked --release -p applyset-operator -p applyset-bench --bins
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) target/release/applyset-bench \
	  --operator target/release/applyset-operator --out bench/results --teardown-baseline $(BENCH_ARGS)

.PHONY: bench-scale
bench-scale: deps kube-binaries ## N (10000) ApplySets × 4 (Flux's objects), RUNS (1) runs taking turns with hack/ssa-ceiling, each on a fresh control plane: all Ready against the ceiling, peak RSS, requests per set, a full resync, teardown; bench/results/scale-N/
	$(CARGO) build --locked --release -p applyset-operator -p applyset-bench --bins
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) target/release/applyset-bench \
	  --operator target/release/applyset-operator --out bench/results/scale-$(N) \
	  --shapes $(N) --runs $(RUNS) --sizes "" --no-kubectl --teardown-baseline --ui 0 --no-shards-cost $(BENCH_ARGS)

.PHONY: bench-kustomize
bench-kustomize: deps kustomize-binary ## the cost of kustomize builds through the operator's build path: one, and KZ_BENCH_N (1000) at --kustomize-concurrency 2
	APPLYSET_KUSTOMIZE=$$(tests/testenv/build-kustomize.sh)/kustomize KZ_BENCH_N=$(KZ_BENCH_N) \
	  $(CARGO) test --locked --test kustomize -- --ignored kustomize_build_cost --nocapture

.PHONY: bench-smoke
bench-smoke: deps kube-binaries ## a tiny run of the benchmark (part of make test, so it cannot rot)
	$(CARGO) build --locked -q --workspace --bins
	APPLYSET_TESTENV_BIN=$$(tests/testenv/build-kube.sh) target/debug/applyset-bench \
	  --sizes 20 --shapes 10 --ui 20 --plugin target/debug/kubectl-applyset \
	  --operator target/debug/applyset-operator --out target/bench-smoke > target/bench-smoke.log \
	  || { cat target/bench-smoke.log; exit 1; }
	@grep -q '^| 20 | create' target/bench-smoke/report.md && grep -q '^| 20 sets | ' target/bench-smoke/report.md \
	  && grep -qE '^\| 10 × 4 \| median \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ × \|' target/bench-smoke/report.md \
	  && grep -qE '^\| 10 \| 1 \| [0-9]+ \| [0-9]+ \| [0-9]+ \| [0-9]+ \|$$' target/bench-smoke/report.md \
	  && grep -qE '^\| 10 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ × \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9]+ \|$$' target/bench-smoke/report.md \
	  && echo "bench-smoke: ok (report in target/bench-smoke/report.md)"

.PHONY: run
run: deps kube-binaries ## local control plane (unless KUBECONFIG is set, or CONTEXT=current|NAME) + CRDs + operator in the foreground + examples/
	@CONTEXT='$(CONTEXT)' hack/run.sh

.PHONY: cluster-up
cluster-up: deps kube-binaries ## start a local control plane in the background (.local/kubeconfig, .local/bin/kubectl)
	@$(CARGO) build --locked -q -p applyset-testenv
	@TESTENV=$(TESTENV) tests/testenv/cluster.sh up

.PHONY: cluster-down
cluster-down: ## stop the local control plane and remove its state
	@tests/testenv/cluster.sh down

.PHONY: crds
crds: ## regenerate the committed CRD YAML from the Rust types
	$(CARGO) run --locked -q -- crd > config/crd/applyset.dev.yaml
	cp config/crd/applyset.dev.yaml charts/applyset-operator/files/applyset.dev.yaml

# The house rules of clippy.toml hold for every target; the second clippy run adds functions
# of at most 80 lines (too_many_lines, pedantic) for the production code: the library's and
# the binaries' code outside #[cfg(test)]. Tests are left out: an integration test walks one
# scenario through its steps against the API server, and cutting it into helpers only to pass
# a line count would hide the order the scenario is read in.
.PHONY: lint
lint: helm-binary ## cargo fmt --check, cargo clippy -D warnings with the house rules (clippy.toml), helm lint, xtask check (generated docs current, links, file sizes, the plugin's reads)
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --workspace --lib --bins -- -D warnings -W clippy::too_many_lines
	$$(tests/testenv/build-helm.sh 2>/dev/null)/helm lint --strict charts/applyset-operator
	$(CARGO) run --locked -q -p xtask -- check

.PHONY: docs
docs: ## regenerate docs/api.md (from the CRD schema) and the chart's values table in docs/operations.md (from values.yaml)
	$(CARGO) run --locked -q -p xtask -- docs

# PREFIX: install under PREFIX/bin instead of cargo's (~/.cargo/bin); INSTALL_ARGS: more
# `cargo install` arguments (e.g. --debug for a quick build).
PREFIX ?=
INSTALL_ARGS ?=

.PHONY: install
install: ## install applyset-operator and the kubectl plugin kubectl-applyset on the PATH (cargo install; PREFIX=dir for dir/bin)
	$(CARGO) install --locked --path . --bins $(if $(PREFIX),--root $(PREFIX)) $(INSTALL_ARGS)

.PHONY: dist
dist: ## the plugin's release archive for this platform (linux-amd64 here) and its krew manifest, filled from plugins/applyset.yaml, in target/dist/
	@hack/dist.sh target/dist

.PHONY: release
release: ## the release build of the operator (the Dockerfile runs the same command)
	$(CARGO) build --release --locked --bin applyset-operator
