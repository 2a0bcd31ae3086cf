"""scripts/setup_env.sh takes the one supported Python range from pyproject.toml."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import REPO


def setup_env(tmp_path, requires_python: str, env: dict | None = None
              ) -> subprocess.CompletedProcess:
    """The script on a copy of the project whose pyproject.toml asks for requires_python."""
    (tmp_path / "scripts").mkdir()
    for script in ("setup_env.sh", "compile_bytecode.py"):
        shutil.copy(REPO / "scripts" / script, tmp_path / "scripts")
    shutil.copy(REPO / "requirements.lock", tmp_path)
    pyproject = (REPO / "pyproject.toml").read_text()
    current = next(line for line in pyproject.splitlines() if line.startswith("requires-python"))
    (tmp_path / "pyproject.toml").write_text(
        pyproject.replace(current, f'requires-python = "{requires_python}"'))
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup_env.sh")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env)


def test_an_absent_python_is_named_with_the_install_command(tmp_path):
    result = setup_env(tmp_path, ">=3.99,<3.100")  # no such Python anywhere
    assert result.returncode == 1
    assert "needs Python 3.99 (pyproject.toml requires-python '>=3.99,<3.100')" in result.stderr
    assert "pyenv install 3.99" in result.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("minor, said", [(10, True), (9, False)])
def test_setting_up_says_once_that_python_3_10_is_past_its_end_of_life(tmp_path, minor, said):
    """A python3.N on PATH that answers the version checks and fails to make the venv: the note
    is said before any package is installed, for 3.10 only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / f"python3.{minor}"
    fake.write_text(f'#!/bin/bash\ncase "$1" in\n  --version) echo "Python 3.{minor}.13";;\n'
                    '  -c) exit 0;;\n  *) exit 9;;\nesac\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = setup_env(tmp_path, f">=3.{minor},<3.{minor + 1}", env)
    assert result.returncode == 9, result.stdout + result.stderr
    assert f"setting up .venv with Python 3.{minor}.13" in result.stdout
    assert ("Python 3.10 is past its end of life" in result.stdout) is said, result.stdout


@pytest.mark.parametrize("requires_python", [">=3.9,<3.11", ">=3.10"])
def test_a_range_of_more_than_one_python_is_refused(tmp_path, requires_python):
    result = setup_env(tmp_path, requires_python)
    assert result.returncode == 1
    assert "must be one minor version" in result.stderr
    assert not (tmp_path / ".venv").exists()


# It imports TFMA, TFT and TFX in this process (~6 s where nothing loaded them yet): a check of the
# built venv that runs with the end-to-end tests in `make test`, not in `make test-fast`.
@pytest.mark.e2e
def test_the_venv_holds_the_bytecode_of_what_the_pipeline_imports():
    """`make venv` compiles it (scripts/compile_bytecode.py): where PYTHONDONTWRITEBYTECODE is
    set, as on this project's CI machines, no process writes it, and each one compiled
    TensorFlow, TFX, Beam and TFMA from source again (27 s of CPU to import them instead of 11).
    What the script skips must be what nothing imports: every module these imports load from
    site-packages has its .pyc."""
    import importlib.util
    import sys
    import sysconfig

    import tensorflow_model_analysis  # noqa: F401  (TF, Beam, IPython, nltk, ... with it)
    import tensorflow_transform  # noqa: F401
    import tfx.v1  # noqa: F401

    site_packages = sysconfig.get_path("purelib")
    loaded = [m.__file__ for m in list(sys.modules.values())
              if getattr(m, "__file__", None) and m.__file__.startswith(site_packages)
              and m.__file__.endswith(".py")]
    assert len(loaded) > 3000
    missing = [f for f in loaded if not os.path.exists(importlib.util.cache_from_source(f))]
    assert not missing, missing[:20]
