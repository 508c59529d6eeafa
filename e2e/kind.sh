#!/usr/bin/env bash
# make e2e-kind: runs the e2e suite against a kind cluster.
#
#   1. creates the kind cluster $KIND_CLUSTER (unless it exists);
#   2. builds the manager image (make image) and loads it into the nodes
#      (kind load docker-image), tagged as the chart's appVersion so that the
#      chart's install-time checks apply to it;
#   3. starts cloud-sim on the host, bound to the kind network's gateway
#      address, which both the pods and this machine reach;
#   4. runs `make e2e` with E2E_KUBECONFIG, E2E_IMAGE and E2E_CLOUD_SIM_URL;
#   5. stops cloud-sim (the cluster is kept: KIND_DELETE=1 deletes it).
#
# Needs docker, kind and the Rust toolchain. Cannot run on machines without a
# container engine (the project's development machines have none).
set -euo pipefail

KIND_CLUSTER="${KIND_CLUSTER:-protection-e2e}"
IMAGE="${IMAGE:-ghcr.io/protection-manager/protection-manager}"
IMAGE_VERSION="${IMAGE_VERSION:?IMAGE_VERSION (the chart appVersion) must be set}"
CLOUD_SIM_PORT="${CLOUD_SIM_PORT:-18080}"
CARGO="${CARGO:-cargo}"
MAKE="${MAKE:-make}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$ROOT/.tools/e2e-kind"

need() {
  command -v "$1" >/dev/null 2>&1 || {
    echo "make e2e-kind: $1 not found: $2" >&2
    exit 1
  }
}
need docker "install docker (kind runs its nodes as containers)"
need kind "install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"

mkdir -p "$WORK"
if ! kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
  kind create cluster --name "$KIND_CLUSTER" --wait 120s
fi
kind get kubeconfig --name "$KIND_CLUSTER" >"$WORK/kubeconfig"

E2E_IMAGE="$IMAGE:$IMAGE_VERSION"
"$MAKE" -C "$ROOT" image IMAGE="$IMAGE"
kind load docker-image "$E2E_IMAGE" --name "$KIND_CLUSTER"

# The kind network's IPv4 gateway is the host as the nodes (and pods) see it.
GATEWAY="$(docker network inspect kind -f '{{range .IPAM.Config}}{{.Gateway}} {{end}}' |
  tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+){3}$' | head -n1)"
if [ -z "$GATEWAY" ]; then
  echo "make e2e-kind: no IPv4 gateway on the docker network 'kind'" >&2
  exit 1
fi

"$CARGO" build --manifest-path "$ROOT/Cargo.toml" -p cloud-sim --bin cloud-sim
TARGET_DIR="$("$CARGO" metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
TOKEN="e2e-$(date +%s)"
"$TARGET_DIR/debug/cloud-sim" --bind "$GATEWAY" --port "$CLOUD_SIM_PORT" \
  --state-file "$WORK/cloud-sim.json" --token "$TOKEN" >"$WORK/cloud-sim.log" 2>&1 &
CLOUD_SIM_PID=$!
cleanup() {
  kill "$CLOUD_SIM_PID" 2>/dev/null || true
  if [ "${KIND_DELETE:-0}" = 1 ]; then kind delete cluster --name "$KIND_CLUSTER"; fi
}
trap cleanup EXIT
for _ in $(seq 1 50); do
  curl -fsS -H "Authorization: Bearer $TOKEN" "http://$GATEWAY:$CLOUD_SIM_PORT/v1/loadbalancers" >/dev/null 2>&1 && break
  sleep 0.2
done

E2E_KUBECONFIG="$WORK/kubeconfig" \
  E2E_IMAGE="$E2E_IMAGE" \
  E2E_CLOUD_SIM_URL="http://$GATEWAY:$CLOUD_SIM_PORT" \
  E2E_CLOUD_SIM_TOKEN="$TOKEN" \
  "$MAKE" -C "$ROOT" e2e
