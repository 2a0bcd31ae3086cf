"""A step's part in the run lease (core/run_lease.py), from the flag the compiled spec gives
every step's entrypoint (pipeline/kubeflow/client/spec.py):

    --night_lease '{"role": ROLE, "task": TASK, "expiry_s": SECONDS}'

ROLE: `take` (the ExampleGen driver task, the run's first step: takes the lease or stops the run
with one error naming the holder), `push` (the Pusher: its executor checks the lease just before
it pushes, components/pusher/executor.py, through run_lease.PUSH_GUARD_ENV set here), `release`
(the run report, the last step: gives it back when it ends), `hold` (any other step). Every role
gives the lease back when its step fails: KFP schedules nothing after a failed task (Argo's DAG
failFast), so the run is over.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional, Tuple

from core import lease_stores, run_lease

# The config key's name when specs were first compiled (kubeflow.night_lease, now run_lease): it
# is in every compiled step's command, and renaming it would change every step's cache key.
FLAG = "--night_lease"
ROLES = ("take", "push", "release", "hold")


class LeaseFlagError(ValueError):
    pass


def split_flag(argv: list) -> Tuple[Optional[dict], list]:
    """(the flag's settings or None, the rest of argv)."""
    if argv[:1] != [FLAG]:
        return None, argv
    try:
        settings = json.loads(argv[1])
    except (IndexError, json.JSONDecodeError):
        settings = None
    if not (isinstance(settings, dict) and settings.get("role") in ROLES
            and isinstance(settings.get("task"), str)
            and isinstance(settings.get("expiry_s"), (int, float))):
        raise LeaseFlagError(f"{FLAG} takes JSON {{\"role\": one of {ROLES}, \"task\": "
                                  f"NAME, \"expiry_s\": SECONDS}}, got {argv[1:2]}")
    return settings, argv[2:]


def _where(settings: dict, executor_input: dict) -> Tuple[str, str]:
    """(the run root, the lease URI) of this step."""
    uris = [a.get("uri", "") for listed in executor_input.get("outputs", {}).get(
        "artifacts", {}).values() for a in listed.get("artifacts", [])]
    root = run_lease.run_root(uris, settings["task"])
    return root, run_lease.lease_uri(root)


def before(settings: Optional[dict], executor_input: dict) -> Optional[str]:
    """The step's part before it runs; an error message when the run must stop."""
    if settings is None or settings["role"] not in ("take", "push"):
        return None
    try:
        root, uri = _where(settings, executor_input)
        if settings["role"] == "take":
            lease = run_lease.take(lease_stores.open_store(uri), root, settings["expiry_s"])
            print(f"run lease {uri}: taken by this run, {lease.describe()}", file=sys.stderr)
        elif settings["role"] == "push":
            os.environ[run_lease.PUSH_GUARD_ENV] = json.dumps({"lease": uri,
                                                                 "run_root": root})
    except run_lease.LeaseError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001  (the store: credentials, network, permissions)
        return f"cannot read or write the run lease beside this run: {error}"
    return None


def after(settings: Optional[dict], executor_input: dict, code: int) -> None:
    """Gives the lease back when the step failed or is the run's last; never raises (the step's
    own result stands; a lease left held expires). executor_input: as the launcher gave it, with
    the backend's executor-logs output (2.5.0+), by which a step without outputs of its own (the
    gates) knows its run."""
    if settings is None or (code == 0 and settings["role"] != "release"):
        return
    try:
        root, uri = _where(settings, executor_input)
    except run_lease.LeaseError:
        print("warning: this step has no output artifact (and KFP before 2.5.0 adds no "
              "executor-logs), so it cannot tell its run: the run lease stays until it "
              "expires (kubeflow.run_lease.expiry_s) or is deleted", file=sys.stderr)
        return
    try:
        if run_lease.release(lease_stores.open_store(uri), root):
            print(f"run lease {uri}: released", file=sys.stderr)
    except Exception as error:  # noqa: BLE001  (any store error: say it, keep the step's code)
        print(f"warning: could not release the run lease: {error}", file=sys.stderr)

