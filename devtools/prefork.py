"""`python -m MODULE ARGS` started by fork from a Python that has already imported the heavy
libraries, instead of a fresh interpreter each time.

Why: a process of this project spends ~11 s of CPU here importing TensorFlow, TFX, Beam and TFMA
before it does anything (`python -c "import tensorflow, apache_beam, ..."`, with the venv's
bytecode compiled; 27 s without). The test suite starts ~80 such processes (CLI runs, Kubeflow
steps, training replicas). A PreforkServer imports the libraries once; each command is then a
fork of it that runs the module as `python -m` would.

What a command sees, against a fresh `python -m MODULE ARGS` in the same folder and environment
(tests/pipeline/test_prefork.py compares the two):
- the same: sys.argv (argv[0] the module's file), sys.path[0] (the folder) and PYTHONPATH's
  entries, __name__ == "__main__", os.environ (replaced whole, C level included), the folder,
  stdin (/dev/null), stdout / stderr as the interpreter opens them (PYTHONUNBUFFERED honoured),
  a root logger without handlers (a library that logs at import would otherwise make the
  command's logging.basicConfig a no-op), the exit status (an uncaught exception prints its
  traceback and exits 1; SystemExit's code; a signal, as a negative returncode like
  subprocess's), atexit handlers and non-daemon threads at exit, a process group of its own (a
  timeout kills the whole tree);
- not the same: the preloaded modules were imported before the command's environment was set,
  with the server's (TF_USE_LEGACY_KERAS and which Keras loads, _KFP_RUNTIME, TensorFlow's C++
  log level); the hash seed is the server's; warnings a library gave at import went to the
  server's log. A command that depends on those runs fresh, or on a server started with its
  environment. The preloaded modules are libraries only, never this project's, so code edited
  between commands is imported as edited.

Protocol: the server listens on a Unix socket; per command it forks a waiter, which forks the
command, sends {"pid"} and then {"status"} (os.waitpid's). `start` and `run` are
thread-safe; a PreforkClient on the socket starts commands on a server another process owns.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Optional, Sequence

# The libraries every TFX process of this project imports, in order; then what the local runner
# adds (pipeline.run: TFX's runner, and matplotlib for the report's charts, 0.7 s a run). A
# Kubeflow step adds TFX's container entrypoint instead (devtools/kfp_backend/pod.py
# STEP_PRELOAD).
LIBRARIES = ("tensorflow", "tf_keras", "apache_beam", "tensorflow_data_validation",
             "tensorflow_transform", "tensorflow_model_analysis")
PRELOAD = LIBRARIES + ("tfx.orchestration.local.local_dag_runner", "matplotlib.figure",
                       "matplotlib.backends.backend_agg", "matplotlib.backends.backend_svg")

# Runs in the server process (`python -c`), so that the server imports nothing of this project:
# a project module imported there would be reused, stale, by every command.
_SERVER = r'''
import atexit, ctypes, importlib, io, json, logging, os, runpy, select, signal, socket
import subprocess, sys, threading, traceback
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
path, preload = sys.argv[1], [m for m in sys.argv[2].split(",") if m]
# The root logger as a fresh interpreter has it: a library that logs at import adds a handler
# (logging.warning -> basicConfig), which would turn the command's own basicConfig into a no-op.
root_handlers, root_level = list(logging.root.handlers), logging.root.level
for name in preload:
    __import__(name)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(path)
listener.listen(64)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters reap themselves
sys.stdout.write("ready\n")
sys.stdout.flush()

def stream(fd, unbuffered, line_buffering, errors):
    """sys.stdout / sys.stderr as the interpreter opens them at its start."""
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding="utf-8",
                            errors=errors, line_buffering=line_buffering,
                            write_through=unbuffered)

def command(request):
    os.setpgid(0, 0)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    err = out if request["stderr"] is None else os.open(
        request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in {out, err, null}:
        os.close(fd)
    if request.get("mount_namespace"):
        CLONE_NEWNS = 0x00020000
        if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if request.get("setup"):
        subprocess.run(["/bin/sh", "-c", request["setup"], "setup"], check=True,
                       env=request["env"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    logging.root.handlers[:] = root_handlers
    logging.root.setLevel(root_level)
    # What the interpreter reads from the environment at its start: -u, PYTHONPATH.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    inherited = (sys.stdout, sys.stderr)
    sys.stdout = stream(1, unbuffered, os.isatty(1), "strict")
    sys.stderr = stream(2, unbuffered, True, "backslashreplace")  # line-buffered since 3.9
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and os.path.abspath(p) not in sys.path]
    sys.path[0:0] = [os.path.abspath(p) for p in extra]
    script = request.get("script")
    # `python -m M`: the folder first on sys.path; `python PATH`: the script's folder.
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)) if script else os.getcwd())
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    sys.argv = [script or request["module"], *request["args"]]
    code = 0
    try:
        if script:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        code = exit_.code
    except BaseException as error:
        # The traceback as `python -m` prints it: from runpy down, without this frame.
        error.with_traceback(error.__traceback__.tb_next)
        sys.excepthook(type(error), error, error.__traceback__)
        code = 1
    try:
        threading._shutdown()  # as the interpreter does at exit: wait for non-daemon threads
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for opened in (sys.stdout, sys.stderr, *inherited):
        try:
            opened.flush()
        except Exception:
            pass
    os._exit(code & 0xFF)

def wait(connection):
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    reader = connection.makefile("r")
    request = json.loads(reader.readline())
    pid = os.fork()
    if pid == 0:
        connection.close()
        try:
            command(request)
        except BaseException:
            traceback.print_exc()
        os._exit(1)
    connection.sendall((json.dumps({"pid": pid}) + "\n").encode())
    status = os.waitpid(pid, 0)[1]
    connection.sendall((json.dumps({"status": status}) + "\n").encode())

while True:
    ready = select.select([listener, sys.stdin], [], [])[0]
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
        os._exit(0)  # the owner closed our stdin, or died
    if listener in ready:
        connection = listener.accept()[0]
        if os.fork() == 0:
            listener.close()
            try:
                wait(connection)
            finally:
                os._exit(0)
        connection.close()
'''


class PreforkError(RuntimeError):
    """The server did not start (a preload failed: its output says why)."""


class PreforkClient:
    """Starts commands on a running server, by its socket (one this process owns: the
    PreforkServer subclass; or one another process started and owns)."""

    def __init__(self, socket_path: str):
        self.socket_path = str(socket_path)

    def wait_ready(self, timeout: Optional[float] = None) -> None:
        """A server someone else started is ready by the time its socket is handed out."""

    def start(self, module: str, args: Sequence[str], *, env: dict, cwd: str, stdout: str,
              stderr: Optional[str] = None, setup: Optional[str] = None,
              mount_namespace: bool = False, script: bool = False) -> "PreforkProcess":
        """Starts `python -m module *args` (script=True: `python module *args`, module a file's
        path) in `cwd` with exactly `env`, its output appended to the file `stdout` (and
        `stderr`; None: into stdout). `setup`: a /bin/sh script run first in the command's
        process (after `mount_namespace`: in a private mount namespace of its own, as `unshare
        --mount`). The process leads a process group of its own."""
        self.wait_ready()
        request = {"module": None if script else module, "script": str(module) if script else None,
                   "args": list(args), "env": dict(env), "cwd": str(cwd),
                   "stdout": str(stdout), "stderr": None if stderr is None else str(stderr),
                   "setup": setup, "mount_namespace": mount_namespace}
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.socket_path)
        connection.sendall((json.dumps(request) + "\n").encode())
        return PreforkProcess([module, *args], connection)

    def run(self, module: str, args: Sequence[str], *, timeout: Optional[float] = None,
            **options) -> int:
        """start(...) and wait: the returncode as subprocess gives it (-N: signal N); after
        `timeout` seconds kills its process group and raises subprocess.TimeoutExpired."""
        process = self.start(module, args, **options)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill_group()
            raise

    def close(self) -> None:
        """Nothing to end: the server's owner closes it."""

    def __enter__(self) -> "PreforkClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PreforkServer(PreforkClient):
    """A Python (`python`, default this one) that imports `preload` once, with `env`, and then
    runs each `run(module, args, ...)` in a fork of itself; this process owns it."""

    def __init__(self, python: Optional[str] = None, preload: Sequence[str] = PRELOAD,
                 env: Optional[dict] = None, cwd: Optional[str] = None):
        self._folder = tempfile.mkdtemp(prefix="prefork-")
        super().__init__(os.path.join(self._folder, "server.sock"))
        self._log = open(os.path.join(self._folder, "server.log"), "w+")
        self.process = subprocess.Popen(
            [python or sys.executable, "-c", _SERVER, self.socket_path, ",".join(preload)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=dict(os.environ if env is None else env), cwd=cwd or self._folder)
        self._ready = threading.Event()
        self._failed: Optional[str] = None
        threading.Thread(target=self._wait_ready, daemon=True).start()

    def _wait_ready(self) -> None:
        line = self.process.stdout.readline()
        if line.strip() != b"ready":
            self._log.flush()
            self._log.seek(0)
            self._failed = self._log.read()[-3000:]
        self._ready.set()

    def wait_ready(self, timeout: Optional[float] = None) -> None:
        if not self._ready.wait(timeout):
            raise PreforkError(f"the prefork server did not start in {timeout} s")
        if self._failed is not None:
            raise PreforkError(f"the prefork server failed to start:\n{self._failed}")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self._folder, ignore_errors=True)


