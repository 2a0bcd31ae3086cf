"""One local run at a time per output folder: a second run stops before doing anything."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from core.config import load_config
from core.run_lock import LOCK_FILE, RunInProgress, exclusive_run, refuse_if_busy
from tests.helpers import REPO, run_cli, versions, write_config

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from core.run_lock import exclusive_run
    with exclusive_run(Path(sys.argv[1]), "demo"):
        print("holding", flush=True)
        sys.stdin.read()  # until the test closes stdin
""")


def _holder(folder):
    """A process that holds the folder's lock until its stdin closes."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline() == "holding\n"
    return process


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(RunInProgress) as refused, exclusive_run(tmp_path, "demo"):
            pytest.fail("entered a folder another process holds")
        message = str(refused.value)
        assert f"pid {holder.pid}" in message and str(tmp_path) in message
        assert "did nothing" in message and "runner.output_dir" in message
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # Released when the holder ends: the next run gets in.
    with exclusive_run(tmp_path, "demo"):
        assert f"pid {__import__('os').getpid()}" in (tmp_path / LOCK_FILE).read_text()


def test_released_even_when_the_holder_is_killed(tmp_path):
    holder = _holder(tmp_path)
    holder.kill()
    holder.wait(timeout=30)
    with exclusive_run(tmp_path, "demo"):
        pass


def test_nested_runs_in_one_process_are_refused_too(tmp_path):
    with exclusive_run(tmp_path, "demo"), pytest.raises(RunInProgress), \
            exclusive_run(tmp_path, "demo"):
        pass


def test_cli_stops_with_exit_3_and_touches_nothing(tmp_path):
    config = write_config(tmp_path)
    loaded = load_config(config)
    output_dir = tmp_path / "outputs"
    holder = _holder(output_dir)
    try:
        # Fresh: the CLI refuses before it loads TensorFlow (pipeline/run.py), so a new
        # interpreter costs less than starting this worker's prefork server.
        result = run_cli("pipeline.run", "--runner", "local", "--config", str(config),
                         timeout=120, fresh=True)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.returncode == 3, result.stdout + result.stderr
    assert (f"another run of pipeline '{loaded.pipeline_name}' is using {output_dir}"
            in result.stderr)
    assert f"pid {holder.pid}" in result.stderr
    # Nothing started: no log, no metadata, no pipeline root, no pushed model.
    assert sorted(p.name for p in output_dir.iterdir()) == [LOCK_FILE]
    assert versions(loaded.model_base_path) == []


def test_the_quick_check_refuses_a_held_folder_and_creates_nothing(tmp_path):
    # The CLI asks before TensorFlow loads, so a second run stops at once.
    refuse_if_busy(tmp_path / "never-used", "demo")
    assert not (tmp_path / "never-used").exists()
    holder = _holder(tmp_path)
    try:
        with pytest.raises(RunInProgress, match=f"pid {holder.pid}"):
            refuse_if_busy(tmp_path, "demo")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    refuse_if_busy(tmp_path, "demo")  # free again
    with exclusive_run(tmp_path, "demo"):  # and the quick check did not keep it
        pass
