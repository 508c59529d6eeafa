#!/usr/bin/env bash
# Builds the real control plane the test bed runs (see README.md here):
# kube-apiserver, kube-controller-manager and kube-scheduler v1.36.3 from the
# k8s.io/kubernetes module, and etcd v3.6.8, into a cache outside the clone:
#
#   ${XDG_CACHE_HOME:-$HOME/.cache}/protection-manager/k8s-v1.36.3/bin/
#
# A second run builds nothing: each binary is kept with the key of what built
# it (this module's go.mod/go.sum/sources, the flags, the Go version); a
# binary whose key differs, or that does not answer its version, is rebuilt.
# Correctness never depends on the cache: a binary is moved into place only
# after it built and answered its version.
#
# Usage: build.sh [--print-dir] [BINARY...]   (default: the four binaries;
#        `service-controller` is the upstream service controller anchor that
#        `make bench-real` measures against)
set -euo pipefail

K8S_VERSION=v1.36.3
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/protection-manager"
CACHE_DIR="${REAL_K8S_CACHE_DIR:-$CACHE_ROOT/k8s-$K8S_VERSION}"
BIN_DIR="$CACHE_DIR/bin"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$BIN_DIR"
  exit 0
fi

# Go 1.27 turns encoding/json v2 on by default, which breaks kube-openapi
# 1.36's /openapi/v2; the machines' Go is 1.26. Never let a go.mod toolchain
# line fetch another one behind our back.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:--mod=readonly}"
# Static binaries, as Kubernetes' own release builds them.
export CGO_ENABLED=0
go_version="$(go env GOVERSION)"
case "$go_version" in
  go1.26*) ;;
  go1.27* | go1.28*)
    echo "real-k8s: $go_version turns encoding/json v2 on; building with GOEXPERIMENT=nojsonv2" >&2
    export GOEXPERIMENT="${GOEXPERIMENT:+$GOEXPERIMENT,}nojsonv2"
    ;;
  *)
    echo "real-k8s: Kubernetes $K8S_VERSION needs Go 1.26 (go.mod says go 1.26.0); found $go_version" >&2
    exit 1
    ;;
esac

pkg="k8s.io/component-base/version"
ldflags="-s -w"
ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=36"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
# client-go's own copy of the version (what `kubectl version` shows as the
# server's client library) follows the same stamp.
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=36"

# The key: everything that decides what the binaries are.
key="$(
  cd "$HERE"
  {
    echo "$go_version ${GOEXPERIMENT:-} $ldflags"
    cat go.mod go.sum
    find cmd -name '*.go' -print0 | sort -z | xargs -0 cat
  } | sha256sum | cut -c1-16
)"

declare -A packages=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [etcd]=./cmd/etcd
  [service-controller]=./cmd/service-controller
)
# What each binary answers to --version, to tell a whole binary from a torn one.
declare -A version_of=(
  [kube-apiserver]="Kubernetes $K8S_VERSION"
  [kube-controller-manager]="Kubernetes $K8S_VERSION"
  [kube-scheduler]="Kubernetes $K8S_VERSION"
  [etcd]="etcd Version: 3.6.8"
  [service-controller]="$K8S_VERSION"
)

binaries=("$@")
if [[ ${#binaries[@]} -eq 0 ]]; then
  binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler)
fi
for b in "${binaries[@]}"; do
  if [[ -z "${packages[$b]:-}" ]]; then
    echo "real-k8s: unknown binary '$b' (known: ${!packages[*]})" >&2
    exit 2
  fi
done

mkdir -p "$BIN_DIR"
exec 9>"$CACHE_DIR/.lock"
# Two test binaries (or a test and `make real-k8s`) may ask at once: one builds.
flock 9

answers_version() {
  local bin="$1" want="$2" out
  # Read the whole answer first: `grep -q` in a pipe would stop reading
  # early, and pipefail would call the binary's SIGPIPE a failure.
  out="$("$bin" --version 2>&1)" || return 1
  [[ "$out" == *"$want"* ]]
}

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

total_start=$SECONDS
built=0
for b in "${binaries[@]}"; do
  out="$BIN_DIR/$b"
  if [[ -x "$out" && "$(cat "$out.key" 2>/dev/null)" == "$key" ]] && answers_version "$out" "${version_of[$b]}"; then
    echo "real-k8s: $b $K8S_VERSION cached ($out)"
    continue
  fi
  start=$SECONDS
  echo "real-k8s: building $b from ${packages[$b]} ($go_version) ..."
  tmp="$(mktemp "$BIN_DIR/.$b.XXXXXX")"
  if ! (cd "$HERE" && go build -trimpath -ldflags "$ldflags" -o "$tmp" "${packages[$b]}"); then
    rm -f "$tmp"
    echo "real-k8s: building $b failed" >&2
    exit 1
  fi
  if ! answers_version "$tmp" "${version_of[$b]}"; then
    echo "real-k8s: the new $b does not answer '${version_of[$b]}' to --version:" >&2
    "$tmp" --version >&2 || true
    rm -f "$tmp"
    exit 1
  fi
  mv -f "$tmp" "$out"
  echo "$key" >"$out.key"
  built=$((built + 1))
  echo "real-k8s: $b built in $(fmt_secs $((SECONDS - start))) -> $out"
done
echo "real-k8s: ${#binaries[@]} binaries ready in $BIN_DIR ($built built, $(fmt_secs $((SECONDS - total_start))) in all)"
