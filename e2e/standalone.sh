#!/usr/bin/env bash
# make e2e-standalone: the cluster-mode path of the e2e suite (E2E_KUBECONFIG)
# against a cluster the harness did not start and knows nothing about: the
# kube-sim *binary* with its cluster emulation (two nodes, a kubelet that runs
# the image `protection-manager` as the locally built binary) and the cloud-sim
# binary, both as separate processes. It checks what `make e2e-kind` checks on
# a machine without a container engine, minus image pulls and real networking.
set -euo pipefail

CARGO="${CARGO:-cargo}"
MAKE="${MAKE:-make}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/protection-e2e-standalone.XXXXXX")"

"$CARGO" build --manifest-path "$ROOT/Cargo.toml" -p kube-sim -p cloud-sim -p protection-manager --bins
TARGET_DIR="$("$CARGO" metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
BIN="$TARGET_DIR/debug"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

"$BIN/kube-sim" --port 0 --kubeconfig-out "$WORK/kubeconfig" --emulate all --nodes node-1,node-2 \
  --kubelet-dir "$WORK/kubelet" --run-image "protection-manager=$BIN/protection-manager" \
  >"$WORK/kube-sim.log" 2>&1 &
PIDS+=($!)
TOKEN="standalone-$$"
"$BIN/cloud-sim" --port 0 --state-file "$WORK/cloud-sim.json" --token "$TOKEN" >"$WORK/cloud-sim.out" 2>"$WORK/cloud-sim.log" &
PIDS+=($!)

for _ in $(seq 100); do
  [ -s "$WORK/kubeconfig" ] && grep -q listening "$WORK/cloud-sim.out" && break
  sleep 0.1
done
CLOUD="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$WORK/cloud-sim.out")"
[ -s "$WORK/kubeconfig" ] || { echo "make e2e-standalone: kube-sim did not start; its log:" >&2; cat "$WORK/kube-sim.log" >&2; exit 1; }
[ -n "$CLOUD" ] || { echo "make e2e-standalone: cloud-sim did not start; its log:" >&2; cat "$WORK/cloud-sim.log" >&2; exit 1; }

VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/protection-manager/Chart.yaml")"
echo "cluster: kube-sim ($WORK/kubeconfig), cloud-sim $CLOUD, image protection-manager:$VERSION"
E2E_KUBECONFIG="$WORK/kubeconfig" E2E_IMAGE="protection-manager:$VERSION" \
  E2E_CLOUD_SIM_URL="$CLOUD" E2E_CLOUD_SIM_TOKEN="$TOKEN" \
  "$MAKE" -C "$ROOT" e2e
