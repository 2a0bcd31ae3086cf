#!/usr/bin/env bash
# Fetches the Kafka node's jars (deploy/kafka/pom.xml: Kafka 4.x, one KRaft process) from Maven
# Central, once, at set-up; the tests and the dev stack only read them (tests/kafka_server.py).
# Checked twice: Maven's --strict-checksums fails on a jar whose .sha1 (published by Central beside
# it) does not match; then the set of jars, names and SHA-256s, must equal deploy/kafka/jars.sha256
# exactly (no jar missing, none extra, none changed).
# Idempotent: returns at once when the jars are there and match the list.
# Needs: mvn and a JDK 17+ (Debian `maven`, `default-jdk-headless`: scripts/install_test_tools.sh).
# Usage: scripts/fetch_kafka.sh [--relock]   (KAFKA_JARS: where the jars go, default .cache/kafka)
#   --relock: after changing a version in the POM, rewrite jars.sha256 from a fresh fetch (review
#   its diff before committing it).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
pom="$repo/deploy/kafka/pom.xml"
lock="$repo/deploy/kafka/jars.sha256"
dest=${KAFKA_JARS:-$repo/.cache/kafka}
relock=0
[[ ${1:-} == --relock ]] && relock=1

listed() { (cd "$1" && sha256sum -- *.jar | LC_ALL=C sort -k2); }

if [[ $relock -eq 0 && -d "$dest/jars" ]] && diff -q <(listed "$dest/jars") \
    <(LC_ALL=C sort -k2 "$lock") >/dev/null 2>&1; then
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { echo "error: mvn not found: run scripts/install_test_tools.sh (Debian maven)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-kafka.XXXXXX")
trap 'rm -rf "$work"' EXIT
mvn -B -q --strict-checksums -f "$pom" -Dmaven.repo.local="$work/m2" \
  dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/jars" >&2

if [[ $relock -eq 1 ]]; then
  listed "$work/jars" > "$lock"
  echo "wrote $lock ($(wc -l < "$lock") jars): review its diff" >&2
elif ! diff -u <(LC_ALL=C sort -k2 "$lock") <(listed "$work/jars") >&2; then
  echo "error: the fetched jars differ from $lock (above: - pinned, + fetched); nothing installed" >&2
  exit 1
fi

mkdir -p "$dest"
rm -rf "$dest/jars"
mv "$work/jars" "$dest/jars"
echo "kafka jars ready: $dest/jars ($(ls "$dest/jars" | wc -l) jars, $(grep -o '<kafka.version>[^<]*' "$pom" | cut -d'>' -f2))"
