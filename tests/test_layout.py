"""Where code lives (README: Layout). Product code is layered, and imports point down only:

    core        the base: imports no TensorFlow, TFX or Beam, and nothing of the template above it
    models      the user's: imports nothing of the template
    components  one folder per custom component, and the Trainer runtime: core and models only
    service     the recommender service (updater, endpoint): core only, and TF-free like it
    pipeline    the app, in three floors: what builds and reports a run (builder, report,
                errors); the Kubeflow runner; the entry points (run, init, doctor, ...)

Dev tools (devtools/) sit above the product and are not shipped (tests/test_wheel.py). Every
import counts, also one inside a function: a late import is still a dependency. No import cycle
anywhere in product code.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

from tests.helpers import REPO

PRODUCT = ("core", "models", "components", "pipeline", "service")
USER_FILES = {"__init__.py", "features.py", "preprocessing.py", "model.py", "two_tower.py"}
# Libraries the base never imports: loading a config or a CSV cell stays fast and TF-free.
HEAVY = {"tensorflow", "tf_keras", "keras", "tfx", "apache_beam", "tensorflow_transform",
         "tensorflow_model_analysis", "tensorflow_data_validation", "tensorflow_io",
         "ml_metadata", "kfp"}
# Floors, bottom first; a module's floor is that of the longest prefix listed.
FLOORS = {"core": 0, "models": 0, "components": 1, "service": 1,
          "pipeline.builder": 2, "pipeline.errors": 2, "pipeline.report": 2, "pipeline": 2,
          "pipeline.kubeflow": 3,
          "pipeline.run": 4, "pipeline.init": 4, "pipeline.doctor": 4, "pipeline.schema": 4,
          "pipeline.predict": 4}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str) -> Set[str]:
    """Every module path path imports, at any depth, relative imports resolved."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def product_graph(root: Path) -> Dict[str, Set[str]]:
    """module -> the product modules it imports (a `from pkg import name` that names no module
    counts as an import of pkg)."""
    files = {module_name(p, root): p for top in PRODUCT for p in (root / top).rglob("*.py")}
    graph = {}
    for name, path in files.items():
        graph[name] = {m for m in imports(path, name) if m in files and m != name}
    return graph


def floor(name: str) -> int:
    best = max((p for p in FLOORS if name == p or name.startswith(p + ".")), key=len)
    return FLOORS[best]


def backward_imports(graph: Dict[str, Set[str]]) -> Set[tuple]:
    return {(a, b) for a, targets in graph.items() for b in targets
            if floor(b) > floor(a) or (a.split(".")[0] == "models" and b.split(".")[0] != "models")
            or (a.split(".")[0] == "core" and b.split(".")[0] != "core")
            or (a.split(".")[0] == "service" and b.split(".")[0] not in ("core", "service"))}


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, result = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def heavy_imports_of_the_base(root: Path) -> Set[tuple]:
    """The base's and the service's imports of TensorFlow, TFX, Beam and the like."""
    return {(module_name(p, root), m) for top in ("core", "service")
            for p in (root / top).rglob("*.py")
            for m in imports(p, module_name(p, root)) if m.split(".")[0] in HEAVY}


def test_no_import_cycle_in_product_code():
    assert cycles(product_graph(REPO)) == []


def test_every_import_points_down():
    assert backward_imports(product_graph(REPO)) == set()


def test_the_base_imports_no_tensorflow_tfx_or_beam():
    assert heavy_imports_of_the_base(REPO) == set()


def test_models_holds_only_what_a_user_edits():
    assert {p.name for p in (REPO / "models").glob("*.py")} == USER_FILES


def _tree(root: Path, files: Dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for top in PRODUCT:
        (root / top).mkdir(exist_ok=True)
    return root


def test_the_checks_see_a_cycle_a_backward_import_and_tensorflow_in_the_base(tmp_path):
    root = _tree(tmp_path, {
        "core/__init__.py": "", "core/config.py": "import tensorflow as tf\n",
        "components/__init__.py": "", "components/gate.py": "from pipeline import builder\n",
        "models/__init__.py": "", "models/model.py": "def f():\n    import core.config\n",
        "pipeline/__init__.py": "", "pipeline/builder.py": "from components import gate\n",
        "pipeline/kubeflow/__init__.py": "",
        "pipeline/kubeflow/client/compiler.py": "from pipeline.builder import x\n",
        "pipeline/summary.py": "from pipeline.report import facts\n",
        "pipeline/report/__init__.py": "", "pipeline/report/facts.py": "from ..summary import y\n",
    })
    graph = product_graph(root)
    assert cycles(graph) == [["components.gate", "pipeline.builder"],
                             ["pipeline.report.facts", "pipeline.summary"]]
    assert backward_imports(graph) == {("components.gate", "pipeline.builder"),
                                       ("components.gate", "pipeline"),
                                       ("models.model", "core.config")}
    assert heavy_imports_of_the_base(root) == {("core.config", "tensorflow")}
