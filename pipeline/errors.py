"""Turns a failure deep inside TFX or Beam into the one line that says what went wrong."""
from __future__ import annotations

import re

from components.anomaly_gate.component import AnomaliesFoundError
from components.example_gen.csv_reader import DataError
from components.drift_gate.component import DriftError
from components.skew_gate.component import SkewError
from components.trainer.distribution import TrainingSetupError

# Errors of ours whose message is written for the user.
OURS = (DataError, AnomaliesFoundError, DriftError, SkewError, TrainingSetupError)
_BEAM_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$", re.S)
# Beam's portable runner when the job service reports the job ended badly
# (apache_beam/runners/portability/portable_runner.py, PipelineResult.wait_until_finish).
_JOB_FAILED = re.compile(r"Pipeline (\S+?)(?:_[0-9a-f-]{36})? failed in state (\w+): (.*)", re.S)


def _rpc_error(error: BaseException):
    """The gRPC call error in error's chain (Beam's portable runner waiting on its job service),
    or None. grpc is imported only if Beam already did."""
    import sys

    grpc = sys.modules.get("grpc")
    seen, current = set(), error
    while grpc is not None and current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, grpc.RpcError) and hasattr(current, "code"):
            return current
        current = current.__cause__ or current.__context__
    return None


def readable_cause(error: BaseException) -> str:
    """The message of the innermost error of ours in the chain, else the outermost one."""
    seen = set()
    current = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OURS):
            return _BEAM_SUFFIX.sub("", str(current))
        # Beam re-raises a worker's error as a new exception that quotes the original's name.
        for kind in OURS:
            match = re.search(rf"{kind.__name__}: (.*?)(?:\s*\[while running|$)", str(current),
                              re.S)
            if match:
                return match.group(1).strip()
        current = current.__cause__ or current.__context__
    lost = _rpc_error(error)
    if lost is not None:
        return (f"the Beam job service stopped answering mid-run ({lost.code().name}: "
                f"{lost.details()}): check that the job server runner.beam_args --job_endpoint "
                "names is up (make flink-status; its log), then run again")
    failed = _JOB_FAILED.search(str(error))
    if failed:
        job, state, why = failed.groups()
        return (f"the Beam job {job} ended {state} on the runner: {why.strip()[:500]} (check the "
                "job's exceptions where the runner lists its jobs, e.g. Flink's web UI or REST "
                "/jobs/<id>/exceptions, and its workers' logs: the worker pools')")
    return f"{type(error).__name__}: {error}"
