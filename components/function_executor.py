"""The executor of our function components (TFX's @component), without TFX's @component
machinery in the process that runs it.

tfx.dsl.component.experimental.decorators (and its annotations, function_parser) import Apache
Beam at module level, for BeamComponentParameter: ~1-1.7 s of a Kubeflow step's start-up
(bench/step_startup.py) in a step that never runs Beam (the gates, the serving baseline, the run
report). So each such component keeps its interface where it is declared (component.py, with
@component: the same ComponentSpec, the same compiled spec) and gets as its EXECUTOR_SPEC a
FunctionExecutor subclass in its executor.py, which imports only what the function needs.

FunctionExecutor.Do passes the function its arguments as TFX 1.16's @component executor does
(decorators.py _FunctionExecutor.Do and _extract_func_args) for the kinds of argument our
components declare: InputArtifact (one artifact; an optional one with a default may be
missing), OutputArtifact (one artifact), Parameter (an optional one with a default may be
missing). They return nothing (no OutputDict): a function that returns a value is an error here.
tests/components/test_function_executor.py checks each component's declared interface against
its executor's function.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List

from tfx.dsl.components.base import base_executor


def function_args(function: Callable, obj: str, input_dict: Dict[str, List[Any]],
                  output_dict: Dict[str, List[Any]], exec_properties: Dict[str, Any]) -> dict:
    """The keyword arguments of `function` from the executor's dicts (_extract_func_args;
    its error messages)."""
    result = {}
    for name, parameter in inspect.signature(function).parameters.items():
        has_default = parameter.default is not inspect.Parameter.empty
        if name in output_dict:
            output_list = output_dict[name]
            if len(output_list) != 1:
                raise ValueError(f"Expected output {name!r} to {obj} to be a singleton "
                                 f"ValueArtifact channel (got {output_list} instead).")
            result[name] = output_list[0]
        elif input_dict.get(name):
            input_list = input_dict[name]
            if len(input_list) != 1:
                raise ValueError(f"Expected input {name!r} to {obj} to be a singleton "
                                 f"ValueArtifact channel (got {input_list} instead).")
            result[name] = input_list[0]
        elif name in exec_properties:
            result[name] = exec_properties[name]
        elif not has_default:
            raise ValueError(f"Expected non-optional argument {name!r} of {obj} to be "
                             "provided, but no value was passed.")
    return result


class FunctionExecutor(base_executor.BaseExecutor):
    """Calls FUNCTION (a staticmethod in the subclass) with the step's artifacts and
    parameters."""

    FUNCTION: Callable = staticmethod(lambda: None)

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        returned = self.FUNCTION(**function_args(self.FUNCTION, str(self), input_dict,
                                                 output_dict, exec_properties))
        if returned is not None:
            raise ValueError(f"{self.FUNCTION.__qualname__} returned {returned!r}: a function "
                             "component here writes its outputs, it returns nothing")
