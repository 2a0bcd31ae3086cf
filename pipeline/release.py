"""Release a pushed model version as the canary of the serving Rollout.

    python -m pipeline.release [--config configs/pipeline.yaml] [--version V]
        [--server https://HOST:PORT --token-file F [--ca-file F]]

With `serving.release: canary`, sets the pod label tf-serving/model-version of the Argo Rollout
tf-serving-<model> in `serving.namespace` (deploy/serving/k8s/rollout) to the version: the
Rollout then runs its canary steps and analysis, and promotes the version or takes it back by
itself. The version defaults to the newest one the Pusher wrote under <serving_dir>/<model_name>.
With `serving.release: direct` there is nothing to do: TF Serving loads new versions itself.

It talks to the Kubernetes API directly (no kubectl, no client library; core/rollout.py): with
--server/--token-file, else in a pod with the service account's token (KUBERNETES_SERVICE_HOST),
else the kube config's current context (token or client certificate). It needs exactly
what deploy/serving/k8s/rollout/common/release-rbac.yaml grants: get and patch on that one
Rollout. The patch is a JSON merge patch with fieldValidation=Strict, so the API server refuses it
rather than drop a field it does not know.

It does not re-release: when the Rollout already has the version it reports the Rollout's state
and changes nothing, and when that version's canary was aborted (status.abort) it says so and
exits 3, so an unchanged nightly re-run does not push an aborted model again (retry it by hand:
kubectl argo rollouts retry rollout ...). While another version's canary is still running it
releases nothing (exit 3). With the patch it records the stable version in the Rollout's
annotation tf-serving/stable-model-version (stable_version() reads it back).

Exit status: 0 released or nothing to do, 2 bad config or arguments, 3 the version was aborted
or another canary is running, 4 the Kubernetes API refused or could not be reached.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional

from core.cli import add_config_argument, refuse
from core.config import ConfigError, load_config
# The client, the stable version and the release rule live in core/rollout.py, shared with the
# pipeline's release step (components/release) and ServingBaseline; re-exported here.
from core.rollout import (ROLLOUTS, STABLE_ANNOTATION, VERSION_LABEL, Cluster,  # noqa: F401
                          Outcome, ReleaseError, check_version, kubernetes_name, newest_version,
                          pod_version, release, rollout_name, stable_version)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_argument(parser)
    parser.add_argument("--version", help="default: the newest pushed version")
    parser.add_argument("--server", help="the Kubernetes API (default: in-cluster, else the "
                        "kube config)")
    parser.add_argument("--token-file", type=Path)
    parser.add_argument("--ca-file")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return refuse(error)
    serving = config.serving
    if serving.release != "canary":
        print("serving.release is direct: TF Serving loads the newest pushed version itself; "
              "nothing to release")
        return 0
    try:
        version = check_version(args.version) if args.version else newest_version(
            config.model_base_path)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.server and not args.token_file:
        print("error: --server needs --token-file", file=sys.stderr)
        return 2
    try:
        cluster = (Cluster(args.server, args.token_file.read_text().strip(), args.ca_file)
                   if args.server else Cluster.connect())
        outcome = release(cluster, serving.namespace, rollout_name(serving.model_name), version)
    except ReleaseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 4
    print(outcome.message)
    return 3 if outcome.action in ("aborted", "in-progress") else 0


if __name__ == "__main__":
    sys.exit(main())
