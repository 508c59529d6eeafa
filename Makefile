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

.PHONY: all build test lint fmt fmt-check clippy tools clean

all: build

tools: $(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl

$(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl: hack/install-tools.sh
	./hack/install-tools.sh $(TOOLS_DIR)
	@touch $(TOOLS_BIN)/helm4 $(TOOLS_BIN)/helm3 $(TOOLS_BIN)/kubectl

build:
	$(CARGO) build --workspace --all-targets

test: tools fmt-check
	$(CARGO) test --workspace --all-targets --no-fail-fast
	$(CARGO) test --workspace --doc

lint: fmt-check clippy

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
	rm -rf $(TOOLS_DIR)
