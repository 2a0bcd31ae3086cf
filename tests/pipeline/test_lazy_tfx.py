"""pipeline/lazy_tfx.py: TFX packages registered without running their __init__ (the
Kubeflow step entrypoint's and the trainer replica's start-up)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# TFX is imported in the tests that read it (tests/test_collection.py).


def test_a_deferred_package_imports_its_submodules_and_runs_its_init_on_first_lookup(
        tmp_path, monkeypatch):
    """The start-up saving: a submodule imports without the package's __init__;
    the first name the __init__ defines runs it; a name it does not define stays an error."""
    from pipeline.lazy_tfx import defer_init

    package = tmp_path / "eager"
    (package / "light").mkdir(parents=True)
    (package / "__init__.py").write_text("from eager.heavy import Thing\nRAN = True\n")
    (package / "heavy.py").write_text("Thing = 'heavy'\n")
    (package / "light" / "__init__.py").write_text("")
    (package / "light" / "mod.py").write_text("X = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        defer_init("eager")
        from eager.light import mod

        assert mod.X == 2 and "eager.heavy" not in sys.modules
        import eager

        assert "RAN" not in vars(eager)
        from eager import Thing

        assert Thing == "heavy" and eager.RAN and "eager.heavy" in sys.modules
        with pytest.raises(AttributeError):
            eager.missing  # noqa: B018
    finally:
        for name in [n for n in sys.modules if n == "eager" or n.startswith("eager.")]:
            del sys.modules[name]


def test_from_a_deferred_package_import_a_submodule_leaves_its_init_unrun(tmp_path, monkeypatch):
    """`from package import submodule` (TFX's standard_component_specs: `from
    tensorflow_model_analysis import sdk`) asks the package for the name first; the deferred
    package answers with the submodule, not by running the __init__ (TFMA's imports Beam)."""
    from pipeline.lazy_tfx import defer_init

    package = tmp_path / "eager2"
    package.mkdir()
    (package / "__init__.py").write_text("from eager2.heavy import Thing\nRAN = True\n")
    (package / "heavy.py").write_text("Thing = 'heavy'\n")
    (package / "sdk.py").write_text("X = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        defer_init("eager2")
        from eager2 import sdk

        assert sdk.X == 3 and "eager2.heavy" not in sys.modules
        assert "RAN" not in vars(sys.modules["eager2"])
        from eager2 import Thing

        assert Thing == "heavy" and sys.modules["eager2"].sdk is sdk
    finally:
        for name in [n for n in sys.modules if n == "eager2" or n.startswith("eager2.")]:
            del sys.modules[name]


def _init_statements(body: list) -> list:
    """The statements of an __init__, with a `try:` whose handler only reports an ImportError
    (TFMA 0.47's) opened up."""
    import ast

    found = []
    for node in body:
        if isinstance(node, ast.Try) and all(
                isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers):
            found += _init_statements(node.body)
        else:
            found.append(node)
    return found


def test_the_deferred_packages_init_only_reexports_its_own_submodules():
    """What makes deferring tfx.components (and in a step TFDV and TFMA) safe at the installed
    versions (TFX 1.16, TFDV 1.16, TFMA 0.47): their __init__ has no effect but the names it
    imports from its submodules or its submodules themselves (TFMA's also defines a Jupyter hook
function), and none of those
    names is one of its submodules, which a deferred package imports as such. A version whose
    __init__ does more fails here."""
    import ast
    import importlib.util
    import pkgutil

    from pipeline.lazy_tfx import STEP_DEFERRED_PACKAGES

    for package in STEP_DEFERRED_PACKAGES:
        top, _, rest = package.partition(".")
        folder = Path(importlib.util.find_spec(top).submodule_search_locations[0], *(
            rest.split(".") if rest else []))
        init = folder / "__init__.py"
        submodules = {m.name for m in pkgutil.iter_modules([str(folder)])}
        for node in _init_statements(ast.parse(init.read_text()).body):
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            reexport = isinstance(node, ast.ImportFrom) and node.module.startswith(package + ".")
            names = isinstance(node, ast.Assign) and [
                t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]
            hook = isinstance(node, ast.FunctionDef) and node.name.startswith("_jupyter_")
            # `from package import submodule`: what the deferred package's lookup gives too.
            own = isinstance(node, ast.ImportFrom) and node.module == package and all(
                alias.asname is None and alias.name in submodules for alias in node.names)
            assert docstring or reexport or names or hook or own, \
                f"{init}:{node.lineno}: {ast.unparse(node)}"
            if reexport:
                bound = {alias.asname or alias.name for alias in node.names}
                assert not bound & submodules, f"{init}:{node.lineno} rebinds a submodule"


@pytest.mark.e2e  # a new interpreter that imports TensorFlow and TFX: ~8 s, make test only
def test_a_local_run_imports_only_the_tfx_components_its_pipeline_uses():
    """`python -m pipeline.run --runner local` defers tfx.components (pipeline/run.py): the
    pipeline and TFX's local runner load the components the pipeline holds, not InfraValidator
    with the kubernetes and docker clients, the Tuner with Keras 3, BulkInferrer (1.7-2.3 s of
    an unchanged re-run's 9.1-9.7 s). In a new interpreter: this one has them all already."""
    import json
    import subprocess

    code = """
import json, sys
from core.config import load_config
from pipeline.lazy_tfx import defer_tfx_packages
defer_tfx_packages()
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from pipeline.builder import build_pipeline
build_pipeline(load_config("configs/pipeline.yaml"))
print(json.dumps(sorted(m for m in sys.modules
                       if m.startswith("tfx.components.") and m.count(".") == 2)))
"""
    from tests.helpers import REPO

    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    loaded = {m.rsplit(".", 1)[1] for m in json.loads(result.stdout.strip().splitlines()[-1])}
    assert "infra_validator" not in loaded and "tuner" not in loaded
    assert "bulk_inferrer" not in loaded
    assert {"statistics_gen", "transform", "trainer", "evaluator", "pusher"} <= loaded
