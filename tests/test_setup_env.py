"""scripts/setup_env.sh takes the one supported Python range from pyproject.toml."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.helpers import REPO


def setup_env(tmp_path, requires_python: str) -> subprocess.CompletedProcess:
    """The script on a copy of the project whose pyproject.toml asks for requires_python."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup_env.sh", tmp_path / "scripts")
    shutil.copy(REPO / "requirements.lock", tmp_path)
    pyproject = (REPO / "pyproject.toml").read_text()
    current = next(line for line in pyproject.splitlines() if line.startswith("requires-python"))
    (tmp_path / "pyproject.toml").write_text(
        pyproject.replace(current, f'requires-python = "{requires_python}"'))
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup_env.sh")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_an_absent_python_is_named_with_the_install_command(tmp_path):
    result = setup_env(tmp_path, ">=3.99,<3.100")  # no such Python anywhere
    assert result.returncode == 1
    assert "needs Python 3.99 (pyproject.toml requires-python '>=3.99,<3.100')" in result.stderr
    assert "pyenv install 3.99" in result.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("requires_python", [">=3.9,<3.11", ">=3.10"])
def test_a_range_of_more_than_one_python_is_refused(tmp_path, requires_python):
    result = setup_env(tmp_path, requires_python)
    assert result.returncode == 1
    assert "must be one minor version" in result.stderr
    assert not (tmp_path / ".venv").exists()


def test_the_venv_holds_the_bytecode_of_its_packages():
    """`make venv` compiles it (uv --compile-bytecode): where PYTHONDONTWRITEBYTECODE is set, as
    on this project's CI machines, no process writes it, and each one compiled TensorFlow, TFX,
    Beam and TFMA from source again (27 s of CPU to import them instead of 11)."""
    import importlib.util
    import os

    for package in ("tensorflow", "tfx", "apache_beam", "tensorflow_model_analysis"):
        source = importlib.util.find_spec(package).origin
        assert os.path.exists(importlib.util.cache_from_source(source)), source
