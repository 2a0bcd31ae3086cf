"""Fingerprints of the code that TFX references by module path and so cannot see itself.

TFX's cache key covers a component's inputs and execution properties, not the Python a module
path points to. Each component that runs our code gets a fingerprint of that code in its
custom_config, so editing the code re-runs the component (and what depends on it).
"""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Iterable

# The CSV reader's code: ExampleGen's executor, the reader it runs, the cell policy the reader
# types with and the sink that writes the examples. Edited, ExampleGen (and the drift gate, which
# reads spans with it) re-run.
READER_MODULES = ("components.example_gen.component", "components.example_gen.csv_reader",
                  "components.example_gen.tfrecord_batches", "core.csv_cells")
# Transform's code: the user's features and the template's entry with the task kinds' label
# encodings (their heads, chosen by core/tasks.py). Edited, Transform and what follows re-run.
TRANSFORM_MODULES = ("models.features", "models.preprocessing", "components.transform",
                     "components.heads", "core.tasks")
# The Trainer's: the user's model code, the template's Trainer runtime and the task kinds' heads.
TRAINER_MODULES = ("models", "components.trainer", "components.heads", "core.tasks")
# The serving baseline's step and the Evaluator's executor, which reads what that step marks and
# prepares the Keras metrics' inputs: in the baseline step's fingerprint (TFX keys the
# Evaluator's own cache by its class path, not its code), so an edit re-runs both.
EVALUATOR_MODULES = ("components.serving_baseline.component", "components.evaluator.component",
                     "components.evaluator.keras_metric_inputs",
                     "components.evaluator.metric_stages")


def _files(module: str) -> Iterable[Path]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"cannot fingerprint module {module}: not importable")
    origin = Path(spec.origin)
    if spec.submodule_search_locations:  # a package: every .py file in it
        return sorted(origin.parent.rglob("*.py"))
    return [origin]


def code_fingerprint(*modules: str) -> str:
    digest = hashlib.sha256()
    for module in modules:
        for path in _files(module):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
