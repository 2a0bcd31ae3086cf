"""One local run at a time per output folder (pipeline root, metadata store, logs).

Two runs started together on one folder would both train and both push, and each one's summary
would read the other's executions from the shared metadata store. The second run instead stops
before any component runs, naming the run that holds the folder. An advisory fcntl lock on a file
in the folder: the kernel drops it when the holding process ends, however it ends (a crash or
kill -9 leaves no stale lock to clean up). It holds on one machine's local file system, which is
where the local runner keeps its SQLite metadata store anyway. It does nothing for Kubeflow runs,
and KFP does not serialize them either: max_concurrency=1 holds within one recurring run only, so
a manual run or a second schedule overlaps the nightly one. There the run lease in the
pipeline's bucket (core/run_lease.py) lets one run at a time push.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

LOCK_FILE = ".run.lock"


class RunInProgress(RuntimeError):
    """Another run holds the output folder; the message names it and what to do."""


def _refusal(output_dir: Path, pipeline_name: str, fd: int) -> RunInProgress:
    holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
    return RunInProgress(
        f"another run of pipeline '{pipeline_name}' is using {output_dir} ({holder}); "
        "this run did nothing. Wait for that run to finish and start again, or give this "
        "one its own runner.output_dir")


def refuse_if_busy(output_dir: Path, pipeline_name: str) -> None:
    """Raises RunInProgress when a run holds the folder now; creates nothing. The CLI asks
    before its slow start (TensorFlow), so that a second run stops at once; exclusive_run
    still decides."""
    try:
        fd = os.open(output_dir / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _refusal(output_dir, pipeline_name, fd) from None
    finally:
        os.close(fd)  # and with it the lock, if this took it


@contextlib.contextmanager
def exclusive_run(output_dir: Path, pipeline_name: str) -> Iterator[None]:
    """Holds the folder's lock for the block; raises RunInProgress when another process has it."""
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / LOCK_FILE
    # Opened without truncating: the holder's note must survive a contender's open.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _refusal(output_dir, pipeline_name, fd) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
                  .encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


__all__ = ["LOCK_FILE", "RunInProgress", "exclusive_run", "refuse_if_busy"]
