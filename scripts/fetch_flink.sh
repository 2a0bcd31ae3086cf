#!/usr/bin/env bash
# Fetches Flink 1.16.3's jars for the local session cluster (devtools/flink_cluster.py, `make
# flink-up`) once, at set-up; the cluster only reads them. From PyPI's apache-flink-libraries
# sdist (deploy/flink/flink-libraries.txt), checked by pip against the pinned sha256
# (--require-hashes); only its deps/lib/*.jar and deps/bin/bash-java-utils.jar are kept.
# Idempotent: returns at once when .cache/flink holds what this pin gave.
# Needs: the venv's pip (scripts/setup_env.sh) and a JDK 17 to run them (install_test_tools.sh).
# Usage: scripts/fetch_flink.sh   (FLINK_LIBS: where the jars go, default .cache/flink)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
pin="$repo/deploy/flink/flink-libraries.txt"
dest=${FLINK_LIBS:-$repo/.cache/flink}
want=$(grep -o 'sha256:[0-9a-f]*' "$pin")

if [[ -f "$dest/.pin" && "$(cat "$dest/.pin")" == "$want" ]]; then
  exit 0
fi
[[ -x "$repo/.venv/bin/python" ]] || { echo "error: $repo/.venv is missing: run scripts/setup_env.sh (make venv) first" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-flink.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$repo/.venv/bin/python" -m pip download --quiet --no-deps --no-binary :all: --require-hashes \
  -r "$pin" -d "$work/dl" >&2
tar -xzf "$work"/dl/apache-flink-libraries-*.tar.gz -C "$work" --wildcards \
  '*/deps/lib/*.jar' '*/deps/bin/bash-java-utils.jar'
mkdir -p "$work/flink"
mv "$work"/apache-flink-libraries-*/deps/lib "$work"/apache-flink-libraries-*/deps/bin "$work/flink/"
echo "$want" > "$work/flink/.pin"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work/flink" "$dest"
echo "flink jars ready: $dest ($(ls "$dest/lib" | wc -l) jars in lib/, $(grep -o '==[0-9.]*' "$pin" | tr -d =))"
