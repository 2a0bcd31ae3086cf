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


def test_the_deferred_tfx_packages_init_only_reexports_its_own_submodules():
    """What makes deferring tfx.components safe (TFX 1.16): its __init__ has no effect but the
    names it imports from its submodules. A TFX whose __init__ does more fails here."""
    import ast
    import importlib.util

    from pipeline.lazy_tfx import DEFERRED_PACKAGES

    for package in DEFERRED_PACKAGES:
        top, _, rest = package.partition(".")
        init = Path(importlib.util.find_spec(top).submodule_search_locations[0],
                    *rest.split("."), "__init__.py")
        for node in ast.parse(init.read_text()).body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            reexport = isinstance(node, ast.ImportFrom) and node.module.startswith(package + ".")
            names = isinstance(node, ast.Assign) and [
                t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]
            assert docstring or reexport or names, f"{init}:{node.lineno}: {ast.unparse(node)}"


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
