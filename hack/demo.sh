#!/usr/bin/env bash
# make demo: a guided tour of protection-manager on an embedded cluster.
#
# Starts kube-sim (the project's Kubernetes API emulator, with its emulated
# scheduler, PV binder, Deployment/Job controllers and a kubelet that runs the
# manager image as the locally built binary) and cloud-sim (an emulated cloud
# load-balancer API), installs the Helm chart with real helm, and narrates with
# real kubectl:
#   1. a feature gate flipped by `helm upgrade` (finalizers back-filled),
#   2. a PVC held by the pod that uses it, explained, then released,
#   3. a LoadBalancer Service whose load balancer is deleted before it goes,
#   4. a Service stuck Terminating because the cloud fails, and `explain` on it.
# Everything it starts is stopped and removed on exit, success or not.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
BIN="$TARGET/debug"
TOOLS="$ROOT/.tools/bin"
KUBECTL="${KUBECTL:-$TOOLS/kubectl}"
HELM="${HELM:-$TOOLS/helm4}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/protection-manager-demo.XXXXXX")"
NS=demo
PM_NS=pm-system
PIDS=()

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
say() { echo; bold "==> $*"; }
note() { printf '    %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
die() { echo "demo: $*" >&2; exit 1; }

cleanup() {
  local code=$?
  set +e
  if [ -n "${KUBECONFIG:-}" ] && [ -f "${KUBECONFIG:-}" ]; then
    "$HELM" uninstall pm -n "$PM_NS" --wait --timeout 60s >/dev/null 2>&1
  fi
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  if [ "$code" -ne 0 ]; then
    echo "demo failed (exit $code); logs:" >&2
    tail -n 30 "$WORK"/*.log >&2 2>/dev/null
  fi
  rm -rf "$WORK"
  exit "$code"
}
trap cleanup EXIT INT TERM

# wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds.
wait_for() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "timed out after ${secs}s waiting until $what"
    sleep 0.5
  done
}

gone() { ! "$KUBECTL" get "$@" >/dev/null 2>&1; }
has_finalizer() { # kind name finalizer
  "$KUBECTL" get "$1" "$2" -n "$NS" -o jsonpath='{.metadata.finalizers}' | grep -q "$3"
}
cloud() { # method path [body]: call cloud-sim with the token (python3: no curl needed)
  python3 - "$1" "$CLOUD$2" "$(cat "$WORK/token")" "${3:-}" <<'PY'
import sys, urllib.request
method, url, token, body = sys.argv[1:5]
req = urllib.request.Request(url, method=method, data=body.encode() if body else None,
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    sys.stdout.write(r.read().decode())
PY
}
lb_count() { cloud GET /v1/loadbalancers | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))'; }

say "Building protection-manager, kube-sim and cloud-sim"
(cd "$ROOT" && cargo build --quiet -p protection-manager -p kube-sim -p cloud-sim)
[ -x "$KUBECTL" ] && [ -x "$HELM" ] || (cd "$ROOT" && make --no-print-directory tools >/dev/null)

say "Starting kube-sim (API server + emulated scheduler, PV binder, controllers and kubelet)"
"$BIN/kube-sim" --port 0 --kubeconfig-out "$WORK/kubeconfig" --emulate all \
  --run-image "protection-manager=$BIN/protection-manager" --kubelet-dir "$WORK/kubelet" \
  >"$WORK/kube-sim.log" 2>&1 &
PIDS+=($!)
wait_for 60 "kube-sim writes its kubeconfig" test -s "$WORK/kubeconfig"
export KUBECONFIG="$WORK/kubeconfig"
wait_for 60 "kube-sim answers" "$KUBECTL" get --raw /version
run "$KUBECTL" get nodes

say "Starting cloud-sim (the cloud's load-balancer API)"
echo "demo-token-$RANDOM$RANDOM" >"$WORK/token"
"$BIN/cloud-sim" --port 0 --state-file "$WORK/cloud.json" --token-file "$WORK/token" --ip-range 203.0.113.10-203.0.113.50 \
  >"$WORK/cloud-sim.out" 2>"$WORK/cloud-sim.log" &
PIDS+=($!)
wait_for 30 "cloud-sim prints its address" grep -q 'listening on' "$WORK/cloud-sim.out"
CLOUD="$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$WORK/cloud-sim.out" | head -n1)"
note "cloud-sim at $CLOUD"

say "Installing the chart at release 0.2 with StorageObjectInUseProtection turned off"
run "$KUBECTL" create namespace "$PM_NS"
run "$KUBECTL" -n "$PM_NS" create secret generic lb-token --from-file=token="$WORK/token"
run "$HELM" install pm "$ROOT/charts/protection-manager" -n "$PM_NS" --wait --timeout 120s \
  --set emulatedVersion=0.2 \
  --set leaderElection.enabled=true \
  --set featureGates.StorageObjectInUseProtection=false \
  --set loadBalancer.provider.endpoint="$CLOUD" \
  --set loadBalancer.provider.tokenSecret.name=lb-token
run "$KUBECTL" -n "$PM_NS" get deploy,pods
run "$KUBECTL" create namespace "$NS"

say "1. A feature gate flipped by helm upgrade"
note "With the add-gate off, a new claim gets no finalizer (removal would still work):"
cat <<EOF | run "$KUBECTL" apply -n "$NS" -f -
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
EOF
sleep 3
run "$KUBECTL" get pvc data -n "$NS" -o jsonpath='{.metadata.name}: finalizers={.metadata.finalizers}{"\n"}'
has_finalizer pvc data pvc-protection && die "the claim got a finalizer with the gate off"
note "Now turn the gate on; the manager is rolled out with the new flag and back-fills:"
run "$HELM" upgrade pm "$ROOT/charts/protection-manager" -n "$PM_NS" --reuse-values --wait --timeout 120s \
  --set featureGates.StorageObjectInUseProtection=true
run "$KUBECTL" -n "$PM_NS" get deploy pm-protection-manager -o jsonpath='{.spec.template.spec.containers[0].args}{"\n"}'
wait_for 60 "the claim is back-filled" has_finalizer pvc data pvc-protection
run "$KUBECTL" get pvc data -n "$NS" -o jsonpath='{.metadata.name}: finalizers={.metadata.finalizers}{"\n"}'

say "2. A PVC held by the pod that uses it"
cat <<EOF | run "$KUBECTL" apply -n "$NS" -f -
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: web, image: nginx}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
EOF
wait_for 60 "the pod runs" sh -c "'$KUBECTL' get pod web -n $NS -o jsonpath='{.status.phase}' | grep -q Running"
wait_for 60 "the claim is bound" sh -c "'$KUBECTL' get pvc data -n $NS -o jsonpath='{.status.phase}' | grep -q Bound"
run "$KUBECTL" get pod web -n "$NS" -o wide
run "$KUBECTL" get pvc data -n "$NS"
run "$KUBECTL" delete pvc data -n "$NS" --wait=false
sleep 1
run "$KUBECTL" get pvc data -n "$NS"
note "The claim is Terminating, not gone: a scheduled pod still uses it. Why?"
run "$BIN/protection-manager" explain pvc/data -n "$NS"
run "$KUBECTL" delete pod web -n "$NS" --wait=true
wait_for 60 "the claim is gone" gone pvc data -n "$NS"
note "The pod is gone, so the claim went too:"
run "$KUBECTL" get pvc -n "$NS"

say "3. A LoadBalancer Service whose load balancer is cleaned up before it goes"
cat <<EOF | run "$KUBECTL" apply -n "$NS" -f -
apiVersion: v1
kind: Service
metadata: {name: shop}
spec:
  type: LoadBalancer
  loadBalancerClass: protection-manager.io/load-balancer
  selector: {app: shop}
  ports: [{port: 80, targetPort: 8080}]
EOF
wait_for 60 "the Service gets an ingress IP" sh -c "'$KUBECTL' get svc shop -n $NS -o jsonpath='{.status.loadBalancer.ingress[0].ip}' | grep -q ."
run "$KUBECTL" get svc shop -n "$NS"
run "$KUBECTL" get svc shop -n "$NS" -o jsonpath='finalizers={.metadata.finalizers}{"\n"}'
note "cloud-sim holds $(lb_count) load balancer(s)."
run "$KUBECTL" delete svc shop -n "$NS" --wait=true
note "cloud-sim holds $(lb_count) load balancer(s): deleted before the Service went."
[ "$(lb_count)" = 0 ] || die "a load balancer was left behind"

say "4. A Service stuck Terminating, and why"
cat <<EOF | run "$KUBECTL" apply -n "$NS" -f -
apiVersion: v1
kind: Service
metadata: {name: api}
spec:
  type: LoadBalancer
  loadBalancerClass: protection-manager.io/load-balancer
  selector: {app: api}
  ports: [{port: 443, targetPort: 8443}]
EOF
wait_for 60 "the Service gets an ingress IP" sh -c "'$KUBECTL' get svc api -n $NS -o jsonpath='{.status.loadBalancer.ingress[0].ip}' | grep -q ."
note "The cloud starts failing every load-balancer deletion (503):"
run cloud PUT /_sim/faults/delete '{"error": {"rate": 1.0, "status": 503, "message": "load balancer backend unavailable"}}' >/dev/null
run "$KUBECTL" delete svc api -n "$NS" --wait=false
wait_for 60 "a second failed attempt is reported" sh -c "'$BIN/protection-manager' explain svc/api -n $NS | grep -Eq 'failing since .*[2-9] attempt'"
run "$KUBECTL" get svc api -n "$NS"
run "$BIN/protection-manager" explain svc/api -n "$NS"
note "The cloud recovers; the manager retries with backoff, deletes the load balancer, then lets the Service go:"
run cloud DELETE /_sim/faults >/dev/null
wait_for 330 "the Service is gone" gone svc api -n "$NS"
run "$KUBECTL" get svc -n "$NS"
note "cloud-sim holds $(lb_count) load balancer(s)."
[ "$(lb_count)" = 0 ] || die "a load balancer was left behind"

say "Uninstalling"
run "$HELM" uninstall pm -n "$PM_NS" --wait --timeout 60s
say "Demo complete: every step above ran against real kubectl and helm."
