"""devtools/flink_cluster.py (`make flink-up`): a real Flink 1.18.1 session cluster from the
pinned jars: a JobManager whose REST API lists two TaskManagers and every slot, a Beam worker
pool for them, logs under the folder, and a `down` that stops what `up` started and nothing
else."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request

import pytest

from devtools import flink_cluster
from devtools.service_up import _alive
from tests.helpers import REPO
from tests.test_bounded_failure_e2e import _python_without_beam

pytestmark = pytest.mark.e2e  # three JVMs and a Beam worker pool


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
