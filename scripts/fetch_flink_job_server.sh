#!/usr/bin/env bash
# Fetches Beam 2.59's Flink 1.18 job server jar (what `--flink_job_server_jar` names: Beam's
# Python FlinkRunner would otherwise download it at run time) once, at set-up, with Maven
# (--strict-checksums: the jar against the .sha1 Central publishes beside it), then checks its
# SHA-512 against deploy/flink/job-server.sha512, the pin committed after review.
# Not part of `make tools`: the registry this project's CI reaches does not serve this artifact
# (README: Beam stages on Flink). Run it where Maven Central serves it:
#   scripts/fetch_flink_job_server.sh [--relock]   (--relock: write the pin from this fetch,
#   then review and commit deploy/flink/job-server.sha512)
# Idempotent: returns at once when the jar is there and matches the pin.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
artifact=org.apache.beam:beam-runners-flink-1.18-job-server:2.59.0
name=beam-runners-flink-1.18-job-server-2.59.0.jar
pin="$repo/deploy/flink/job-server.sha512"
dest=${FLINK_JOB_SERVER:-$repo/.cache/flink-job-server}
relock=0
[[ ${1:-} == --relock ]] && relock=1

if [[ $relock -eq 0 && -f "$dest/$name" && -f "$pin" ]] \
    && (cd "$dest" && sha512sum --quiet -c "$pin") >/dev/null 2>&1; then
  exit 0
fi
if [[ $relock -eq 0 && ! -f "$pin" ]]; then
  echo "error: no pin $pin: run scripts/fetch_flink_job_server.sh --relock where Maven Central serves $artifact, review and commit the pin" >&2
  exit 1
fi
command -v mvn >/dev/null 2>&1 || { echo "error: mvn not found: run scripts/install_test_tools.sh (Debian maven)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-job-server.XXXXXX")
trap 'rm -rf "$work"' EXIT
if ! mvn -B -q --strict-checksums -Dmaven.repo.local="$work/m2" dependency:copy \
    -Dartifact="$artifact" -DoutputDirectory="$work/out" >&2; then
  echo "error: Maven could not fetch $artifact (is it served by the registry this machine reaches?)" >&2
  exit 1
fi
if [[ $relock -eq 1 ]]; then
  (cd "$work/out" && sha512sum "$name") > "$pin"
  echo "wrote $pin: review and commit it" >&2
elif ! (cd "$work/out" && sha512sum --quiet -c "$pin") >&2; then
  echo "error: $name does not match $pin; nothing installed" >&2
  exit 1
fi
mkdir -p "$dest"
mv "$work/out/$name" "$dest/$name"
echo "flink job server ready: $dest/$name"
