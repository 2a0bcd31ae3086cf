"""What a step's process used, as the kubelet's cgroup would roughly see it: its memory (the
pages the process and its descendants hold, each counted once, as a container's memory.current
counts them, less the page cache) and its CPU seconds.

Not wait4's ru_maxrss: Linux carries a parent's high-water mark across fork and exec into the
child's (fs/exec.c exec_mmap: setmax_mm_hiwater_rss), so a step started by a large process (a
test run that imported TensorFlow) would report that process's size. Not a sum of resident sets
either: a child the step forks shares its pages, which that sum counts twice (ExampleValidator,
measured: 1,270 MiB against 823). Instead, while the step runs: its own VmHWM (exact for it: a
fresh mm since its exec) and the sum of its tree's proportional set sizes (/proc/PID/
smaps_rollup Pss: a shared page split between its holders), sampled every SAMPLE_S (a child's
peak shorter than that can be missed).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
import time

SAMPLE_S = 0.1


@dataclasses.dataclass(frozen=True)
class Usage:
    peak_rss_bytes: int  # the larger of the step's VmHWM and its tree's sampled Pss sum
    cpu_seconds: float   # user + system, the step's and its waited-for children's (wait4)
    wall_seconds: float


def wait_measured(process: subprocess.Popen, timeout_s: int) -> tuple[int, Usage]:
    """Waits for the step (killed after timeout_s, then TimeoutExpired, as subprocess.run's
    timeout does); returns its exit code and Usage."""
    started, peak, done = time.monotonic(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            peak[0] = max(peak[0], _hwm_bytes(process.pid), _tree_pss_bytes(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    timer = threading.Timer(timeout_s, process.kill)
    timer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        timer.cancel()
        done.set()
        sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits again
    wall = time.monotonic() - started
    if wall >= timeout_s:
        raise subprocess.TimeoutExpired(process.args, timeout_s)
    return process.returncode, Usage(peak[0], usage.ru_utime + usage.ru_stime, wall)


def _proc_field_bytes(path: str, field: str) -> int:
    """A `Field:  N kB` line of a /proc file, in bytes; 0 once the process is gone."""
    try:
        with open(path) as lines:
            return next(int(line.split()[1]) * 1024 for line in lines
                        if line.startswith(field + ":"))
    except (OSError, StopIteration, ValueError):
        return 0


def _hwm_bytes(pid: int) -> int:
    """The process's peak resident set since its exec (VmHWM)."""
    return _proc_field_bytes(f"/proc/{pid}/status", "VmHWM")


def _tree_pss_bytes(root: int) -> int:
    """The proportional set sizes of root and its descendants now, summed."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _pss_bytes(pid)
        stack += children.get(pid, [])
    return total


def _pss_bytes(pid: int) -> int:
    return _proc_field_bytes(f"/proc/{pid}/smaps_rollup", "Pss")
