"""The TF Serving stand-in of the endpoint's tests as a process of its own, which a test can
freeze (SIGSTOP: the kernel still accepts connections, nothing answers) or kill and start again
on the same port: `python -m tests.service.tf_stand_in --port N` serves version 1 of
endpoint_env (its canned `retrieve`) and prints one line once it listens.

`StandIn` starts, freezes, thaws, kills and restarts it."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading

from devtools.loopback import free_port, stop_process
from tests.helpers import REPO


class StandIn:
    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self) -> "StandIn":
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.service.tf_stand_in", "--port", str(self.port)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        assert line.startswith("stand-in on "), line + (
            self.process.stderr.read() if self.process.poll() is not None else "")
        return self

    def freeze(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def __enter__(self) -> "StandIn":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.thaw()
            stop_process(self.process, 10)
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()


def main(argv=None) -> int:
    from devtools.tf_serving.rest_stub import RestStub
    from tests.service.endpoint_env import V1_ITEMS, canned_retrieve

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with RestStub("recommender", canned_retrieve(V1_ITEMS), versions=[1],
                  port=args.port) as stub:
        print(f"stand-in on {stub.url}", flush=True)
        stopped.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
