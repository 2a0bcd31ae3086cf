"""Each step's own record of this run, in the run's folder of the pipeline root: the exit step
(run_exit.py) reads them to say which step failed, or ran when the run was stopped.

    <run root>/.steps/<task>.json   {"task", "state": "running"|"succeeded"|"failed", "error",
                                     "outputs": {key: {"uri", "metadata"}}}

`error`: the exception as Python prints it (type, message, every line), at most ERROR_CHARS.
`outputs` (a step that succeeded): its output artifacts as its ExecutorOutput names them, each
URI and metadata (the custom properties KFP records in ML Metadata: converter.go), which the
exit step hands the run report's reader as the RunReport step's inputs would be.

Our entrypoint (entrypoint.py) writes `running` before TFX's module runs and `succeeded` or
`failed` (with its error) after. A record left `running` is a step whose pod was
killed: the run was stopped (KFP's Terminate kills running pods: exit_handler.py) or the pod
died (out of memory, a node lost). A step the cache answered runs no pod, so writes nothing.
A step with no output of its own (the gates) writes under its executor-logs output, which the
backend adds from 2.5.0; on 2.4.1 it has no output URI, so no record.

Why not ML Metadata: KFP's store is a gRPC service whose address differs per install and which
the steps' code does not otherwise use; and PipelineTaskFinalStatus (2.14.0+) says only the
guarded DAG's state. The run root is each output URI less its last three parts
(<run root>/<task>/<uuid>/<key>, 2.4.1 to 2.17.0: components/run_report/kfp_paths.py).
"""
from __future__ import annotations

import json
import traceback
from typing import Dict, Iterable, Optional, Tuple

from core import storage

FOLDER = ".steps"
RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"


def place(executor_input: dict) -> Optional[Tuple[str, str]]:
    """(run root, task name) from the first output artifact's URI; None without outputs."""
    for listed in executor_input.get("outputs", {}).get("artifacts", {}).values():
        for artifact in listed.get("artifacts", []):
            parts = artifact.get("uri", "").rstrip("/").rsplit("/", 3)
            if len(parts) == 4:
                return parts[0], parts[1]
    return None


def record_uri(run_root: str, task: str) -> str:
    return f"{run_root}/{FOLDER}/{task}.json"


# What a record keeps of an error: enough for its anomalies, short enough for a chat message.
ERROR_CHARS = 1500


def error_text(error: BaseException) -> str:
    """The exception as its traceback's last part prints it (`Type: message`, every line)."""
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS] + " [...]"


def executor_outputs(gfile, executor_input: dict) -> Dict[str, dict]:
    """key -> {"uri", "metadata"} of each output artifact in the ExecutorOutput TFX wrote at
    outputs.outputFile; {} when it wrote none or it cannot be read."""
    path = executor_input.get("outputs", {}).get("outputFile")
    try:
        with gfile.GFile(path) as f:
            written = json.loads(f.read())
    except Exception:  # noqa: BLE001  (no outputs to report is no reason to fail the step)
        return {}
    return {key: {"uri": listed["artifacts"][0].get("uri"),
                  "metadata": listed["artifacts"][0].get("metadata", {})}
            for key, listed in written.get("artifacts", {}).items() if listed.get("artifacts")}


def write(gfile, run_root: str, task: str, state: str, error: Optional[str] = None,
          outputs: Optional[Dict[str, dict]] = None) -> None:
    """The step's record (gfile: tf.io.gfile, which opens the root's file system)."""
    folder = f"{run_root}/{FOLDER}"
    storage.makedirs(folder, gfile.makedirs)  # an object store has no folders to make
    with gfile.GFile(record_uri(run_root, task), "w") as f:
        f.write(json.dumps({"task": task, "state": state, "error": error,
                            "outputs": outputs or {}}))


def write_quietly(gfile, where: Optional[Tuple[str, str]], state: str,
                  error: Optional[str] = None, outputs: Optional[Dict[str, dict]] = None) -> None:
    """write, where a step has outputs; a record that cannot be written never fails the step
    (the exit step then reads it as not run)."""
    if where is None:
        return
    try:
        write(gfile, *where, state, error, outputs)
    except Exception:  # noqa: BLE001
        print("warning: the step's record was not written:\n" + traceback.format_exc())


def read(gfile, run_root: str, tasks: Iterable[str]) -> Dict[str, dict]:
    """task -> its record, for those of tasks that wrote one."""
    found = {}
    for task in tasks:
        uri = record_uri(run_root, task)
        if gfile.exists(uri):
            with gfile.GFile(uri) as f:
                found[task] = json.loads(f.read())
    return found
