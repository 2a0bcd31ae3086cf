"""Bounds on a local run whose Beam stages run elsewhere (Flink, a portable job service, a
worker pool): it fails within minutes, with one `error:` line naming what to check, rather than
waiting forever.

- Before the first step, every endpoint runner.beam_args names that this process can reach must
  accept a TCP connection within runner.connect_timeout_s: a job service (`--job_endpoint`, not
  `embed`), the Flink master (`--flink_master`), and the worker pool of an EXTERNAL environment
  (`--environment_config`) only where the workers are this machine's (an embedded job service,
  Flink's `[local]`). On a cluster that address is resolved by each TaskManager (a sidecar on the
  pod's own localhost: deploy/flink/, `make flink-up`), so it is not probed from here, and
  `unprobed` says so; a pool that never starts is then caught by the step bound below.
- While it runs, no step may run past runner.step_timeout_s: a Beam stage whose SDK workers
  never start (a pool whose `python` lacks Beam) otherwise waits for them forever, on the
  portable runner's job service (fn_runner/worker_handlers.py) as on Flink's
  (ExternalEnvironmentFactory logs "Still waiting for startup of environment" each minute).
The serving directory is never touched by either: the first stops before any step, the second
stops the process, and a Pusher that was copying leaves only its hidden folder
(components/pusher/executor.py: the version appears by a rename at the end).
"""
from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from typing import Iterator, List, Optional

from core.config import beam_flag

# What each endpoint flag is, for the error line; checked in this order (the job service or
# master before the pool their workers would use).
_ENDPOINTS = {
    "job_endpoint": "no Beam job service answers there: start it or correct the address",
    "flink_master": "no Flink JobManager answers there: start the cluster (`make flink-up`) or "
                    "correct the address (host:REST port)",
    "environment_config": "no Beam worker pool answers there: start it (`make flink-up` prints "
                          "its address) or correct the address",
}


def _external_pool(beam_args: List[str]) -> Optional[str]:
    if (beam_flag(beam_args, "environment_type") or "").upper() != "EXTERNAL":
        return None  # a container image or a process command, not an address
    return beam_flag(beam_args, "environment_config")


def _workers_on_a_cluster(beam_args: List[str]) -> bool:
    """Whether the SDK workers' pool is reached from a cluster's TaskManagers rather than from
    this process: a job service of its own, or a Flink master that is not in-process."""
    job, master = beam_flag(beam_args, "job_endpoint"), beam_flag(beam_args, "flink_master")
    return (job not in (None, "embed")) or (master is not None and not master.startswith("["))


def unprobed(beam_args: List[str]) -> Optional[str]:
    """The line that says the worker pool is not probed from here, or None."""
    pool = _external_pool(beam_args)
    if pool is None or not _workers_on_a_cluster(beam_args):
        return None
    return (f"the worker pool at --environment_config={pool} is resolved on each TaskManager "
            "(its own localhost on a cluster), so it is not probed from here; a pool that never "
            "starts a worker stops the run at runner.step_timeout_s")


def endpoints(beam_args: List[str]) -> List[tuple]:
    """(flag, host, port) of each endpoint beam_args name that must answer before the run."""
    found = []
    for flag in _ENDPOINTS:
        value = beam_flag(beam_args, flag)
        if value is None:
            continue
        if flag == "environment_config" and (
                _external_pool(beam_args) is None or _workers_on_a_cluster(beam_args)):
            continue
        if flag == "job_endpoint" and value == "embed":
            continue
        if flag == "flink_master" and value.startswith("["):  # [local], [auto]
            continue
        address = value.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = address.rpartition(":")
        if port.isdigit():
            found.append((flag, host or "localhost", int(port)))
    return found


def unreachable(beam_args: List[str], timeout_s: float) -> Optional[str]:
    """The error line's text for the first endpoint that does not accept a connection within
    timeout_s, or None when all do."""
    for flag, host, port in endpoints(beam_args):
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as error:
            return (f"runner.beam_args --{flag}={beam_flag(beam_args, flag)}: {_ENDPOINTS[flag]} "
                    f"({type(error).__name__}: {error}; runner.connect_timeout_s = {timeout_s:g})")
    return None


class StepTimedOut(BaseException):
    """Raised in the main thread when a step ran past its bound. A BaseException: no library's
    `except Exception` on the way up may take it for its own failure and go on."""


@contextlib.contextmanager
def step_bound(progress, timeout_s: float, beam_args: List[str]) -> Iterator[None]:
    """Inside the block, a step that runs past timeout_s raises StepTimedOut in the main thread
    (SIGALRM from a watcher thread interrupts the wait for a Beam job); its message names the
    step and what to check. `progress`: core.progress.ProgressHandler (the step now running)."""
    stop = threading.Event()
    expired: List[str] = []

    def raise_it(signum, frame):
        raise StepTimedOut(expired[0])

    def watch() -> None:
        while not stop.wait(0.5):
            step, started = progress.current_step()
            if step is not None and time.monotonic() - started > timeout_s:
                pool = beam_flag(beam_args, "environment_config")
                check = (f"that the worker pool at {pool} starts a `python` with Beam and this "
                         "project (the pool's log)" if pool else "its log")
                expired.append(f"{step} ran past runner.step_timeout_s = {timeout_s:g} s: check "
                               f"{check}")
                signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
                return

    previous = signal.signal(signal.SIGALRM, raise_it)
    watcher = threading.Thread(target=watch, name="step-bound", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        signal.signal(signal.SIGALRM, previous)
