"""pipeline/kubeflow/ is split by where its code runs (pipeline/kubeflow/README.md): step/ runs in
the step image and imports nothing of client/, which compiles and publishes on the user's
machine (its KFP client, kubectl readings and spec rewriting are no part of a step's start-up)."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

STEP = REPO / "pipeline" / "kubeflow" / "step"
CLIENT = "pipeline.kubeflow.client"


def client_imports(folder: Path) -> list:
    """(file, module) of each import of client/ in folder's modules, at any depth of the code."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [(path.name, name) for name in names
                      if name == CLIENT or name.startswith(CLIENT + ".")]
    return found


def test_the_step_image_s_code_imports_nothing_of_the_client_side():
    assert sorted(p.name for p in STEP.glob("*.py")) and client_imports(STEP) == []


def test_an_import_of_the_client_side_is_found(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from pipeline.kubeflow.client import spec\n")
    (tmp_path / "b.py").write_text("from pipeline.kubeflow import step_records\n")
    assert client_imports(tmp_path) == [("a.py", "pipeline.kubeflow.client"),
                                        ("a.py", "pipeline.kubeflow.client.spec")]
