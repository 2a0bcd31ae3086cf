"""Training tasks in their own processes on loopback: TF_CONFIG per task, free ports, a timeout
on everything, and every process we start ended by its id."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import portpicker

from tests.helpers import REPO, prefork_server


@dataclasses.dataclass(frozen=True)
class PipelineArtifacts:
    config_path: Path
    examples: Path
    transform_graph: Path
    single_device_model: Path

    @property
    def eval_files(self) -> List[str]:
        return sorted(str(p) for p in (self.examples / "Split-eval").glob("*.gz"))


def loopback_cluster(**counts: int) -> Dict[str, List[str]]:
    """e.g. loopback_cluster(worker=2) -> {"worker": ["127.0.0.1:<free>", ...]}"""
    return {job: [f"127.0.0.1:{portpicker.pick_unused_port()}" for _ in range(n)]
            for job, n in counts.items() if n}


def tf_config(cluster: Dict[str, List[str]], task_type: str, index: int) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@dataclasses.dataclass
class Task:
    name: str
    process: object  # devtools/prefork.py PreforkProcess: pid, poll, wait as Popen has them
    log: Path
    result: Path
    weights: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def summary(self) -> dict:
        return json.loads(self.result.read_text())


def start_task(artifacts: PipelineArtifacts, exec_properties: Path, out: Path, name: str,
               tf_config_value: Optional[str]) -> Task:
    """`python -m pipeline.kubeflow.training_job.worker` for one task; its output goes to
    out/<name>.log."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    env.pop("TF_CONFIG", None)
    if tf_config_value is not None:
        env["TF_CONFIG"] = tf_config_value
    task = Task(name, None, out / f"{name}.log", out / f"{name}.json", out / f"{name}.npz")
    task.log.write_text("")
    # A fork of this worker's prefork server (tests/helpers.py): the replica's own process and
    # process group, without ~11 s of CPU importing TensorFlow again.
    task.process = prefork_server().start(
        "pipeline.kubeflow.training_job.worker",
        ["--exec-properties", str(exec_properties), "--examples", str(artifacts.examples),
         "--transform-graph", str(artifacts.transform_graph), "--model", str(out / "model"),
         "--model-run", str(out / "model_run"), "--result-json", str(task.result),
         "--weights-npz", str(task.weights)],
        env=env, cwd=str(REPO), stdout=str(task.log))
    return task


def stop(tasks: Sequence[Task]) -> None:
    """Ends the tasks we started (their own process groups), by id."""
    for task in tasks:
        if task.process.poll() is None:
            task.process.kill_group()
        task.process.wait(timeout=30)


def wait(tasks: Sequence[Task], timeout: float) -> Dict[str, int]:
    """Return codes once all tasks end; on timeout ends them and fails with their logs' tails."""
    deadline = time.monotonic() + timeout
    try:
        for task in tasks:
            left = deadline - time.monotonic()
            try:
                task.process.wait(timeout=max(left, 0.1))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"{task.name} still running after {timeout:.0f}s:\n" + describe(tasks)
                ) from None
    finally:
        stop(tasks)
    return {task.name: task.process.returncode for task in tasks}


def describe(tasks: Sequence[Task], lines: int = 25) -> str:
    return "\n".join(f"--- {t.name} (rc={t.process.poll()}) ---\n"
                     + "\n".join(t.output().splitlines()[-lines:]) for t in tasks)
