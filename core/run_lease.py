"""One Kubeflow run at a time may push: a lease object beside the pipeline's runs.

KFP's `max_concurrency=1` and no-catchup hold within one recurring run only (the scheduler counts
the active workflows it listed by that ScheduledWorkflow's name: backend/src/crd/controller/
scheduledworkflow/controller.go, util/scheduled_workflow.go GetNextScheduledEpoch, 2.5.0 to
2.17.0): a manual run or a second recurring run overlaps the nightly run, and two that overlap judge
their candidates against the same serving baseline and both push. So each run takes this lease in
its first step (the ExampleGen driver task, never cached), the Pusher refuses to push unless its
run holds it, and the run gives it back at its end (the run report step, also never cached) or
when one of its steps fails.

The lease is one JSON object, `<pipeline root>/<pipeline>/.night-lease.json`, beside the runs'
folders `<pipeline root>/<pipeline>/<run id>/` (KFP's run root, backend/src/v2/metadata/client.go
GetPipeline). A run is known by that run root, which every step reads off its own output URIs, on
every backend release (no placeholder needed: `{{$.pipeline_job_uuid}}` is resolved from 2.5.0
only, driver/driver.go). It holds the run id, when it was taken, when it expires (a run killed
before it could give the lease back blocks others only until then) and whether it was released.

What is atomic (each kind of store: core/lease_stores.py):
- s3://: PutObject with `If-None-Match: *` (take a free lease) or `If-Match: <ETag>` (take over an
  expired or released one, release one): AWS S3 evaluates both atomically (since August and
  November 2024; moto, which the tests run against, evaluates them too). Other S3 stores vary: one
  that answers 501 gets an unconditional write, one that ignores the headers makes the same
  read-then-write. Then two runs starting in the same moment could both write it; the later write
  wins the object, the take reads it back, and the run whose write lost stops there or at its
  Pusher, which checks again.
- gs://: the same with generation preconditions (ifGenerationMatch), atomic on GCS.
- a local path (the emulated backend's local roots): read-decide-write under an fcntl lock of a
  side file, atomic among the processes of one machine.
Expiry compares the pods' clocks (Kubernetes nodes run NTP; seconds of skew against hours).
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import secrets
import time
from typing import Callable, Iterable, Optional, Protocol, Tuple

# The object's name and the env var below keep their first names: a run of the previous release
# still holding its lease during an upgrade must be seen by the next one.
LEASE_NAME = ".night-lease.json"
ATTEMPTS = 5  # conditional writes lost to another writer before giving up
# Set by the Pusher step's entrypoint (pipeline/kubeflow/step/run_lease_step.py) for its executor:
# {"lease": URI, "run_root": URI}. Unset (a local run, a spec compiled without the lease): no check.
PUSH_GUARD_ENV = "PIPELINE_NIGHT_LEASE"


class LeaseError(RuntimeError):
    """The run may not go on (another holds the lease) or may not push; says which run holds it
    and what to do."""


class LeaseStore(Protocol):
    """One object, read and written with a condition. `where` names it for messages."""
    where: str

    def read(self) -> Optional[Tuple[bytes, str]]:
        """(body, version token) or None when there is no object."""

    def create(self, body: bytes) -> bool:
        """Writes body when there is no object; False when there is one."""

    def replace(self, body: bytes, token: str) -> bool:
        """Writes body when the object is still at version token; False when it changed."""


@dataclasses.dataclass(frozen=True)
class Lease:
    run_id: str
    run_root: str
    taken_at: float
    expires_at: float
    released_at: Optional[float] = None
    nonce: str = ""

    def free(self, now: float) -> bool:
        return self.released_at is not None or now >= self.expires_at

    def to_bytes(self) -> bytes:
        return json.dumps({**dataclasses.asdict(self), "taken": _iso(self.taken_at),
                           "expires": _iso(self.expires_at)}, indent=1).encode()

    def describe(self) -> str:
        return (f"run {self.run_id} (taken {_iso(self.taken_at)}, expires "
                f"{_iso(self.expires_at)})")


def _iso(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def run_root(output_uris: Iterable[str], task: str) -> str:
    """The run root `<root>/<pipeline>/<run id>` of a step of task `task`: its output URIs are
    `<run root>/<task>/...` (backend/src/v2/driver/driver.go provisionOutputs)."""
    for uri in output_uris:
        head, found, _ = uri.partition(f"/{task}/")
        if found and "/" in head.rstrip("/"):
            return head.rstrip("/")
    raise LeaseError(f"no output URI of task {task} is under <pipeline root>/<pipeline>/<run id>/"
                     f"{task}/ ({sorted(output_uris)}): cannot tell which run this step is")


def lease_uri(root_of_run: str) -> str:
    """`<pipeline root>/<pipeline>/.night-lease.json` for the run root `.../<run id>`."""
    return f"{root_of_run.rsplit('/', 1)[0]}/{LEASE_NAME}"


def _parse(store: LeaseStore, body: bytes) -> Lease:
    try:
        data = json.loads(body)
        return Lease(**{f.name: data[f.name] for f in dataclasses.fields(Lease)
                        if f.name in data})
    except (ValueError, TypeError, KeyError) as error:
        raise LeaseError(f"{store.where} is not a run lease ({error}): if no run of this "
                         "pipeline is in progress, delete it and start the run again") from None


def take(store: LeaseStore, root_of_run: str, expiry_s: float,
         now: Callable[[], float] = time.time) -> Lease:
    """The lease for the run at root_of_run: taken when free (none, released or expired), kept
    when this run holds it already (a retried first step); LeaseError naming the holder else."""
    run_id = root_of_run.rsplit("/", 1)[-1]
    for _ in range(ATTEMPTS):
        moment = now()
        mine = Lease(run_id, root_of_run, moment, moment + expiry_s,
                     nonce=secrets.token_hex(8))
        found = store.read()
        if found is None:
            if store.create(mine.to_bytes()):
                return _confirmed(store, mine)
            continue
        held = _parse(store, found[0])
        if held.run_root == root_of_run and held.released_at is None:
            return held
        if not held.free(moment):
            raise LeaseError(
                f"another run of this pipeline is in progress: {held.describe()} holds "
                f"{store.where}; this run ({run_id}) stops at its first step and pushes "
                "nothing. Let that run finish, or, if it is gone (deleted or killed), wait for "
                "the expiry or delete the lease object, then start again")
        if store.replace(mine.to_bytes(), found[1]):
            return _confirmed(store, mine)
    raise LeaseError(f"{store.where}: {ATTEMPTS} writers in a row changed the lease while this "
                     f"run ({run_id}) tried to take it; start the run again")


def _confirmed(store: LeaseStore, mine: Lease) -> Lease:
    """mine, once reading it back finds it (a store that ignored the write's condition may have
    taken another writer's object over it)."""
    found = store.read()
    held = _parse(store, found[0]) if found else None
    if held is None or held.nonce != mine.nonce:
        raise LeaseError(f"{store.where}: another run wrote the lease at the same moment "
                         f"({held.describe() if held else 'and removed it'}); this run "
                         f"({mine.run_id}) stops and pushes nothing")
    return mine


def require(store: LeaseStore, root_of_run: str, now: Callable[[], float] = time.time) -> Lease:
    """The lease, when the run at root_of_run holds it now; LeaseError naming the holder else
    (the Pusher calls this just before it pushes)."""
    run_id = root_of_run.rsplit("/", 1)[-1]
    found = store.read()
    refused = f"the Pusher of run {run_id} refuses to push"
    if found is None:
        raise LeaseError(f"{refused}: there is no run lease at {store.where} (the run's first "
                         "step takes it; was it deleted?)")
    held = _parse(store, found[0])
    if held.run_root != root_of_run:
        raise LeaseError(f"{refused}: {held.describe()} holds {store.where}, so another run "
                         "may push against the same baseline. Nothing was pushed")
    if held.released_at is not None:
        raise LeaseError(f"{refused}: the run released {store.where} already")
    if now() >= held.expires_at:
        raise LeaseError(f"{refused}: its lease {store.where} expired at "
                         f"{_iso(held.expires_at)}, so another run may take it; raise "
                         "kubeflow.run_lease.expiry_s above the longest night")
    return held


def push_guard(environ) -> Optional[Tuple[str, str]]:
    """(lease URI, run root) the Pusher's run must hold, when its step runs under the lease."""
    value = environ.get(PUSH_GUARD_ENV)
    if not value:
        return None
    data = json.loads(value)
    return data["lease"], data["run_root"]


def release(store: LeaseStore, root_of_run: str, now: Callable[[], float] = time.time) -> bool:
    """Marks the lease released when the run at root_of_run holds it; whether it did."""
    for _ in range(ATTEMPTS):
        found = store.read()
        if found is None:
            return False
        held = _parse(store, found[0])
        if held.run_root != root_of_run or held.released_at is not None:
            return False
        done = dataclasses.replace(held, released_at=now())
        if store.replace(done.to_bytes(), found[1]):
            return True
    raise LeaseError(f"{store.where}: the lease kept changing while run "
                     f"{root_of_run.rsplit('/', 1)[-1]} released it")


__all__ = ["LEASE_NAME", "PUSH_GUARD_ENV", "Lease", "LeaseError", "LeaseStore", "lease_uri",
           "push_guard", "release", "require", "run_root", "take"]
