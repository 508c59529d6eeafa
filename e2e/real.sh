#!/usr/bin/env bash
# make e2e-real: every scenario of the e2e suite, in cluster mode
# (E2E_KUBECONFIG), against a real Kubernetes control plane on this machine:
# kube-apiserver, etcd, kube-controller-manager (its default controllers but
# its service-cidr-controller, see e2e/src/real.rs KCM_CONTROLLERS) and
# kube-scheduler v1.36.3 (hack/real-k8s), two nodes run by the process
# kubelet (`kube-sim kubelet`, which runs the image protection-manager as the
# locally built binary), kube-sim's hostPath provisioner for the default
# StorageClass, and cloud-sim. The `real-cluster` program holds them up while
# `make e2e` runs; nothing outlives this script.
set -euo pipefail

CARGO="${CARGO:-cargo}"
MAKE="${MAKE:-make}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/protection-e2e-real.XXXXXX")"

"$ROOT/hack/real-k8s/build.sh"
"$CARGO" build --manifest-path "$ROOT/Cargo.toml" -p kube-sim -p cloud-sim -p protection-manager -p protection-e2e --bins
TARGET_DIR="$("$CARGO" metadata --manifest-path "$ROOT/Cargo.toml" --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
BIN="$TARGET_DIR/debug"

PID=""
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

"$BIN/real-cluster" --env-file "$WORK/env" >"$WORK/real-cluster.log" 2>&1 &
PID=$!
for _ in $(seq 600); do
  [ -s "$WORK/env" ] && break
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.5
done
if [ ! -s "$WORK/env" ]; then
  echo "make e2e-real: the real cluster did not start; its output:" >&2
  cat "$WORK/real-cluster.log" >&2
  exit 1
fi
cat "$WORK/real-cluster.log"
# shellcheck disable=SC1091
source "$WORK/env"
echo "cluster: real control plane ($E2E_KUBECONFIG), cloud-sim $E2E_CLOUD_SIM_URL, image $E2E_IMAGE"
"$MAKE" -C "$ROOT" e2e
