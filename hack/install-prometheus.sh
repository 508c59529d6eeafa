#!/usr/bin/env bash
# Installs promtool and prometheus (Debian's `prometheus` package) for the
# alert unit tests (`promtool test rules`) and the Prometheus end-to-end test.
# Idempotent: nothing happens when both are on PATH. Needs root (CI and the
# development machines run as root) or sudo. The package's service is not
# started: policy-rc.d refuses it during the install, and the tests start
# their own server on loopback.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "promtool/prometheus missing and no apt-get: install Prometheus 2.x (promtool and prometheus on PATH)" >&2
  exit 1
fi
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "installing prometheus needs root or sudo" >&2; exit 1; }
  SUDO=(sudo)
fi
echo "installing promtool and prometheus (Debian package prometheus)"
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
  "${SUDO[@]}" chmod 755 "$policy"
  created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then "${SUDO[@]}" rm -f "$policy"; fi; }
trap cleanup EXIT
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
promtool --version 2>&1 | head -n1
