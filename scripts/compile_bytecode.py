"""Compiles the .pyc files of a venv's packages, except those nothing here imports.

    .venv/bin/python scripts/compile_bytecode.py    (the packages of the Python that runs it)

scripts/setup_env.sh runs it once the lock is installed. Where PYTHONDONTWRITEBYTECODE is set (as
on this project's CI machines) no process writes .pyc files, so without them every process
compiles TensorFlow, TFX, Beam and TFMA from source again (27 s of CPU to import them, 11 s with
them). `uv pip install --compile-bytecode` compiles all 26,304 files of the lock in 27 s on 2
cores; 7,300 of them are test suites and packages that the lock pulls in for tools we never
start (SKIPPED). This compiles the other 19,000 in 17.5 s. A skipped module still imports, compiled
in memory each time.
"""
from __future__ import annotations

import multiprocessing
import os
import py_compile
import re
import sys
import sysconfig
from typing import List

# Folders under site-packages that no pipeline step, test or tool here imports: moto's
# CloudFormation linter and its math (cfnlint, sympy, networkx, mpmath), Jupyter's server side and
# debugger (TFMA's notebook views import only the kernel side), Vertex AI and Gemini clients,
# matplotlib's font tools (for PDF and SVG; the reports write PNG), and every package's own tests.
SKIPPED = re.compile(r"^(sympy|cfnlint|networkx|mpmath|fontTools|debugpy|jupyter_server|"
                     r"jupyterlab\w*|nbconvert|vertexai|google/genai|graphql|dns|aws_xray_sdk|"
                     r"js2py)/|(^|/)tests/")


def sources(site_packages: str) -> List[str]:
    found = []
    for folder, subfolders, files in os.walk(site_packages):
        if SKIPPED.search(os.path.relpath(folder, site_packages).replace(os.sep, "/") + "/"):
            subfolders[:] = []
            continue
        found += [os.path.join(folder, f) for f in files if f.endswith(".py")]
    return found


def _compile(path: str) -> None:
    try:
        py_compile.compile(path, doraise=True)
    except (py_compile.PyCompileError, OSError):
        pass  # a file that does not compile (a template, another Python's syntax): uv skips too


def main() -> int:
    files = sources(sysconfig.get_path("purelib"))
    with multiprocessing.Pool(os.cpu_count() or 1) as pool:
        for _ in pool.imap_unordered(_compile, files, chunksize=64):
            pass
    print(f"compiled {len(files)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
