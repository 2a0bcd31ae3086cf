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
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Optional

from devtools.loopback import REPO, free_port, stop_process, wait_until_answering

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


def start_pool(port: int, log_path: Path, bare: bool = False,
               path: Optional[str] = None) -> subprocess.Popen:
    """Starts the pool on 127.0.0.1:port, its output in log_path; returns once it listens."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    process = subprocess.Popen(
        [str(Path(sys.prefix) / "bin" / "python"), "-m",
         "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"],
        cwd=REPO, env=pool_environment(bare, path), stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()

    def answers() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    wait_until_answering(process, answers, f"the Beam worker pool on port {port}",
                         lambda: log_path.read_text(errors="replace"), START_TIMEOUT_S,
                         STOP_TIMEOUT_S, poll_s=0.2)
    return process


@contextlib.contextmanager
def worker_pool(log_path: Path, bare: bool = False,
                path: Optional[str] = None) -> Iterator[str]:
    """A pool for the block; yields its `--environment_config` (HOST:PORT)."""
    port = free_port()
    process = start_pool(port, log_path, bare, path)
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
