"""What a step's process used, as the kubelet's cgroup would see it: its memory (the resident
pages of the process and its descendants, as a container's memory.current counts them, less the
page cache) and its CPU seconds.

Not wait4's ru_maxrss: Linux carries a parent's high-water mark across fork and exec into the
child's (fs/exec.c exec_mmap: setmax_mm_hiwater_rss), so a step started by a large process (a
test run that imported TensorFlow) would report that process's size. Instead, while the step
runs: its own VmHWM (exact for it: a fresh mm since its exec) and the sum of its tree's resident
sets, sampled every SAMPLE_S (a child's peak shorter than that can be missed).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import threading
import time

SAMPLE_S = 0.05


@dataclasses.dataclass(frozen=True)
class Usage:
    peak_rss_bytes: int  # the larger of the step's VmHWM and its tree's sampled sum
    cpu_seconds: float   # user + system, the step's and its waited-for children's (wait4)
    wall_seconds: float


def wait_measured(process: subprocess.Popen, timeout_s: int) -> tuple[int, Usage]:
    """Waits for the step (killed after timeout_s, then TimeoutExpired, as subprocess.run's
    timeout does); returns its exit code and Usage."""
    started, peak, done = time.monotonic(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            peak[0] = max(peak[0], _hwm_bytes(process.pid), _tree_rss_bytes(process.pid))

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


def _hwm_bytes(pid: int) -> int:
    """The process's peak resident set since its exec (VmHWM); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status
                        if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _tree_rss_bytes(root: int) -> int:
    """The resident pages of root and its descendants now (/proc/PID/stat rss)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * page
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total
