"""The model's hyper-parameters: the keyword-only parameters of models/model.py's build_model.

The config's `model:` section sets them, and nothing else: a new hyper-parameter is one new
keyword argument of build_model, with its type (and constraints, as pydantic's Field in an
Annotated type) in the annotation. They are read from the source, so loading a config never
imports TensorFlow (the predict client loads configs too).
"""
from __future__ import annotations

import ast
import importlib.util
import typing
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Mapping, Tuple

from pydantic import Field, TypeAdapter, ValidationError

MODELS_PACKAGE = "models"
BUILD_MODEL = "build_model"
# Keyword arguments the template passes to build_model itself, from the `training:` section.
FROM_TRAINING = ("jit_compile", "steps_per_execution")
_NAMESPACE = {**{name: getattr(typing, name) for name in typing.__all__}, "Field": Field,
              "float": float, "int": int, "bool": bool, "str": str, "list": list,
              "dict": dict, "tuple": tuple}


class Parameter(typing.NamedTuple):
    annotation: Any  # None: not annotated
    required: bool


def model_source(module: str = "model") -> Path:
    """models/<module>.py (the config's model_module), found without importing the models package
    (it imports TensorFlow)."""
    spec = importlib.util.find_spec(MODELS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"cannot find the '{MODELS_PACKAGE}' package")
    source = Path(list(spec.submodule_search_locations)[0]) / f"{module}.py"
    if not source.is_file():
        raise ValueError(f"model_module '{module}': there is no {MODELS_PACKAGE}/{module}.py")
    return source


@lru_cache(maxsize=8)
def hyperparameters(source: Path) -> Dict[str, Parameter]:
    """build_model's keyword-only parameters but FROM_TRAINING, with their annotations."""
    tree = ast.parse(source.read_text(), str(source))
    found = [node for node in tree.body
             if isinstance(node, ast.FunctionDef) and node.name == BUILD_MODEL]
    if not found:
        raise ValueError(f"{source} defines no function {BUILD_MODEL}")
    args = found[0].args
    parameters = {}
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if arg.arg in FROM_TRAINING:
            continue
        annotation = (eval(compile(ast.Expression(arg.annotation), str(source), "eval"),  # noqa: S307
                           dict(_NAMESPACE)) if arg.annotation is not None else None)
        parameters[arg.arg] = Parameter(annotation, default is None)
    return parameters


def check(values: Mapping[str, Any], source: Path) -> Tuple[Dict[str, Any], list]:
    """(the values as build_model's annotations type them, problems): unknown names, missing
    required ones, values that do not fit their annotation."""
    parameters, where = hyperparameters(source), f"{source.parent.name}/{source.name}"
    problems = [f"'{name}' is not a hyper-parameter of {BUILD_MODEL} ({where}: its keyword-only "
                f"parameters are {sorted(parameters)}); add it there or remove it"
                for name in values if name not in parameters]
    problems += [f"'{name}' is required by {BUILD_MODEL} ({where}) and not set"
                 for name, p in parameters.items() if p.required and name not in values]
    typed = {}
    for name, value in values.items():
        parameter = parameters.get(name)
        if parameter is None or parameter.annotation is None:
            typed[name] = value
            continue
        try:
            typed[name] = TypeAdapter(parameter.annotation).validate_python(value)
        except ValidationError as error:
            reasons = "; ".join(e["msg"] for e in error.errors())
            problems.append(f"'{name}': {value!r} does not fit {BUILD_MODEL}'s annotation: "
                            f"{reasons}")
    return typed, problems
