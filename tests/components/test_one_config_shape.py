"""Defaults are written once, in core/config/ (issue 43, item 1): the code that runs in a
pipeline step reads each config key as the config sent it, never `.get(key, default)` or
`getattr(obj, key, default)` with a default of its own (two defaults drift apart: the Kubeflow
Trainer once defaulted training.operator to tfjob where the config says trainjob)."""
from __future__ import annotations

import ast
import typing
from pathlib import Path

from pydantic import BaseModel

from core import config
from tests.helpers import REPO

# What runs inside the pipeline's steps (executors, the code they call, the step image's).
STEP_CODE = ("components", "pipeline/kubeflow", "models/features.py")
# Reads of a key that is also a config field's name, on something that is not the config.
NOT_THE_CONFIG = {
    ("components/run_report/charts.py", "values[s].get('candidate', math.nan)"):
        "TFMA's metrics per model name (candidate, baseline)",
    ("pipeline/kubeflow/client/spec.py", "spec.get('components', {})"): "a compiled KFP spec",
}


def config_keys() -> set:
    """Every field name of the config's sections, nested ones and ReaderSettings included."""
    names, seen = set(), set()

    def walk(model: type) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            names.add(name)
            for kind in (field.annotation, *typing.get_args(field.annotation)):
                for inner in (kind, *typing.get_args(kind)):
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        walk(inner)

    walk(config.PipelineConfig)
    walk(config.ReaderSettings)
    return names


def own_defaults(root: Path, paths, keys: set) -> list:
    """(path, expression) of each read of a config key with a default of its own."""
    found = []
    for top in paths:
        for path in sorted([root / top] if top.endswith(".py") else (root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.Call):
                    continue
                func, args = node.func, node.args
                key = None
                if isinstance(func, ast.Attribute) and func.attr == "get" and len(args) == 2:
                    key = args[0]
                elif isinstance(func, ast.Name) and func.id == "getattr" and len(args) == 3:
                    key = args[1]
                if isinstance(key, ast.Constant) and key.value in keys:
                    found.append((path.relative_to(root).as_posix(), ast.unparse(node)))
    return found


def test_no_step_reads_a_config_key_with_a_default_of_its_own():
    found = own_defaults(REPO, STEP_CODE, config_keys())
    assert [f for f in found if f not in NOT_THE_CONFIG] == [], (
        "read these keys as the config sends them (its defaults are core/config/'s)")
    assert set(NOT_THE_CONFIG) <= set(found), "an allowed read is gone: drop it from the list"


def test_the_check_finds_a_default_of_its_own(tmp_path):
    """Negative control: the reads the Trainer had before item 1."""
    (tmp_path / "step.py").write_text(
        "def f(training, tfjob):\n"
        "    a = training.get('shuffle_buffer', 1024)\n"
        "    b = getattr(tfjob, 'max_restarts', 3)\n"
        "    c = training['seed']\n"
        "    d = training.get('not_a_config_key', 1)\n")
    assert own_defaults(tmp_path, ["step.py"], config_keys()) == [
        ("step.py", "training.get('shuffle_buffer', 1024)"),
        ("step.py", "getattr(tfjob, 'max_restarts', 3)")]
