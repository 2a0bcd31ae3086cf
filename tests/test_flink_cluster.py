"""devtools/flink_cluster.py (`make flink-up`): a real Flink 1.16.3 session cluster from the
pinned jars: a JobManager whose REST API lists two TaskManagers and every slot, each TaskManager
with its own Beam worker pool in its own network namespace, Beam's job server, logs under the
folder, a job that survives the loss of a TaskManager by the restart strategy `up` configures,
and a `down` that stops what `up` started, removes its namespaces, and touches nothing else.
The nights on it: tests/test_flink_nights.py."""
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

from devtools import flink_cluster, netns
from devtools.beam_worker_pool import listening
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


def _namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


@pytest.mark.skipif(bool(flink_cluster.jar_problem() or netns.available()),
                    reason=str(flink_cluster.jar_problem() or netns.available()))
def test_up_starts_a_pod_per_taskmanager_and_down_stops_and_removes_only_them(tmp_path):
    folder = tmp_path / "flink"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        result = _cli("up", "--folder", str(folder))
        assert result.returncode == 0, result.stdout + result.stderr
        state = json.loads((folder / "state.json").read_text())
        assert sorted(state) == ["job-server", "jobmanager", "taskmanager-1", "taskmanager-2",
                                 "worker-pool-1", "worker-pool-2"]
        assert all(_alive(entry) for entry in state.values())
        rest = state["jobmanager"]["url"]
        with urllib.request.urlopen(f"{rest}/taskmanagers", timeout=5) as answer:
            taskmanagers = json.loads(answer.read())["taskmanagers"]
        assert sorted(t["id"] for t in taskmanagers) == ["taskmanager-1", "taskmanager-2"]
        assert [t["slotsNumber"] for t in taskmanagers] == [2, 2]
        # A pod each: every TaskManager shares a namespace with its own pool only, which
        # listens on that namespace's port 50000; the machine's own port 50000 is not it.
        pods = [_namespace(state[f"taskmanager-{n}"]["pid"]) for n in (1, 2)]
        assert pods == [_namespace(state[f"worker-pool-{n}"]["pid"]) for n in (1, 2)]
        assert len({*pods, _namespace(state["jobmanager"]["pid"]), _namespace(os.getpid())}) == 4
        assert all(listening(state[f"worker-pool-{n}"]["pid"], 50000) for n in (1, 2))
        assert not listening(os.getpid(), 50000)
        # Bare, as a sidecar: PATH and HOME, nothing of the suite's environment.
        pool_env = (Path(f"/proc/{state['worker-pool-1']['pid']}/environ").read_bytes()
                    .rstrip(b"\0").split(b"\0"))
        assert sorted(v.split(b"=", 1)[0] for v in pool_env) == [b"HOME", b"PATH"]
        args = json.loads((folder / "beam_args.json").read_text())
        assert "--environment_config=localhost:50000" in args and json.dumps(args) in result.stdout
        job_server = state["job-server"]["url"].split(":")
        socket.create_connection((job_server[0], int(job_server[1])), timeout=5).close()
        for name in state:
            assert (folder / "logs" / f"{name}.log").stat().st_size > 0, name
        assert "Successful registration at resource manager" in (
            folder / "logs" / "taskmanager-1.log").read_text()
        assert _cli("status", "--folder", str(folder)).returncode == 0
        network = json.loads((folder / "network.json").read_text())
        _kill_a_taskmanager_while_its_subtask_runs(rest, state, tmp_path)
        # Flink's scratch (each process's working folder, its jobs' jars in the blob cache) is
        # the cluster's own, not the machine's /tmp, where it piled up run after run.
        assert (folder / "tmp" / "tm_taskmanager-1" / "blobStorage").is_dir()

        stopped = _cli("down", "--folder", str(folder))
        assert stopped.returncode == 0, stopped.stderr
        assert not any(_alive(entry) for entry in state.values())
        assert bystander.poll() is None  # not ours: untouched
        assert _cli("status", "--folder", str(folder)).returncode == 1
        assert not (folder / "tmp").exists() and (folder / "logs").is_dir()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert not any(netns.Network(**network).namespace(p) in left for p in network["pods"])
        assert netns.Network(**network).bridge not in subprocess.run(
            ["ip", "-o", "link"], capture_output=True, text=True).stdout
    finally:
        _cli("down", "--folder", str(folder))
        bystander.kill()
        bystander.wait()


def test_two_taskmanagers_without_namespaces_are_refused_naming_the_way_out(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(flink_cluster, "jar_problem", lambda: None)
    monkeypatch.setattr(flink_cluster.netns, "available", lambda: "network namespaces need root")
    assert flink_cluster.main(["up", "--folder", str(tmp_path / "flink")]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("error: 2 TaskManagers need a network namespace each for their worker "
                    "pools, and network namespaces need root: run as root with iproute2, or "
                    "`--taskmanagers 1`")
    assert not (tmp_path / "flink" / "state.json").exists()


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
