"""Fingerprints of the code that TFX references by module path and so cannot see itself.

TFX's cache key covers a component's inputs and execution properties, not the Python a module
path points to. Each component that runs our code gets a fingerprint of that code in its
custom_config, so editing the code re-runs the component (and what depends on it).
"""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Iterable, Tuple

# The CSV reader's code: ExampleGen's folder (executor, reader, the sink that writes the examples)
# and the cell policy the reader types with. Edited, ExampleGen (and the drift gate, which reads
# spans with it) re-run.
READER_MODULES = ("components.example_gen", "core.csv_cells")
# Transform's code: the user's features and the template's entry with the task kinds' label
# encodings (their heads, chosen by core/tasks.py). Edited, Transform and what follows re-run.
TRANSFORM_MODULES = ("models.features", "models.preprocessing", "components.transform",
                     "components.heads", "core.tasks")
# The Trainer's: the user's model code, the template's Trainer runtime and the task kinds' heads.
TRAINER_MODULES = ("models", "components.trainer", "components.heads", "core.tasks")
# The serving baseline's folder and the Evaluator's (its executor reads what that step marks and
# changes TFMA's stages): in the baseline step's fingerprint (TFX keys the Evaluator's own cache by
# its class path, not its code), so an edit to either re-runs both.
EVALUATOR_MODULES = ("components.serving_baseline", "components.evaluator")
# The Pusher's executor (TFX's, its copy atomic) and the version naming it shares with TF Serving.
PUSHER_MODULES = ("components.pusher", "core.storage")


def _files(module: str) -> Iterable[Tuple[str, Path]]:
    """(name, path) of each file of the module; of a package, every .py file in its folder and
    subfolders, named by its path there."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"cannot fingerprint module {module}: not importable")
    origin = Path(spec.origin)
    if spec.submodule_search_locations:
        return [(p.relative_to(origin.parent).as_posix(), p)
                for p in sorted(origin.parent.rglob("*.py"))]
    return [(origin.name, origin)]


def code_fingerprint(*modules: str) -> str:
    """A digest of the code of these modules and packages (a package: every .py file in it)."""
    digest = hashlib.sha256()
    for module in modules:
        for name, path in _files(module):
            digest.update(name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
