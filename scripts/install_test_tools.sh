#!/usr/bin/env bash
# Installs the non-Python tools the tests need: promtool (Debian `prometheus`) and docker-compose
# (Debian `docker-compose`, v1: `config -q` validates a file without a Docker engine) for
# tests/deploy; chromium (Debian `chromium`), the headless browser that opens the run report as a
# person would (tests/browser.py); redis-server (Debian `redis-server`), the real Redis that
# tests/redis_server.py starts on loopback for the click-history store (service/history_store.py);
# javac and jar (Debian `default-jdk-headless`): tests/test_flink_cluster.py compiles a small
# Flink job (tests/flink_jobs/) against the Flink jars.
# java and mvn (Debian `default-jre-headless`, `maven`): scripts/fetch_jars.sh fetches the Kafka
# node's jars with mvn, tests/kafka_server.py runs them on java (17+); systemd-analyze (Debian
# `systemd`, no running systemd needed) verifies deploy/systemd's units (tests/deploy); ip
# (Debian `iproute2`): `make flink-up` puts each TaskManager and its Beam worker pool in a network
# namespace of its own, as a pod and its sidecar (devtools/flink_cluster.py); curl and unzip
# (Debian `curl`, `unzip`): scripts/fetch_crds.sh fetches the Trainer's CRDs from the Go proxy.
# Idempotent: returns at once when every command is already on PATH.
# Usage (as root on Debian 12 / Ubuntu): scripts/install_test_tools.sh
set -euo pipefail

declare -A package_for=(
  [promtool]=prometheus
  [docker-compose]=docker-compose
  [chromium]=chromium
  [redis-server]=redis-server
  [java]=default-jre-headless
  [mvn]=maven
  [javac]=default-jdk-headless
  [systemd-analyze]=systemd
  [ip]=iproute2
  [curl]=curl
  [unzip]=unzip
)

missing=()
for cmd in "${!package_for[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${package_for[$cmd]}")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: apt-get not found; install these packages with your system's package manager: ${missing[*]}" >&2
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    echo "error: installing ${missing[*]} needs root (or sudo)" >&2
    exit 1
  fi
fi

echo "installing: ${missing[*]}"
# Through env: sudo drops the caller's environment.
apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
"${apt[@]}" update -qq
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"

for cmd in "${!package_for[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "error: $cmd still missing after install" >&2; exit 1; }
done
echo "test tools ready: $(promtool --version 2>&1 | head -n1); $(docker-compose version --short 2>/dev/null || true); $(chromium --version 2>/dev/null || true); $(redis-server --version 2>/dev/null | cut -d' ' -f1-3 || true)"
