"""Where code lives (README: Layout): models/ is the user's and imports nothing of the template;
components/ never imports the pipeline that builds it, but for the modules ALLOWED_UPWARD names."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

USER_FILES = {"__init__.py", "features.py", "preprocessing.py", "model.py"}
# Leaf modules: pipeline.storage (the file systems a process's paths need), pipeline.csv_cells
# (the one TF-free cell policy of the reader and the predict client), pipeline.nodes (the node
# ids, named once). The Kubeflow report step renders with the CLI's own report package from the
# typed config: one report code for both.
ALLOWED_UPWARD = {"pipeline.storage", "pipeline.csv_cells", "pipeline.config", "pipeline.report",
                  "pipeline.nodes"}


def imported(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            # `from pipeline import nodes` imports pipeline.nodes; `from pipeline.config
            # import X` imports from pipeline.config.
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def allowed(name: str) -> bool:
    return name in ALLOWED_UPWARD or name.rsplit(".", 1)[0] in ALLOWED_UPWARD


def top_level(names: set) -> set:
    return {name.split(".")[0] for name in names}


def test_models_holds_only_what_a_user_edits_and_imports_nothing_of_the_template():
    assert {p.name for p in (REPO / "models").glob("*.py")} == USER_FILES
    for path in (REPO / "models").glob("*.py"):
        assert top_level(imported(path)) & {"pipeline", "components"} == set(), path


def test_components_do_not_import_the_pipeline_that_builds_them():
    for path in (REPO / "components").rglob("*.py"):
        upward = {n for n in imported(path) if n.split(".")[0] == "pipeline"}
        assert all(map(allowed, upward)), (path, upward)


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "model.py"
    bad.write_text("from components.trainer import training\nimport pipeline.config\n")
    assert top_level(imported(bad)) == {"components", "pipeline"}
    module_import = tmp_path / "executor.py"
    module_import.write_text("from pipeline import nodes, run\nfrom pipeline.config import X\n")
    assert not all(map(allowed, imported(module_import)))
    assert {n for n in imported(module_import) if not allowed(n)} == {"pipeline.run"}
