"""A fresh `make flink-up` cluster for a test (devtools/flink_cluster.py), and what the tests
read of it: Flink's jobs by name, its processes, the SDK workers each pool started."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.helpers import REPO


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


class Cluster:
    def __init__(self, folder: Path):
        self.folder = folder
        self.state = json.loads((folder / "state.json").read_text())
        self.rest = self.state["jobmanager"]["url"]
        self.beam_args = folder / "beam_args.json"

    def jobs(self) -> dict:
        """Flink's jobs by name (REST /jobs/overview)."""
        return {job["name"]: job for job in _get(f"{self.rest}/jobs/overview")["jobs"]}

    def kill(self, name: str) -> None:
        entry = self.state[name]
        (os.killpg if entry.get("group") else os.kill)(entry["pid"], signal.SIGKILL)

    def workers_started(self) -> dict:
        """SDK workers each pool started (worker_pool_main logs one line per worker)."""
        return {name: (self.folder / "logs" / f"{name}.log").read_text(errors="replace")
                .count("Starting worker with command")
                for name in self.state if name.startswith("worker-pool")}


def fresh_cluster(tmp_path: Path):
    """`up` in tmp_path/flink, yield the Cluster, then `down` (tests/conftest.py: the `flink`
    fixture)."""
    folder = tmp_path / "flink"
    up = subprocess.run([sys.executable, "-m", "devtools.flink_cluster", "up", "--folder",
                         str(folder)], cwd=REPO, capture_output=True, text=True, timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield Cluster(folder)
    finally:
        down = subprocess.run([sys.executable, "-m", "devtools.flink_cluster", "down",
                               "--folder", str(folder)], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert down.returncode == 0, down.stderr
        assert not (folder / "network.json").exists()


