# The verbs a person types. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
CARGO ?= cargo
TOOLS_DIR := $(CURDIR)/.tools
TOOLS_BIN := $(TOOLS_DIR)/bin

# Real clients the tests drive; tests read these variables (and fall back to
# .tools/bin when run outside make).
export HELM3 := $(TOOLS_BIN)/helm3
export HELM4 := $(TOOLS_BIN)/helm4
export KUBECTL_PINNED := $(TOOLS_BIN)/kubectl
export KUBECTL_SYSTEM := /usr/bin/kubectl

.PHONY: all build test lint fmt fmt-check clippy tools clean fuzz

all: build

tools: $(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl prometheus-tools

# promtool and prometheus (Debian's package) for the alert tests; a no-op once
# both are on PATH.
.PHONY: prometheus-tools
prometheus-tools:
	@./hack/install-prometheus.sh

$(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl: hack/install-tools.sh
	./hack/install-tools.sh $(TOOLS_DIR)
	@touch $(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl

build:
	$(CARGO) build --workspace --all-targets

test: tools fmt-check go-check real-k8s
	$(CARGO) test --workspace --all-targets --no-fail-fast
	$(CARGO) test --workspace --doc

lint: fmt-check clippy go-check

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf $(TOOLS_DIR)

# --- The real control plane (hack/real-k8s, crates/control-plane) ------------
# kube-apiserver, kube-controller-manager and kube-scheduler v1.36.3 and etcd
# 3.6.8, built with Go from the k8s.io/kubernetes module into
# $${XDG_CACHE_HOME:-$$HOME/.cache}/protection-manager/k8s-v1.36.3/bin (outside
# the clone; a second run builds nothing). Tests build them on first use too.
.PHONY: real-k8s go-check
real-k8s:
	./hack/real-k8s/build.sh

# gofmt and go vet for the Go module of the test bed.
go-check:
	@out="$$(gofmt -l hack/real-k8s)"; if [ -n "$$out" ]; then echo "gofmt: not formatted: $$out" >&2; exit 1; fi
	cd hack/real-k8s && GOTOOLCHAIN=local go vet ./...

# --- Property tests at length ---------------------------------------------------
# `make test` runs every property test with proptest's default 256 cases;
# `make fuzz` runs the parser properties with FUZZ_CASES cases each (the
# parsers a user or the API can feed: flags, durations, versions, names,
# URL redaction, the load-balancer provider's replies, kube-sim's selectors,
# patches and integer decoding, cloud-sim's request bodies, CEL expressions: the cost meter
# changes no answer, the static estimate bounds what it charges, in work
# and memory, and a budget stops exactly the evaluations that exceed it;
# every duration flag holds only what its consumer holds; a namespace, object
# or explain target name a flag accepts is one plain path segment). A failure prints
# the minimal input and proptest keeps it under proptest-regressions/.
FUZZ_CASES ?= 20000

.PHONY: fuzz
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p protection-core --lib -- duration:: redact:: controllers::tests::properties
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p protection-host --lib -- names:: ratelimit::
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p protection-core --test parser_properties
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p lb-cleanup --lib -- provider::http::reply_properties
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p kube-sim --test fuzz
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p cloud-sim --test fuzz
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p kube-cel --test fuzz
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test -p protection-manager --bin protection-manager -- explain::tests::a_checked_target_name cli::tests::properties

# --- Container image and Helm chart -------------------------------------------
# `make image` needs docker or podman (the development machines have neither:
# the image is built where one exists, e.g. CI with a container engine).
IMAGE ?= ghcr.io/protection-manager/protection-manager
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
CHART := charts/protection-manager

.PHONY: image chart-lint chart-table

image:
	@test -n "$(CONTAINER_ENGINE)" || { echo "make image: no container engine (docker or podman) on this machine; build the image where one exists" >&2; exit 1; }
	DOCKER_BUILDKIT=1 $(CONTAINER_ENGINE) build --build-arg VERSION=$(IMAGE_VERSION) -t $(IMAGE):$(IMAGE_VERSION) .

chart-lint: tools
	$(HELM3) lint --strict $(CHART)
	$(HELM4) lint --strict $(CHART)

# The chart's controller table (names, aliases, releases, RBAC rules) is
# generated from the controllers' descriptors; `make test` fails while stale.
chart-table:
	UPDATE_CHART_TABLE=1 $(CARGO) test -p protection-manager --bin protection-manager chart_table_is_generated

# kube-sim throughput and watch fan-out (release build; prints figures).
.PHONY: bench-sim
bench-sim:
	$(CARGO) run --release -p kube-sim --bin kube-sim-bench

# pv-protection and pvc-protection at scale: 10,000 PVs, 10,000 PVCs and
# 20,000 pods back-filled by the release manager binary against kube-sim,
# then unused PVCs deleted at 100/s, then ~1,000 used PVCs released by deleting
# their pods; prints writes per object (finalizer vs Event), peak RSS and the
# manager's CPU seconds (release build), each issue-11 goal beside its figure;
# then a 2,000 + 2,000 + 2,000 run for the small-cluster memory goal.
.PHONY: bench bench-cost-model bench-pv bench-lb bench-vac bench-rules
# The manager the benchmarks run: the shipped build (`--profile dist`, see
# Cargo.toml), unless PROTECTION_MANAGER_BIN names another.
BENCH_MANAGER = PROTECTION_MANAGER_BIN=$${PROTECTION_MANAGER_BIN:-$${CARGO_TARGET_DIR:-$(CURDIR)/target}/dist/protection-manager}
bench: bench-cost-model bench-pv bench-lb bench-vac bench-rules

# The cost model's own figures beside the real API server's it was
# calibrated to (kube-sim --cost-model=real-1.36; see crates/kube-sim/README.md).
bench-cost-model:
	$(CARGO) run --release -p kube-sim --bin kube-sim-bench -- --calibrate real-1.36

# vac-protection: back-fill of 1,000 classes used by 10,000 PVCs, and their
# release when the PVCs go (in-process kube-sim; prints figures).
bench-vac:
	$(CARGO) run --release -p vac-protection --example bench_vac -- $(BENCH_ARGS)

# One ProtectionRule (the chart's secrets-used-by-pods) over 10,000 Secrets
# and 20,000 pods: back-fill, release after the last pod goes, RSS, requests,
# the manager's CPU seconds (release manager binary against kube-sim).
bench-rules:
	$(CARGO) build --profile dist -p protection-manager --bin protection-manager
	$(BENCH_MANAGER) $(CARGO) run --release -p protection-rules --example bench_rules -- $(BENCH_ARGS)

bench-pv:
	$(CARGO) build --profile dist -p protection-manager --bin protection-manager
	$(BENCH_MANAGER) $(CARGO) run --release -p pv-protection --example bench_pv -- $(BENCH_ARGS)
	$(BENCH_MANAGER) $(CARGO) run --release -p pv-protection --example bench_pv -- --cost-model real-1.36 $(BENCH_ARGS)
	@echo "== the peak-RSS goal at 2,000 PVs + 2,000 PVCs + 2,000 pods =="
	$(BENCH_MANAGER) $(CARGO) run --release -p pv-protection --example bench_pv -- --scale 0.2 --pods 2000

# service-lb-cleanup at scale: 2,000 LoadBalancer Services provisioned at
# release 0.1, back-filled at 0.2 by the release manager binary against
# kube-sim and cloud-sim, then deleted at 200/s (release build; prints figures).
bench-lb:
	$(CARGO) build --profile dist -p protection-manager --bin protection-manager
	$(BENCH_MANAGER) $(CARGO) run --release -p lb-cleanup --example bench_lb -- $(BENCH_ARGS)
	$(BENCH_MANAGER) $(CARGO) run --release -p lb-cleanup --example bench_lb -- --cost-model real-1.36 $(BENCH_ARGS)

# --- Ours beside upstream on the real control plane (never in `make test`) -----
# `make bench-real`: on one real kube-apiserver v1.36.3 per benchmark (release
# builds; prints every figure as a ratio with its issue-23 goal):
# - storage: KCM's pv/pvc-protection (defaults, QPS 1000) vs ours in the
#   upstream profile (defaults, the large back-fill setting) over 2,000 and
#   10,000 PVs + PVCs + scheduled pods, and the server's own finalizer-PATCH
#   ceiling (BENCH_REAL_PV_ARGS, e.g. `--sizes 2000 --contenders kcm,ours`;
#   `--sizes 2000 --contenders ours-large --large-concurrency 32,32,32` judges
#   the ceiling fraction over three runs' median instead of one);
# - load balancers: upstream's service controller (hack/real-k8s
#   cmd/service-controller, 16 workers, fake cloud) vs ours with cloud-sim over
#   2,000 Services (BENCH_REAL_LB_ARGS, e.g. `--services 500`);
# - VolumeAttributesClasses: KCM's controller vs ours (BENCH_REAL_VAC_ARGS).
# The storage run at 10,000 takes about half an hour (KCM at its default QPS
# alone back-fills 20,000 finalizers in ~8 minutes).
BENCH_REAL_PV_ARGS ?=
BENCH_REAL_LB_ARGS ?=
BENCH_REAL_VAC_ARGS ?=

.PHONY: bench-real
bench-real: real-k8s
	./hack/real-k8s/build.sh service-controller
	$(CARGO) build --profile dist -p protection-manager --bin protection-manager
	$(BENCH_MANAGER) $(CARGO) run --release -p pv-protection --example bench_real_pv -- $(BENCH_REAL_PV_ARGS)
	$(BENCH_MANAGER) $(CARGO) run --release -p lb-cleanup --example bench_real_lb -- $(BENCH_REAL_LB_ARGS)
	$(BENCH_MANAGER) $(CARGO) run --release -p vac-protection --example bench_real_vac -- $(BENCH_REAL_VAC_ARGS)

# --- End-to-end suite (e2e/, see e2e/README.md) --------------------------------
# `make e2e`: the lifecycle, upgrade/downgrade and short chaos scenarios, each
# printing what it verified. On kube-sim (with its cluster emulation) and
# cloud-sim by default, as in `make test`; against a real cluster when
# E2E_KUBECONFIG is set (with E2E_IMAGE and E2E_CLOUD_SIM_URL).
# `make e2e-kind`: creates a kind cluster, loads the image, starts cloud-sim on
# the host and runs `make e2e` against it (needs docker and kind).
# `make chaos`: the long chaos run (CHAOS_DURATION, default 10m; CHAOS_SEED;
# CHAOS_ARGS e.g. --profile upstream); prints the invariant counts.
CHAOS_DURATION ?= 10m
CHAOS_SEED ?=
CHAOS_ARGS ?=

.PHONY: e2e e2e-standalone e2e-kind e2e-real chaos chaos-real

e2e: tools
	$(CARGO) build -p protection-manager --bin protection-manager
	$(CARGO) test -p protection-e2e --no-fail-fast -- --nocapture

# The cluster-mode path (E2E_KUBECONFIG) against the kube-sim and cloud-sim
# binaries run as a separate "cluster" (no container engine needed).
e2e-standalone: tools
	CARGO=$(CARGO) MAKE=$(MAKE) ./e2e/standalone.sh

e2e-kind: tools
	IMAGE=$(IMAGE) IMAGE_VERSION=$(IMAGE_VERSION) CARGO=$(CARGO) MAKE=$(MAKE) ./e2e/kind.sh

# The whole suite in cluster mode on the real control plane (kube-apiserver,
# etcd, KCM, kube-scheduler v1.36.3) with two process-kubelet nodes, kube-sim's
# hostPath provisioner and cloud-sim, all on this machine (e2e/real.sh).
e2e-real: tools
	CARGO=$(CARGO) MAKE=$(MAKE) ./e2e/real.sh

chaos: tools
	$(CARGO) build -p protection-manager --bin protection-manager
	$(CARGO) run -p protection-e2e --bin chaos -- --duration $(CHAOS_DURATION) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(CHAOS_ARGS)

# The same churn and invariants on the real control plane, with its own
# faults instead of kube-sim's: SIGKILL of the leader's process and of the
# process kubelets (restarted, adopting their containers), kube-apiserver and
# etcd restarts (data kept), apiserver SIGSTOP/SIGCONT stalls.
chaos-real: tools real-k8s
	$(CARGO) build -p protection-manager -p kube-sim -p cloud-sim --bins
	$(CARGO) run -p protection-e2e --bin chaos -- --real --duration $(CHAOS_DURATION) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(CHAOS_ARGS)

# The guided tour (README's first command): builds, starts kube-sim + cloud-sim,
# installs the chart with helm and narrates with kubectl; cleans up after itself.
.PHONY: demo
demo: tools
	./hack/demo.sh