class PreforkProcess:
    """A command the server started: pid (its process group's id too), poll, wait, returncode,
    as subprocess.Popen has them."""

    def __init__(self, args: list, connection: socket.socket):
        self.args, self._connection = args, connection
        self._reader = connection.makefile("r")
        self.pid = json.loads(self._reader.readline())["pid"]
        self.returncode: Optional[int] = None
        self._done = threading.Event()
        threading.Thread(target=self._wait_status, daemon=True).start()

    def _wait_status(self) -> None:
        try:
            line = self._reader.readline()
            if line:
                self.returncode = os.waitstatus_to_exitcode(json.loads(line)["status"])
            else:  # the waiter died without a status: only if the server was killed
                self.returncode = -9
        finally:
            self._connection.close()
            self._done.set()

    def poll(self) -> Optional[int]:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def kill_group(self) -> None:
        try:
            os.killpg(self.pid, 9)
        except ProcessLookupError:
            pass


def run_captured(server: PreforkClient, module: str, args: Sequence[str], *, env: dict,
                 cwd: str, timeout: Optional[float] = None,
                 script: bool = False) -> subprocess.CompletedProcess:
    """server.run with stdout and stderr captured as text, as subprocess.run(capture_output=True,
    text=True) returns them."""
    with tempfile.TemporaryDirectory(prefix="prefork-out-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        code = server.run(module, args, env=env, cwd=cwd, stdout=str(out), stderr=str(err),
                          timeout=timeout, script=script)
        return subprocess.CompletedProcess(
            [sys.executable, *([] if script else ["-m"]), str(module), *args], code,
            out.read_text(errors="replace") if out.exists() else "",
            err.read_text(errors="replace") if err.exists() else "")
