"""Turns a failure deep inside TFX or Beam into the one line that says what went wrong."""
from __future__ import annotations

import re

from components.anomaly_gate.component import AnomaliesFoundError
from components.example_gen.csv_reader import DataError
from components.drift_gate.component import DriftError
from components.trainer.distribution import TrainingSetupError

# Errors of ours whose message is written for the user.
OURS = (DataError, AnomaliesFoundError, DriftError, TrainingSetupError)
_BEAM_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$", re.S)


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
    return f"{type(error).__name__}: {error}"
