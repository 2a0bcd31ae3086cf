"""Launching a training job and waiting for it (`run_tfjob`): create or adopt a retried step's
job, hand its NetworkPolicy to it, poll until it finishes, bound its restarts and its time, and
delete it (and its policy) when the step is terminated (SIGTERM/SIGINT), so a cancelled run
leaves no replicas.
"""
from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable

from pipeline.kubeflow.training_job.job_status import JobSetRestarts, Restarts, finished
from pipeline.kubeflow.training_job.kinds import TFJOB, TFJobError, kind_of
from pipeline.kubeflow.training_job.kube_api import JobApi, api_error
from pipeline.kubeflow.training_job.manifest import network_policy


class StepTerminated(BaseException):
    """SIGTERM or SIGINT reached the step while it waited (a BaseException, so no `except
    Exception` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


def _raise_terminated(signum, frame):
    raise StepTerminated(signum)


def _ignore_while_cleaning_up(signum, frame):
    logging.warning("signal %d again: still deleting the TFJob", signum)


class _Signals:
    """While installed (main thread only: Python runs handlers there), SIGTERM and SIGINT go
    to `handler`; the previous handlers come back on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, handler=_raise_terminated) -> None:
        self.handler = handler

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is not threading.main_thread():
            logging.warning("run_tfjob is not on the main thread: a SIGTERM will not delete "
                            "the TFJob (its ownerReference to the step's pod still will)")
            return self
        for signum in self.SIGNALS:
            self.previous[signum] = signal.signal(signum, self.handler)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)


def run_tfjob(custom_api, core_api, manifest: dict, timeout_s: float, max_restarts: int,
              poll_s: float = 15.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep, networking_api=None,
              any_port: bool = False) -> str:
    """Creates the TFJob (and its NetworkPolicy) and waits for Succeeded; returns that
    condition's text.

    A retried step finds its job by name: one still running is waited for, one that
    Succeeded is taken, one that Failed (kept an hour by ttlSecondsAfterFinished) is deleted,
    and only once it is gone, pods and all, created again, so two never run at once.
    `custom_api`/`core_api`/`networking_api`: kubernetes.client CustomObjectsApi/CoreV1Api/
    NetworkingV1Api (`networking_api` defaults to `core_api`, for one fake answering all).
    Raises TFJobError on failure, timeout, too many restarts (after deleting the job) or a
    failing API. On SIGTERM or SIGINT it deletes the job and its policy and exits 128 + the
    signal (143 for SIGTERM, as a killed step), restoring the previous handlers first."""
    api = JobApi(custom_api, core_api, manifest["metadata"]["name"],
               manifest["metadata"]["namespace"], sleep,
               networking_api if networking_api is not None else core_api, kind_of(manifest))
    try:
        with _Signals():
            return _run(api, manifest, timeout_s, max_restarts, poll_s, clock, sleep, any_port)
    except StepTerminated as stop:
        logging.warning("signal %d: deleting %s %s/%s and its NetworkPolicy before exiting",
                        stop.signum, api.kind.kind, api.namespace, api.name)
        with _Signals(_ignore_while_cleaning_up):  # a second signal must not cut it short
            _delete_all(api)
        raise SystemExit(128 + stop.signum) from None


def _delete_all(api: JobApi) -> None:
    for what, delete in ((api.kind.kind, api.delete), ("NetworkPolicy", api.delete_policy)):
        try:
            delete()
        except Exception as error:  # noqa: BLE001  (clean up what can be, report the rest)
            logging.error("could not delete the %s of %s/%s: %s", what, api.namespace,
                          api.name, error)


def _run(api: JobApi, manifest: dict, timeout_s: float, max_restarts: int, poll_s: float,
         clock, sleep, any_port: bool) -> str:
    from kubernetes.client.exceptions import ApiException

    kind = api.kind.kind
    where = f"{kind} {api.namespace}/{api.name}"
    logs = (f"kubectl -n {api.namespace} logs -l {api.kind.name_label}={api.name} --prefix; "
            f"kubectl -n {api.namespace} describe {kind.lower()} {api.name}")
    deadline = clock() + timeout_s
    restarts = Restarts() if api.kind is TFJOB else JobSetRestarts()
    try:
        job = _create_or_adopt(api, manifest, deadline, clock, sleep, poll_s, any_port)
        api.own_policy(network_policy(manifest, job["metadata"]["uid"], any_port))
        while True:
            state = finished(job, api.kind.success)
            if state and state.startswith(api.kind.success):
                return state
            if state:
                raise TFJobError(f"{where} {state} ({logs})")
            count = restarts.update(api.pods())
            if count > max_restarts:
                api.delete()
                raise TFJobError(
                    f"{where}: its replicas failed {count} times, more than "
                    f"training.job.max_restarts ({max_restarts}): {restarts.describe()}. "
                    f"Deleted it (the operator would restart them until the deadline). "
                    f"Logs of the last attempt: {logs}")
            if clock() >= deadline:
                api.delete()
                raise TFJobError(f"{where} did not finish within {timeout_s:.0f}s "
                                 "(training.job.timeout_s); deleted it")
            sleep(poll_s)
            job = api.get()
    except ApiException as error:
        if error.status == 404:
            raise TFJobError(f"{where} disappeared while the step waited for it (deleted "
                             "by someone else?); the step fails so a retry starts it again"
                             ) from None
        raise api_error(api, error, "create or watch") from None


def _create_or_adopt(api: JobApi, manifest: dict, deadline: float, clock, sleep,
                     poll_s: float, any_port: bool = False) -> dict:
    """The job to wait for: the one created here, or a retried step's earlier one."""
    from kubernetes.client.exceptions import ApiException

    while True:
        try:
            api.create_policy(network_policy(manifest, any_port=any_port))
            api.create(manifest)
            logging.info("created %s %s/%s", api.kind.kind, api.namespace, api.name)
            return api.get()
        except ApiException as error:
            if error.status != 409:
                raise api_error(api, error, "create") from None
        try:
            job = api.get()
        except ApiException as error:
            if error.status == 404:  # deleted between our create and get: create again
                continue
            raise
        state = finished(job, api.kind.success)
        deleting = (job.get("metadata") or {}).get("deletionTimestamp")
        if not deleting and (state is None or state.startswith(api.kind.success)):
            logging.info("%s %s/%s exists (a retried step): %s", api.kind.kind, api.namespace,
                         api.name, state or "waiting for it")
            return job
        if not deleting:
            logging.info("%s %s/%s from an earlier attempt %s: deleting it to start again",
                         api.kind.kind, api.namespace, api.name, state)
            api.delete()
        if clock() >= deadline:
            raise TFJobError(f"{api.kind.kind} {api.namespace}/{api.name} from an earlier "
                             "attempt was still being deleted at training.job.timeout_s")
        sleep(poll_s)
