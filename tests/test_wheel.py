"""What ships: the wheel holds the product (core/, components/, models/, pipeline/, service/), the
Kubeflow step image what a pipeline step needs (all but service/), and neither a dev tool
(devtools/, tests/, bench/, scripts/), which the suite runs from the checkout (README: Layout)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Iterable, List

import pytest

from tests.helpers import REPO

PRODUCT = ("core", "components", "models", "pipeline", "service")
DEV_TOOLS = ("devtools", "tests", "bench", "scripts")
# What the step image copies besides the product: the build's inputs and the reviewed schema.
IMAGE_EXTRAS = {"pyproject.toml", "README.md", "requirements-image.lock", "configs"}


def _checkout_files(root: Path) -> List[str]:
    """The checkout's files as a clone has them: tracked, or new and not ignored."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=root, capture_output=True, text=True, check=True).stdout
    return sorted(p for p in listed.split("\0") if p and (root / p).is_file())


def wheel_problems(names: Iterable[str], checkout: Iterable[str]) -> List[str]:
    """Why a wheel with these entries is not the product: a top-level folder besides the four
    and the wheel's metadata, or a product module of the checkout left out."""
    names = set(names)
    problems = sorted({f"ships {n.split('/')[0]}/" for n in names
                       if n.split("/")[0] not in PRODUCT and ".dist-info/" not in n})
    problems += [f"leaves out {p}" for p in checkout
                 if p.split("/")[0] in PRODUCT and p.endswith(".py") and p not in names]
    return problems


@pytest.mark.slow
def test_the_wheel_holds_the_product_and_no_dev_tool(tmp_path):
    # Built from a copy: setuptools writes build/ and *.egg-info into the tree it builds.
    files = _checkout_files(REPO)
    source = tmp_path / "checkout"
    for path in files:
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, source / path)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--no-index", "-q", "-w",
                            str(tmp_path / "wheels"), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tmp_path / "wheels").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel_problems(names, files) == []
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == set(PRODUCT)
    # Data the product reads at run time (pyproject.toml: package-data).
    assert "service/endpoint/tf_serving_protos.binpb" in names
    # The dev tools exist, and the suite runs them from the checkout.
    assert all(any(p.startswith(f"{tool}/") for p in files) for tool in DEV_TOOLS)


def test_the_check_names_a_shipped_dev_tool_and_a_module_left_out():
    names = ["core/__init__.py", "devtools/kfp_backend.py", "tests/x.py",
             "tfx_pipeline_template-0.1.0.dist-info/RECORD"]
    assert wheel_problems(names, ["core/__init__.py", "pipeline/run.py", "bench/scale.py"]) == [
        "ships devtools/", "ships tests/", "leaves out pipeline/run.py"]


def copy_sources(dockerfile: str) -> List[str]:
    """The build-context paths every COPY line of the Dockerfile copies (continuations joined,
    options such as --chown left out)."""
    text = dockerfile.replace("\\\n", " ")
    sources = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if words and words[0].upper() in ("COPY", "ADD"):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_the_step_image_copies_the_product_and_no_dev_tool():
    sources = {s.rstrip("/") for s in copy_sources(
        (REPO / "deploy" / "kubeflow" / "Dockerfile").read_text())}
    # service/ runs in its own image (deploy/service/Dockerfile), not in pipeline steps.
    assert sources == set(PRODUCT) - {"service"} | IMAGE_EXTRAS
    assert copy_sources("COPY --chown=1:1 devtools/ \\\n  tests/ /opt/\nRUN x\n") == [
        "devtools/", "tests/"]


def test_the_dev_tools_never_reach_the_docker_daemon():
    """.dockerignore keeps them out of the build context: a COPY of one fails the build."""
    ignored = {line.strip().rstrip("/") for line in
               (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert set(DEV_TOOLS) <= ignored
    assert not ignored & (set(PRODUCT) | IMAGE_EXTRAS)
