#!/usr/bin/env bash
# Fetches the Kubeflow Trainer v2.3.0 CRDs the tests validate TrainJobs and the runtime against
# (tests/deploy/crd_schema.py) once, at set-up, from the Go module proxy: the module zip of
# github.com/kubeflow/trainer/v2@v2.3.0 (its release tag), checked against the pinned sha256;
# only manifests/base/crds/ of it is kept, and each file's own digest is deploy/crds/README.md's.
# Not vendored: the runtime CRD's upstream text holds defaults that are absolute paths of a
# container (the MPI runtime's SSH folder in root's home), which this repository keeps out of
# its files.
# Idempotent: returns at once when .cache/crds holds what this pin gave.
# Usage: scripts/fetch_crds.sh   (GOPROXY: the first proxy of it, default proxy.golang.org;
#        CRDS_CACHE: where the files go, default .cache/crds)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
MODULE=github.com/kubeflow/trainer/v2
VERSION=v2.3.0
ZIP_SHA256=41301eefbdd4db002df33d2becb4d62b346165bf17d3d79c5f38ab715ab76857
FILES=(trainer.kubeflow.org_trainjobs.yaml trainer.kubeflow.org_clustertrainingruntimes.yaml)
dest=${CRDS_CACHE:-$repo/.cache/crds}/trainer-$VERSION
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%[,|]*}

if [[ -f "$dest/.pin" && "$(cat "$dest/.pin")" == "$ZIP_SHA256" ]]; then
  exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fetch-crds.XXXXXX")
trap 'rm -rf "$work"' EXIT
curl -fsSL --retry 3 -o "$work/module.zip" "$proxy/$MODULE/@v/$VERSION.zip"
got=$(sha256sum "$work/module.zip" | cut -d' ' -f1)
if [[ "$got" != "$ZIP_SHA256" ]]; then
  echo "error: $MODULE@$VERSION from $proxy has sha256 $got, not the pinned $ZIP_SHA256" >&2
  exit 1
fi
mkdir -p "$work/crds"
for file in "${FILES[@]}"; do
  unzip -p "$work/module.zip" "$MODULE@$VERSION/manifests/base/crds/$file" > "$work/crds/$file"
done
echo "$ZIP_SHA256" > "$work/crds/.pin"
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work/crds" "$dest"
echo "crds ready: $dest (${#FILES[@]} files of $MODULE@$VERSION)"
