"""Collecting the tests imports no TensorFlow (tests/README.md): every pytest-xdist worker collects
every test module, the end-to-end ones `make test-fast` then deselects included, so a module that
imports TensorFlow, TFX, Beam, kfp or the Kubernetes client at its top costs each worker seconds
before its first test. Test modules import them inside the tests and helpers that use them."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

# Packages that take seconds to import (TensorFlow alone ~9 s of CPU; with TFX, TFMA and Beam
# ~20 s), measured with `python -X importtime`.
SLOW_TO_IMPORT = ("tensorflow", "tf_keras", "tfx", "apache_beam", "tensorflow_transform",
                  "tensorflow_model_analysis", "tensorflow_data_validation", "kfp", "kubernetes",
                  "jsonschema")  # 2.4 s: rfc3987_syntax builds its grammar at import

# Runs pytest's collection in a fresh interpreter and prints, after each collected module, the
# slow packages it brought in first.
COLLECT = """
import sys
import pytest

slow, path = set(sys.argv[1].split(",")), sys.argv[2]
seen = set()

class Watch:
    def pytest_collectreport(self, report):
        new = {m.split(".")[0] for m in list(sys.modules)} & slow - seen
        if new:
            print(f"{report.nodeid}: imports {', '.join(sorted(new))} at collection")
            seen.update(new)

code = pytest.main(["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", path],
                   plugins=[Watch()])
sys.exit(0 if code in (0, 5) else code)
"""


def slow_imports_at_collection(path, slow=SLOW_TO_IMPORT) -> list:
    """The collected modules under path that import a slow package at import time."""
    result = subprocess.run([sys.executable, "-c", COLLECT, ",".join(slow), str(path)],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [line for line in result.stdout.splitlines() if " at collection" in line]


@pytest.mark.slow
def test_collecting_the_tests_imports_nothing_slow():
    assert slow_imports_at_collection(REPO / "tests") == []


def test_the_check_names_a_module_that_imports_a_slow_package_at_its_top(tmp_path):
    """Negative control, on a stand-in slow package (importing TensorFlow here would cost the
    seconds the rule saves)."""
    (tmp_path / "slow_package.py").write_text("")
    (tmp_path / "test_lazy.py").write_text(
        "def test_lazy():\n    import slow_package  # noqa: F401\n")
    (tmp_path / "test_eager.py").write_text(
        "import slow_package  # noqa: F401\n\n\ndef test_eager():\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n")
    # Node ids are relative to pytest's rootdir, which depends on where tmp_path lies.
    found = slow_imports_at_collection(tmp_path, ("slow_package",))
    assert [line.rsplit("/", 1)[-1] for line in found] == [
        "test_eager.py: imports slow_package at collection"]
