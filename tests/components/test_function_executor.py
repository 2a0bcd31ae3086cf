"""components/function_executor.py: each function component's step executor (executor.py)
calls its function with the arguments TFX 1.16's @component executor would pass it, from the
same artifacts and parameters; the declared interface (component.py) and the executor's
function name the same arguments with the same defaults."""
from __future__ import annotations

import pytest

# (component module, the @component's name, the executor class the step runs)
LIGHT = [("components.anomaly_gate.component", "AnomalyGate", "Executor"),
         ("components.drift_gate.component", "DriftCheck", "CheckExecutor"),
         ("components.drift_gate.component", "DriftGate", "GateExecutor"),
         ("components.skew_gate.component", "SkewCheck", "CheckExecutor"),
         ("components.skew_gate.component", "SkewGate", "GateExecutor"),
         ("components.serving_baseline.component", "ServingBaseline", "Executor"),
         ("components.run_report.component", "RunReport", "Executor"),
         ("components.release.component", "Release", "Executor")]


def declared(module_name: str, name: str):
    """(the component, the executor TFX's @component made for it, the step's executor)."""
    import importlib

    module = importlib.import_module(module_name)
    component = getattr(module, name)
    return component, getattr(module, f"{name}_Executor"), component.EXECUTOR_SPEC.executor_class


def dicts(component, leave_out=()):
    """input_dict, output_dict, exec_properties: one distinct artifact per channel, a value per
    parameter, without the names in leave_out."""
    spec = component.SPEC_CLASS
    inputs = {k: [c.type()] for k, c in spec.INPUTS.items() if k not in leave_out}
    outputs = {k: [c.type()] for k, c in spec.OUTPUTS.items() if k not in leave_out}
    properties = {k: f"value-of-{k}" for k in spec.PARAMETERS if k not in leave_out}
    return inputs, outputs, properties


@pytest.mark.parametrize(("module", "name", "executor"), LIGHT, ids=[n for _, n, _ in LIGHT])
def test_the_step_executor_passes_what_tfx_component_executor_passes(module, name, executor):
    from tfx.dsl.component.experimental import decorators

    from components.function_executor import FunctionExecutor, function_args

    component, tfx_executor, ours = declared(module, name)
    assert ours.__name__ == executor and issubclass(ours, FunctionExecutor)
    assert ours.__module__.endswith(".executor")  # not the module that imports @component
    optional = [k for k in tfx_executor._ARG_DEFAULTS]
    for leave_out in ([], optional):
        inputs, outputs, properties = dicts(component, leave_out)
        tfx_args = decorators._extract_func_args(name, tfx_executor._ARG_FORMATS,
                                                 tfx_executor._ARG_DEFAULTS, inputs, outputs,
                                                 properties)
        our_args = function_args(ours.FUNCTION, name, inputs, outputs, properties)
        assert our_args.keys() == tfx_args.keys()
        assert all(our_args[k] is tfx_args[k] for k in tfx_args)  # the same artifact objects


@pytest.mark.parametrize(("module", "name", "executor"), LIGHT, ids=[n for _, n, _ in LIGHT])
def test_a_missing_required_argument_fails_both_ways(module, name, executor):
    from tfx.dsl.component.experimental import decorators

    from components.function_executor import function_args

    component, tfx_executor, ours = declared(module, name)
    required = [k for k in tfx_executor._ARG_FORMATS if k not in tfx_executor._ARG_DEFAULTS]
    for missing in required:
        inputs, outputs, properties = dicts(component, [missing])
        if missing in component.SPEC_CLASS.OUTPUTS:
            continue  # TFX gives every declared output; none is ever missing
        with pytest.raises(ValueError):
            decorators._extract_func_args(name, tfx_executor._ARG_FORMATS,
                                          tfx_executor._ARG_DEFAULTS, inputs, outputs, properties)
        with pytest.raises(ValueError, match=repr(missing)):
            function_args(ours.FUNCTION, name, inputs, outputs, properties)


def test_a_function_that_returns_a_value_is_refused():
    from components.function_executor import FunctionExecutor

    class Returns(FunctionExecutor):
        FUNCTION = staticmethod(lambda flag: {"out": 1})

    with pytest.raises(ValueError, match="returns nothing"):
        Returns().Do({}, {}, {"flag": "x"})
