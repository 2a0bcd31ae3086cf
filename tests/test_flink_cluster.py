"""devtools/flink_cluster.py (`make flink-up`): a real Flink 1.18.1 session cluster from the
pinned jars: a JobManager whose REST API lists two TaskManagers and every slot, a Beam worker
pool for them, logs under the folder, a job that survives the loss of a TaskManager by the
restart strategy `up` configures, and a `down` that stops what `up` started and nothing
else."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from devtools import flink_cluster
from devtools.service_up import _alive
from tests.helpers import REPO
from tests.test_bounded_failure_e2e import _python_without_beam

pytestmark = pytest.mark.e2e  # three JVMs and a Beam worker pool


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _job_jar(folder: Path) -> Path:
    """tests/flink_jobs/SlowCount.java compiled against flink-dist, as a runnable jar."""
    classes = folder / "classes"
    flink_dist = next((flink_cluster.JARS / "lib").glob("flink-dist-*.jar"))
    subprocess.run(["javac", "-cp", str(flink_dist), "-d", str(classes),
                    str(REPO / "tests" / "flink_jobs" / "SlowCount.java")], check=True, timeout=120)
    jar = folder / "slowcount.jar"
    subprocess.run(["jar", "cfe", str(jar), "SlowCount", "-C", str(classes), "."], check=True,
                   timeout=60)
    return jar


def _submit(rest: str, jar: Path) -> str:
    """The job's id, uploaded and started through the REST API (/jars/upload, /jars/:id/run)."""
    boundary = "flink-test-boundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"jarfile\"; "
            f"filename=\"{jar.name}\"\r\nContent-Type: application/java-archive\r\n\r\n"
            ).encode() + jar.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
    upload = urllib.request.Request(f"{rest}/jars/upload", data=body, method="POST", headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(upload, timeout=30) as answer:
        jar_id = json.loads(answer.read())["filename"].rsplit("/", 1)[1]
    run = urllib.request.Request(f"{rest}/jars/{jar_id}/run", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(run, timeout=30) as answer:
        return json.loads(answer.read())["jobid"]


def _until(what: str, ready, limit_s: float = 120):
    """ready()'s first truthy answer, polled; fails naming what never came (a bound, not a
    speed check)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        answer = ready()
        if answer:
            return answer
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {limit_s} s")


def _kill_a_taskmanager_while_its_subtask_runs(rest: str, state: dict, folder: Path) -> None:
    """The job's subtasks run on both TaskManagers; taskmanager-2 is killed (SIGKILL) while
    its subtask runs; the fixed-delay restart strategy of the generated flink-conf.yaml
    reschedules the job on taskmanager-1, where it finishes."""
    job = _submit(rest, _job_jar(folder))
    vertex = _get(f"{rest}/jobs/{job}")["vertices"][-1]["id"]

    def running_on() -> list:
        tasks = _get(f"{rest}/jobs/{job}/vertices/{vertex}/taskmanagers")["taskmanagers"]
        return sorted(t["taskmanager-id"] for t in tasks if t["status"] == "RUNNING")

    assert _until("a subtask running on each TaskManager",
                  lambda: running_on() == ["taskmanager-1", "taskmanager-2"])
    os.kill(state["taskmanager-2"]["pid"], signal.SIGKILL)
    final = _until("the job's end", lambda: _get(f"{rest}/jobs/{job}")["state"]
                   in ("FINISHED", "FAILED", "CANCELED") and _get(f"{rest}/jobs/{job}")["state"])
    assert final == "FINISHED"
    history = _get(f"{rest}/jobs/{job}/exceptions")["exceptionHistory"]["entries"]
    assert len(history) == 1 and "taskmanager-2" in json.dumps(history[0])
    [restarts] = _get(f"{rest}/jobs/{job}/metrics?get=numRestarts")
    assert restarts["value"] == "1"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "devtools.flink_cluster", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(bool(flink_cluster.jar_problem()), reason=str(flink_cluster.jar_problem()))
def test_up_starts_two_taskmanagers_and_a_pool_and_down_stops_only_them(tmp_path):
    folder = tmp_path / "flink"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        result = _cli("up", "--folder", str(folder), "--bare-pool")
        assert result.returncode == 0, result.stdout + result.stderr
        state = json.loads((folder / "state.json").read_text())
        assert sorted(state) == ["jobmanager", "taskmanager-1", "taskmanager-2", "worker_pool"]
        assert all(_alive(entry) for entry in state.values())
        rest = state["jobmanager"]["url"]
        with urllib.request.urlopen(f"{rest}/taskmanagers", timeout=5) as answer:
            taskmanagers = json.loads(answer.read())["taskmanagers"]
        assert sorted(t["id"] for t in taskmanagers) == ["taskmanager-1", "taskmanager-2"]
        assert [t["slotsNumber"] for t in taskmanagers] == [2, 2]
        host, port = state["worker_pool"]["url"].split(":")
        socket.create_connection((host, int(port)), timeout=5).close()
        assert f"--environment_config={state['worker_pool']['url']}" in result.stdout
        for name in state:
            assert (folder / "logs" / f"{name}.log").stat().st_size > 0, name
        assert "Successful registration at resource manager" in (
            folder / "logs" / "taskmanager-1.log").read_text()
        assert _cli("status", "--folder", str(folder)).returncode == 0
        _kill_a_taskmanager_while_its_subtask_runs(rest, state, tmp_path)

        stopped = _cli("down", "--folder", str(folder))
        assert stopped.returncode == 0, stopped.stderr
        assert not any(_alive(entry) for entry in state.values())
        assert bystander.poll() is None  # not ours: untouched
        assert _cli("status", "--folder", str(folder)).returncode == 1
    finally:
        _cli("down", "--folder", str(folder))
        bystander.kill()
        bystander.wait()


def test_up_without_the_jars_is_one_error_line_and_starts_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(flink_cluster, "JARS", tmp_path / "no-jars")
    assert flink_cluster.main(["up", "--folder", str(tmp_path / "flink")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: no Flink jars in ") and "make tools" in line
    assert not (tmp_path / "flink" / "state.json").exists()


def test_a_pool_whose_python_lacks_beam_stops_up_before_anything_starts(tmp_path):
    without_beam = _python_without_beam(tmp_path / "no-beam")
    folder = tmp_path / "flink"
    try:
        result = _cli("up", "--folder", str(folder), "--pool-path", str(without_beam))
    finally:
        _cli("down", "--folder", str(folder))  # whatever it started, were the check broken
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line == (f"error: the worker pool's `python` ({without_beam / 'python'}) cannot "
                    "import Beam's SDK worker and this project: put the venv's bin first on "
                    "the pool's PATH")
    assert not (folder / "state.json").exists()
