"""A Beam SDK worker pool on loopback (apache_beam.runners.worker.worker_pool_main): what a
runner with `--environment_type=EXTERNAL --environment_config=HOST:PORT` asks to start its
Python workers, each a `python -c ...SdkHarness(...).run()` of the pool's PATH and environment.

The workers must import the project (its functions are pickled by reference) and Beam from that
`python`: the pool runs the venv's, from the repository root. `bare=True` gives it PATH alone
(the venv's bin first), no variable of ours: what a user's or a cluster's pool may have.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional, Sequence

from devtools.loopback import (REPO, ServiceUnavailable, free_port, stop_process,
                               wait_until_answering)

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def pool_environment(bare: bool, path: Optional[str] = None) -> dict:
    """The pool's environment: the venv's bin first on PATH; bare: nothing else; path: that
    PATH alone (a pool whose `python` is another one)."""
    if path is not None:
        return {"PATH": path}
    if bare:
        return {"PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.defpath}"}
    return {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}"}


# What a worker's `python` must find: Beam's SDK harness and the project's packages (found, not
# imported: importing components loads TensorFlow).
_WORKER_CAN_START = ("import importlib.util, sys; import apache_beam.runners.worker.sdk_worker; "
                     "sys.exit(importlib.util.find_spec('components') is None)")


def worker_problem(env: dict) -> Optional[str]:
    """Why a worker of a pool with this environment could not start, or None: the pool itself
    starts and answers either way, and Beam then waits for the worker forever."""
    python = shutil.which("python", path=env.get("PATH", ""))
    if python is None:
        return f"no `python` on the worker pool's PATH ({env.get('PATH', '')})"
    check = subprocess.run([python, "-c", _WORKER_CAN_START], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=120)
    if check.returncode != 0:
        return (f"the worker pool's `python` ({python}) cannot import Beam's SDK worker and "
                "this project: put the venv's bin first on the pool's PATH")
    return None


def start_pool(port: int, log_path: Path, env: dict, prefix: Sequence[str] = (),
               check: bool = True) -> subprocess.Popen:
    """Starts the pool on port with this environment (pool_environment), its output in log_path;
    returns once it listens. prefix: what runs it elsewhere (devtools/netns.py: a TaskManager's
    namespace, whose localhost is the pool's). check: first make sure its workers could start
    (worker_problem), else raise ServiceUnavailable naming the `python` it found."""
    problem = worker_problem(env) if check else None
    if problem:
        raise ServiceUnavailable(problem)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    process = subprocess.Popen(
        [*prefix, str(Path(sys.prefix) / "bin" / "python"), "-m",
         "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    wait_until_answering(process, lambda: listening(process.pid, port),
                         f"the Beam worker pool on port {port}",
                         lambda: log_path.read_text(errors="replace"), START_TIMEOUT_S,
                         STOP_TIMEOUT_S, poll_s=0.2)
    return process


def listening(pid: int, port: int) -> bool:
    """Whether a socket listens on port in pid's network namespace (/proc/PID/net/tcp{,6}: the
    namespace's own table, read without entering it)."""
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


@contextlib.contextmanager
def worker_pool(log_path: Path, bare: bool = False, path: Optional[str] = None,
                check: bool = True) -> Iterator[str]:
    """A pool for the block; yields its `--environment_config` (HOST:PORT). check=False: a
    pool meant to fail its workers (tests/test_bounded_failure_e2e.py)."""
    port = free_port()
    process = start_pool(port, log_path, pool_environment(bare, path), check=check)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_pool(process)


def stop_pool(process: subprocess.Popen) -> None:
    """Stops the pool and the workers it started: its own session's process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    stop_process(process, STOP_TIMEOUT_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def portable_beam_args(environment_config: str) -> list:
    """Beam's portable runner with its in-process job service (`--job_endpoint=embed`) and
    workers from the pool: the SDK side of a Flink night without Flink."""
    return ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL",
            f"--environment_config={environment_config}"]
