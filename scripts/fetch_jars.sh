#!/usr/bin/env bash
# Fetches the jars a committed POM names (with their dependencies) from Maven Central, once, at
# set-up; what runs them only reads them:
#   deploy/kafka/pom.xml             -> .cache/kafka/jars            (the Kafka node: devtools/kafka_node.py)
#   deploy/flink/job-server-pom.xml  -> .cache/flink-job-server/jars (Beam's Flink job server:
#                                        devtools/flink_cluster.py runs its FlinkJobServerDriver)
# Checked twice: Maven's --strict-checksums fails on a jar whose .sha1 (published by Central beside
# it) does not match; then the set of jars, names and SHA-256s, must equal the lock exactly (no jar
# missing, none extra, none changed).
# Idempotent: returns at once when the jars are there and match the lock.
# Needs: mvn and a JDK 17+ (Debian `maven`, `default-jdk-headless`: scripts/install_test_tools.sh).
# Usage: scripts/fetch_jars.sh POM LOCK DEST [--relock]
#   --relock: after changing a version in the POM, rewrite LOCK from a fresh fetch (review its diff
#   before committing it).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 3 ]] || { echo "usage: scripts/fetch_jars.sh POM LOCK DEST [--relock]" >&2; exit 2; }
pom=$(realpath "$1"); lock=$(realpath -m "$2"); dest=$(realpath -m "$3")
relock=0
[[ ${4:-} == --relock ]] && relock=1

listed() { (cd "$1" && sha256sum -- *.jar | LC_ALL=C sort -k2); }

if [[ $relock -eq 0 && -d "$dest/jars" ]] && diff -q <(listed "$dest/jars") \
    <(LC_ALL=C sort -k2 "$lock") >/dev/null 2>&1; then
  exit 0
fi

command -v mvn >/dev/null 2>&1 || { echo "error: mvn not found: run scripts/install_test_tools.sh (Debian maven)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-jars.XXXXXX")
trap 'rm -rf "$work"' EXIT
mvn -B -q --strict-checksums -f "$pom" -Dmaven.repo.local="$work/m2" \
  dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/jars" >&2

if [[ $relock -eq 1 ]]; then
  listed "$work/jars" > "$lock"
  echo "wrote $lock ($(wc -l < "$lock") jars): review its diff" >&2
elif ! diff -u <(LC_ALL=C sort -k2 "$lock") <(listed "$work/jars") >&2; then
  echo "error: the jars $pom brings differ from $lock (above: - pinned, + fetched); nothing installed" >&2
  exit 1
fi

mkdir -p "$dest"
rm -rf "$dest/jars"
mv "$work/jars" "$dest/jars"
echo "jars ready: $dest/jars ($(ls "$dest/jars" | wc -l) jars, from ${pom#"$repo"/})"
