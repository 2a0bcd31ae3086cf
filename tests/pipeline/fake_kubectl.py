"""A `kubectl` that answers the doctor's reads of a KFP install from a folder of JSON.

    FAKE_KUBECTL_CLUSTER=DIR  the cluster (fixtures/kfp_clusters/*, SOURCES.md there):
        -n NS get deployments -o json        DIR/deployments.json (NS kubeflow)
        -n NS get services -o json           DIR/services.json (NS kubeflow)
        -n NS get configmap NAME -o json     DIR/configmap-NAME-NS.json, else NotFound
        -n NS get secret NAME -o go-template=TEMPLATE (the doctor's, listing the keys only)
                                             DIR/secret-NAME-NS.keys (the key names), else
                                             NotFound
      a file NAME.stderr beside one of them makes that read fail with its text (Forbidden, ...).
    unset: no cluster, with what kubectl 1.32 prints when nothing listens at its server.

Each command must come with --request-timeout first, as the doctor sends it; anything else
exits 99, so a test sees what the doctor asked. `install(folder)` puts it on a PATH as kubectl.
"""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

NO_CLUSTER = (
    'E0710 08:00:00.000000   4242 memcache.go:265] "Unhandled Error" err="couldn\'t get current '
    'server API group list: Get \\"http://localhost:8080/api?timeout=10s\\": dial tcp '
    '127.0.0.1:8080: connect: connection refused"\n'
    "The connection to the server localhost:8080 was refused - did you specify the right host "
    "or port?\n")


def install(folder: Path) -> Path:
    """folder/kubectl, running this file with this interpreter; returns folder."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "kubectl"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def _answer(args) -> int:
    cluster = os.environ.get("FAKE_KUBECTL_CLUSTER")
    if args[-2:-1] == ["-o"] and args[-1].startswith("go-template="):
        return _secret_keys(args[:-2], cluster)
    if len(args) < 7 or not args[0].startswith("--request-timeout=") or args[1] != "-n" or (
            args[3] != "get" or args[-2:] != ["-o", "json"]):
        sys.stderr.write(f"fake kubectl: unexpected command: {' '.join(args)}\n")
        return 99
    namespace, what = args[2], args[4:-2]
    if not cluster:
        sys.stderr.write(NO_CLUSTER)
        return 1
    if what in (["deployments"], ["services"]) and namespace == "kubeflow":
        path = Path(cluster) / f"{what[0]}.json"
    elif len(what) == 2 and what[0] == "configmap":
        path = Path(cluster) / f"configmap-{what[1]}-{namespace}.json"
    elif what in (["deployments"], ["services"]):
        path = None  # an empty namespace: kubectl prints an empty List
    else:
        sys.stderr.write(f"fake kubectl: unexpected command: {' '.join(args)}\n")
        return 99
    refusal = path and path.with_suffix(".stderr")
    if refusal and refusal.is_file():
        sys.stderr.write(refusal.read_text())
        return 1
    if path is None:
        sys.stdout.write('{"apiVersion": "v1", "items": [], "kind": "List", '
                         '"metadata": {"resourceVersion": ""}}\n')
        return 0
    if not path.is_file():
        sys.stderr.write(f'Error from server (NotFound): configmaps "{what[1]}" not found\n')
        return 1
    sys.stdout.write(path.read_text())
    return 0


def _secret_keys(args, cluster) -> int:
    """A Secret's keys as the doctor's go-template prints them: each followed by a space."""
    if len(args) != 6 or not args[0].startswith("--request-timeout=") or args[1] != "-n" or (
            args[3:5] != ["get", "secret"]):
        sys.stderr.write(f"fake kubectl: unexpected command: {' '.join(args)}\n")
        return 99
    if not cluster:
        sys.stderr.write(NO_CLUSTER)
        return 1
    path = Path(cluster) / f"secret-{args[5]}-{args[2]}.keys"
    if not path.is_file():
        sys.stderr.write(f'Error from server (NotFound): secrets "{args[5]}" not found\n')
        return 1
    sys.stdout.write("".join(f"{key} " for key in path.read_text().split()))
    return 0


if __name__ == "__main__":
    sys.exit(_answer(sys.argv[1:]))
