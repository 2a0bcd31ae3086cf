"""deploy/systemd: the nightly local run's units pass `systemd-analyze verify` once their
placeholders are filled (a misspelt directive does not), hold the run's contract (02:00, no
catch-up, oneshot, exit 3 not a failure, the notifier on failure, the journal), and the README's
cron line runs the pipeline, notifies on 1 and 2 but not on 3, and logs through logger."""
from __future__ import annotations

import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
SERVICE, TIMER = "tfx-pipeline-nightly.service", "tfx-pipeline-nightly.timer"
NOTIFY = "tfx-pipeline-notify@.service"
RUN = ".venv/bin/python -m pipeline.run --runner local --config configs/pipeline.yaml"


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        pytest.fail("systemd-analyze not found on PATH: run scripts/install_test_tools.sh "
                    "(Debian package systemd)")
    return found


def render(folder: Path, edit=None) -> Path:
    """The units with @CHECKOUT@ a checkout whose .venv/bin/python exists, @USER@ this user."""
    checkout = folder / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        python.symlink_to(sys.executable)
    units = folder / "units"
    units.mkdir(exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    for name in (SERVICE, TIMER, NOTIFY):
        text = (UNITS / name).read_text()
        text = text.replace("@CHECKOUT@", str(checkout)).replace("@USER@", user)
        if edit is not None:
            text = edit(name, text)
        (units / name).write_text(text)
    return units


def verify(units: Path) -> subprocess.CompletedProcess:
    # The notify template checked as the instance OnFailure= starts (%n: the service's name).
    instance = units / f"tfx-pipeline-notify@{SERVICE}"
    shutil.copy(units / NOTIFY, instance)
    return subprocess.run([systemd_analyze(), "verify", str(units / SERVICE), str(units / TIMER),
                           str(instance)], capture_output=True, text=True, timeout=60,
                          cwd=units, env={**os.environ, "SYSTEMD_LOG_TARGET": "console",
                                          "SYSTEMD_LOG_COLOR": "0"})


def accepted(proc: subprocess.CompletedProcess) -> bool:
    # verify only warns about an unknown key ("ignoring") and exits 0: any message is a refusal.
    return proc.returncode == 0 and not (proc.stdout + proc.stderr).strip()


def directives(text: str) -> dict:
    found = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_the_rendered_units_pass_systemd_analyze_verify(tmp_path):
    proc = verify(render(tmp_path))
    assert accepted(proc), proc.stdout + proc.stderr


@pytest.mark.parametrize("name, wrong, right", [
    (TIMER, "Persistant=", "Persistent="),
    (SERVICE, "SuccesExitStatus=", "SuccessExitStatus="),
    (SERVICE, "ExecStrat=", "ExecStart="),
    (NOTIFY, "WorkingDirectry=", "WorkingDirectory="),
])
def test_a_misspelt_directive_is_rejected(tmp_path, name, wrong, right):
    def misspell(unit, text):
        # The directive, not a comment that names it.
        return re.sub(rf"^{right}", wrong, text, count=1, flags=re.M) if unit == name else text

    units = render(tmp_path, misspell)
    assert re.search(rf"^{wrong}", (units / name).read_text(), re.M)
    proc = verify(units)
    assert not accepted(proc)
    assert wrong.rstrip("=") in proc.stdout + proc.stderr or proc.returncode != 0


def test_a_missing_python_is_rejected(tmp_path):
    units = render(tmp_path)
    (tmp_path / "checkout" / ".venv" / "bin" / "python").unlink()
    proc = verify(units)
    assert not accepted(proc) and "is not executable" in proc.stderr


def test_the_timer_fires_at_2_with_no_catch_up():
    timer = directives((UNITS / TIMER).read_text())
    assert timer["OnCalendar"] == ["*-*-* 02:00:00"]
    assert timer["Persistent"] == ["false"]
    assert timer["Unit"] == [SERVICE]
    assert timer["WantedBy"] == ["timers.target"]
    proc = subprocess.run([systemd_analyze(), "calendar", "*-*-* 02:00:00"], capture_output=True,
                          text=True, timeout=30)
    assert "Normalized form: *-*-* 02:00:00" in proc.stdout


def test_the_service_runs_the_pipeline_oneshot_and_posts_its_failure():
    text = (UNITS / SERVICE).read_text()
    service = directives(text)
    assert service["Type"] == ["oneshot"]
    assert service["ExecStart"] == [f"@CHECKOUT@/{RUN}"]
    assert service["WorkingDirectory"] == ["@CHECKOUT@"]
    assert service["OnFailure"] == ["tfx-pipeline-notify@%n.service"]
    # 3 (another run holds the lock: pipeline/run.py) is not a failed night; 1 and 2 are.
    assert service["SuccessExitStatus"] == ["3"]
    assert service["StandardOutput"] == service["StandardError"] == ["journal"]
    for status, meaning in (("1", "the run failed"), ("2", "unusable config"),
                            ("3", "another local run holds runner.output_dir")):
        assert re.search(rf"#\s+{status}\s+{meaning}", text), status
    notify = directives((UNITS / NOTIFY).read_text())
    assert notify["ExecStart"] == ["@CHECKOUT@/.venv/bin/python -m pipeline.notify --config "
                                   "configs/pipeline.yaml --unit %i"]
    assert notify["Type"] == ["oneshot"]


def test_no_path_of_a_machine_is_in_the_units():
    for name in (SERVICE, TIMER, NOTIFY):
        for value in sum(directives((UNITS / name).read_text()).values(), []):
            value = re.sub(r"(file://)?@CHECKOUT@\S*", "", value)
            for path in re.findall(r"(?<![\w@])/[\w./-]+", value):
                assert path.startswith("/etc/default/"), (name, value)


def _fake(path: Path, script: str) -> None:
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("status, notified", [(0, False), (1, True), (2, True), (3, False)])
def test_the_readmes_cron_line_notifies_a_failed_night_only(tmp_path, status, notified):
    readme = (UNITS / "README.md").read_text()
    [line] = [x for x in readme.splitlines() if x.startswith("0 2 * * * ")]
    assert "flock" not in line and "| logger -t tfx-pipeline-nightly" in line
    assert RUN in line
    checkout, bin_dir, calls = tmp_path / "checkout", tmp_path / "bin", tmp_path / "calls"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    _fake(checkout / ".venv" / "bin" / "python",
          f'echo "python $* MONITOR_EXIT_STATUS=$MONITOR_EXIT_STATUS" >> {calls}\n'
          f'echo "error: out of $2"\n'
          f'case "$2" in pipeline.run) exit {status};; esac\n')
    _fake(bin_dir / "logger", f'while read -r l; do echo "logger $* $l" >> {calls}; done\n')
    command = line.removeprefix("0 2 * * * ").replace("/srv/tfx-pipeline", str(checkout))
    subprocess.run(["/bin/sh", "-c", command], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                   check=True, timeout=30)
    log = calls.read_text().splitlines()
    assert log[0] == "python -m pipeline.run --runner local --config configs/pipeline.yaml " \
                     "MONITOR_EXIT_STATUS="
    notify = [x for x in log if x.startswith("python -m pipeline.notify")]
    assert notify == ([f"python -m pipeline.notify --config configs/pipeline.yaml --unit "
                       f"tfx-pipeline-nightly-cron MONITOR_EXIT_STATUS={status}"]
                      if notified else [])
    assert "logger -t tfx-pipeline-nightly error: out of pipeline.run" in log
