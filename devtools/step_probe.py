"""Runs a module as `python -m MODULE ARGS` does, recording when its TFX executor's Do starts and
ends, and what the process had imported and spent by then:

    python devtools/step_probe.py RECORD.json MODULE [ARGS...]

RECORD.json gets {"do_start", "do_end": time.time() seconds, "cpu_at_do": the process's CPU
seconds when Do started, "imported_at_do": [the names in sys.modules then]} once the outermost
Do returns (a Do that raises still records; a process without an executor, the ExampleGen
driver, records nothing). For bench/step_startup.py (start to Do, Do, Do to exit of a fresh
step process) and tests/kubeflow/test_step_imports.py (what a light step has imported by the
time its Do runs). Run as a script, not with -m: it adds nothing to the modules the step
imports but this file's stdlib ones.

How: every executor subclasses tfx.dsl.components.base.base_executor.BaseExecutor. When that
module has been imported (by the step, in its own order), BaseExecutor gets an
__init_subclass__ that times the Do of each executor class defined after it.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import json
import os
import runpy
import sys
import time

BASE_EXECUTOR = "tfx.dsl.components.base.base_executor"
# The libraries a light step must not have imported by its Do, each by the module that says its
# package was imported whole: Beam (any of it), TFT, and TFDV's and TFMA's __init__'s imports
# (a step registers their packages without running the __init__: pipeline/lazy_tfx.py).
HEAVY = {"apache_beam": "apache_beam", "tensorflow_transform": "tensorflow_transform",
         "tensorflow_data_validation": "tensorflow_data_validation.api.stats_api",
         "tensorflow_model_analysis": "tensorflow_model_analysis.api.model_eval_lib"}


def heavy_imports(modules) -> list[str]:
    """The HEAVY libraries among these module names."""
    names = set(modules)
    return sorted(library for library, module in HEAVY.items() if module in names)


class _AfterBaseExecutor(importlib.abc.MetaPathFinder):
    """Finds base_executor as the other finders do, then times Do in its subclasses."""

    def __init__(self, record_path: str):
        self.record_path, self.depth, self.record = record_path, 0, {}

    def find_spec(self, name, path=None, target=None):
        if name != BASE_EXECUTOR:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                self._instrument(module.BaseExecutor)

            spec.loader.exec_module = exec_module
        return spec

    def _instrument(self, base: type) -> None:
        probe = self

        def __init_subclass__(cls, **kwargs):  # noqa: N807
            super(base, cls).__init_subclass__(**kwargs)
            if "Do" in cls.__dict__:
                cls.Do = probe._timed(cls.__dict__["Do"])

        base.__init_subclass__ = classmethod(__init_subclass__)

    def _timed(self, do):
        @functools.wraps(do)
        def timed(executor, *args, **kwargs):
            outer = self.depth == 0
            self.depth += 1
            if outer:
                self.record = {"do_start": time.time(), "cpu_at_do": time.process_time(),
                               "imported_at_do": sorted(sys.modules)}
            try:
                return do(executor, *args, **kwargs)
            finally:
                self.depth -= 1
                if outer:
                    self.record["do_end"] = time.time()
                    with open(self.record_path, "w") as out:
                        json.dump(self.record, out)

        return timed


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python devtools/step_probe.py RECORD.json MODULE [ARGS...]")
    record, module = sys.argv[1], sys.argv[2]
    sys.meta_path.insert(0, _AfterBaseExecutor(record))
    sys.argv = [module, *sys.argv[3:]]
    sys.path[0] = os.getcwd()  # as `python -m` has it: the working folder, not this file's
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
