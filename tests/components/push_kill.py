"""Kills a push part-way, at every point between two file copies, and records what is left.

Run as a script (`python -m tests.components.push_kill KIND MODEL WORK`), never imported by the
tests: it imports TensorFlow and TFX once, then forks one child per kill point (the steps' step
server forks the same way, devtools/kfp_backend). The child runs the Pusher executor (KIND:
`atomic`, components/pusher/executor.py, or `tfx`, TFX's own) on the SavedModel at MODEL,
pushing into a base that already serves version 1, and SIGKILLs itself before its Nth file copy
(the hook is on tfx.dsl.io.fileio.copy, which tfx/utils/io_utils.py copy_dir and copy_file call
for every file). Then a child pushes again, unkilled. Prints one JSON object: per kill point, the
base's children after the kill and after the next push, and what the next push logged.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile


def state(base: str) -> dict:
    """Each child of base: whether it holds saved_model.pb."""
    if not os.path.isdir(base):
        return {}
    return {n: os.path.exists(os.path.join(base, n, "saved_model.pb"))
            for n in sorted(os.listdir(base))}


def push(kind: str, model: str, base: str, archive: str, kill_at: int) -> int:
    """Forks a child that pushes, SIGKILLed before its kill_at-th copy (never when < 0); the
    child's status: -9 when killed, its exit code otherwise."""
    log = os.path.join(archive + ".log")
    child = os.fork()
    if child == 0:
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 2)
            import logging

            from tfx.components.pusher import executor as tfx_pusher
            from tfx.dsl.io import fileio
            from tfx.proto import pusher_pb2
            from tfx.types import standard_artifacts
            from tfx.utils import proto_utils

            from components.pusher import executor as atomic

            logging.basicConfig(level=logging.INFO, stream=sys.stderr)
            copies = [0]
            copy = fileio.copy

            def counted(*args, **kwargs):
                if copies[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                copies[0] += 1
                return copy(*args, **kwargs)

            fileio.copy = counted
            trained = standard_artifacts.Model()
            trained.uri = model
            pushed = standard_artifacts.PushedModel()
            pushed.uri = archive
            destination = pusher_pb2.PushDestination(
                filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
            executor = (atomic.Executor if kind == "atomic" else tfx_pusher.Executor)()
            executor.Do({"model": [trained]}, {"pushed_model": [pushed]},
                        {"push_destination": proto_utils.proto_to_json(destination)})
            archived = sorted(os.path.relpath(os.path.join(d, f), archive)
                              for d, _, names in os.walk(archive) for f in names)
            with open(archive + ".json", "w") as f:
                json.dump({"copies": copies[0], "archive": archived,
                           **{k: v.string_value or v.int_value
                              for k, v in pushed.mlmd_artifact.custom_properties.items()}}, f)
            os._exit(0)
        except BaseException:  # noqa: BLE001 (the child reports, never returns)
            import traceback

            traceback.print_exc()
            os._exit(3)
    _, status = os.waitpid(child, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main(kind: str, model: str, work: str) -> None:
    import tensorflow as tf  # noqa: F401  (imported once, before the forks)
    import tfx.components.pusher.executor  # noqa: F401

    import components.pusher.executor  # noqa: F401

    files = sum(len(f) for _, _, f in os.walk(os.path.join(model, "Format-Serving")))
    seed = tempfile.mkdtemp(dir=work)
    shutil.copytree(os.path.join(model, "Format-Serving"), os.path.join(seed, "1"))
    results = {"files": files, "points": []}
    # The atomic push copies each file twice (the serving copy, then TFX's archive copy).
    for kill_at in range(0, 2 * files + 1):
        case = os.path.join(work, f"{kind}-{kill_at}")
        base = os.path.join(case, "serving")
        shutil.copytree(seed, base)
        status = push(kind, model, base, os.path.join(case, "killed"), kill_at)
        after_kill = state(base)
        status_next = push(kind, model, base, os.path.join(case, "next"), -1)
        with open(os.path.join(case, "next.log")) as f:
            removed = [line.strip() for line in f if "did not finish" in line]
        results["points"].append({"kill_at": kill_at, "status": status,
                                  "record": os.path.join(case, "killed.json"),
                                  "after_kill": after_kill, "next_status": status_next,
                                  "after_next": state(base), "removed": removed})
    print(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
