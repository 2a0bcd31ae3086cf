"""TFX packages registered without running their __init__, for processes that run one
executor: a Kubeflow step (pipeline/kubeflow/step/entrypoint.py) or a TFJob training replica
(pipeline/kubeflow/training_job/worker.py); and for the local run (pipeline/run.py), whose
pipeline imports
each component it holds from that component's module (pipeline/builder.py).

Importing any submodule of tfx.components (an executor, evaluator.constants) runs
tfx/components/__init__.py first, which imports every component TFX has (BulkInferrer,
InfraValidator with the docker and kubernetes clients, Transform with TFT, Tuner with keras-tuner
and Keras 3, ...): measured here, 15% of a step's start-up and ~3.5 s of a trainer replica's
~16 s of CPU, for names such a process never reads. `defer_tfx_packages` registers the package
with its __path__, so submodules import as usual, and runs its __init__ on the first lookup of a
name the package does not hold yet (PEP 562 module __getattr__) that is not one of its
submodules: `from tfx.components import Trainer` still works, later. Safe only while the
__init__ merely re-exports its submodules, which tests/pipeline/test_lazy_tfx.py checks against
the installed TFX, TFDV and TFMA.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

DEFERRED_PACKAGES = ("tfx.components",)
# And in a Kubeflow step: TFX's standard_component_specs, which every TFX executor and the
# step's entrypoint import, imports tensorflow_data_validation.anomalies.proto and
# tensorflow_model_analysis.sdk; their packages' __init__ import all of TFDV and TFMA, and with
# them Beam: ~2 s of start-up for a step whose executor uses neither (ImportSchemaGen, Pusher).
STEP_DEFERRED_PACKAGES = DEFERRED_PACKAGES + ("tensorflow_data_validation",
                                              "tensorflow_model_analysis")


def defer_init(name: str) -> ModuleType:
    """Registers package `name` with its __path__ (its submodules import as usual) but without
    running its __init__; the first lookup of a name the package does not hold yet runs the
    __init__ in place and returns that name. A package already imported is left as it is."""
    if name in sys.modules:
        return sys.modules[name]
    parent, _, child = name.rpartition(".")
    if parent:
        importlib.import_module(parent)
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    module = importlib.util.module_from_spec(spec)

    def run_init(attribute: str):
        # A submodule is imported as such: `from package import submodule` asks the package
        # for the name first (importlib._bootstrap._handle_fromlist's hasattr), and the
        # __init__ would bind that same module (the test checks it binds no such name).
        if not attribute.startswith("__") and importlib.util.find_spec(
                f"{name}.{attribute}") is not None:
            return importlib.import_module(f"{name}.{attribute}")
        del module.__getattr__  # while __init__ runs, a missing name is an AttributeError
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)  # as a failed import leaves it: not imported
            raise
        return getattr(module, attribute)

    module.__getattr__ = run_init
    sys.modules[name] = module
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def defer_tfx_packages(packages: tuple = DEFERRED_PACKAGES) -> None:
    for package in packages:
        defer_init(package)
