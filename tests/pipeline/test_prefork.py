"""devtools/prefork.py: a command forked from the prefork server behaves as `python -m` started
fresh in the same folder and environment (the suite's CLI runs rely on it): argv, sys.path[0],
__name__, the environment (a variable the command was not given is absent), output, exit status
(exit codes, an uncaught exception, SystemExit with a message, a signal), atexit handlers and
threads at exit, the root logger (a preloaded library that logs at import does not swallow the
command's basicConfig), -u (PYTHONUNBUFFERED); a timeout kills its whole process group; a module
edited between commands runs as edited. The server preloads a small library here, to stay fast;
the suite's server preloads TensorFlow and TFX (devtools.prefork.PRELOAD)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

PROBE = '''
import atexit, os, sys, threading, time
print("argv", sys.argv)
print("path0", sys.path[0], "name", __name__, "cwd", os.getcwd())
print("env", os.environ.get("PROBE"), os.environ.get("ONLY_IN_SERVER"), os.getenv("PROBE"))
print("stdin", sys.stdin.read())
print("to stderr", file=sys.stderr)
atexit.register(lambda: print("atexit ran"))
threading.Thread(target=lambda: (time.sleep(0.2), print("thread finished"))).start()
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "exit3":
    sys.exit(3)
if mode == "raise":
    raise ValueError("boom")
if mode == "message":
    sys.exit("a message")
if mode == "abort":
    os.abort()
if mode == "log":
    import logging
    logging.basicConfig(level=logging.INFO)
    logging.info("an info line")
if mode == "killed":
    print("printed before the kill")
    os.kill(os.getpid(), 9)
if mode == "tree":
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(sys.argv[2], "w").write(str(child.pid))
    time.sleep(60)
'''


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Its preload logs a warning at import, as TensorFlow's libraries do."""
    from devtools.prefork import PreforkServer

    library = tmp_path_factory.mktemp("library")
    (library / "logs_at_import.py").write_text("import logging\nlogging.warning('imported')\n")
    env = {**os.environ, "ONLY_IN_SERVER": "server's", "PYTHONPATH": str(library)}
    with PreforkServer(preload=("json", "logs_at_import"), env=env) as started:
        yield started


@pytest.fixture
def probe(tmp_path):
    (tmp_path / "probe_module.py").write_text(PROBE)
    return tmp_path


def fresh(folder, *args, env):
    return subprocess.run([sys.executable, "-m", "probe_module", *args], cwd=folder, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)


def without_runpy_frames(text: str) -> str:
    """A traceback without the frames of runpy itself, which differ by entry (`python -m` runs
    _run_module_as_main, the server run_module)."""
    lines, keep = text.splitlines(), []
    for line in lines:
        if keep and keep[-1].startswith('  File "') and "runpy.py" in keep[-1]:
            keep.pop()
            continue
        keep.append(line)
    return "\n".join(keep)


@pytest.mark.parametrize("mode, code, unbuffered", [
    ("", 0, ""), ("exit3", 3, ""), ("raise", 1, ""), ("message", 1, ""), ("abort", -6, ""),
    ("log", 0, ""), ("killed", -9, ""), ("killed", -9, "1")])
def test_a_forked_command_is_the_fresh_command(server, probe, mode, code, unbuffered):
    from devtools.prefork import run_captured

    env = {**os.environ, "PROBE": "given", "PYTHONUNBUFFERED": unbuffered}
    env.pop("ONLY_IN_SERVER", None)
    args = [mode] if mode else []
    forked = run_captured(server, "probe_module", args, env=env, cwd=str(probe), timeout=60)
    started = fresh(probe, *args, env=env)
    assert started.returncode == code
    assert forked.returncode == code
    assert forked.stdout == started.stdout
    if mode in ("abort", "killed") and not unbuffered:
        assert forked.stdout == ""  # block-buffered, never flushed: lost, as in a fresh one
    else:
        assert "env given None given" in forked.stdout
        assert f"path0 {probe} name __main__ cwd {probe}" in forked.stdout
    assert without_runpy_frames(forked.stderr) == without_runpy_frames(started.stderr)
    if mode == "":
        assert forked.stdout.splitlines()[-2:] == ["thread finished", "atexit ran"]
    if mode == "log":
        assert "INFO:root:an info line" in forked.stderr
    if mode == "killed" and unbuffered:  # -u: printed at once
        assert "printed before the kill" in forked.stdout


def test_a_forked_script_is_the_fresh_script(server, probe, tmp_path):
    """`python PATH` (a script, not -m): sys.path[0] is the script's folder, argv[0] its path."""
    from devtools.prefork import run_captured

    script = str(probe / "probe_module.py")
    env = {**os.environ, "PROBE": "given"}
    forked = run_captured(server, script, ["exit3"], env=env, cwd=str(tmp_path), timeout=60,
                          script=True)
    started = subprocess.run([sys.executable, script, "exit3"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert forked.returncode == started.returncode == 3
    assert forked.stdout == started.stdout
    assert f"argv ['{script}', 'exit3']\npath0 {probe} name __main__ cwd {tmp_path}" in (
        forked.stdout)


@pytest.mark.slow
def test_a_timeout_kills_the_command_and_its_children(server, probe):
    from devtools.prefork import run_captured

    pid_file = probe / "child.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_captured(server, "probe_module", ["tree", str(pid_file)], env=dict(os.environ),
                     cwd=str(probe), timeout=1.5)
    child = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"the command's child {child} outlived the timeout")


def test_a_module_edited_between_commands_runs_as_edited(server, tmp_path):
    from devtools.prefork import run_captured

    module = tmp_path / "edited_module.py"
    for text in ("print('first')", "print('second')"):
        module.write_text(text)
        result = run_captured(server, "edited_module", [], env=dict(os.environ),
                              cwd=str(tmp_path), timeout=60)
        assert result.stdout == text[7:-2] + "\n"


def test_a_server_whose_preload_fails_says_why():
    from devtools.prefork import PreforkError, PreforkServer

    with PreforkServer(preload=("json", "no_such_module_here")) as broken:
        with pytest.raises(PreforkError, match="No module named 'no_such_module_here'"):
            broken.wait_ready(timeout=60)
