"""CPU and memory for each Kubeflow step's pod: Kubernetes quantities, checked on load.

The compiled spec carries them per executor (pipeline/kubeflow/client/resources.py); the KFP driver
turns them into the pod's `resources` (backend/src/v2/driver/driver.go initPodSpecPatch, the
same at 2.4.1, 2.5.0 and 2.17.0). Without them the step's container has no requests and no
limits: the scheduler places it anywhere, the kubelet evicts it first under memory pressure, and
Beam's DirectRunner may take the whole node. Imports nothing above core.
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Dict, Optional

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from core import nodes

# k8s.io/apimachinery/pkg/api/resource/quantity.go ParseQuantity's grammar: a signed decimal
# number, then a binary-SI suffix, a decimal-SI suffix (n u m "" k M G T P E) or an exponent.
_QUANTITY = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?|"
                       r"[eE][+-]?\d+)")
_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50,
           "Ei": 2 ** 60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
            "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
            "P": Decimal("1e15"), "E": Decimal("1e18")}
# Every step a pipeline can hold (core/nodes.py): the keys `components` accepts.
NODE_IDS = tuple(sorted(value for name, value in vars(nodes).items()
                        if name.isupper() and isinstance(value, str) and value[:1].isupper()
                        and "." not in value))


def parse_quantity(text: str) -> Decimal:
    """The quantity's value (cores, bytes); ValueError as ParseQuantity refuses it."""
    match = _QUANTITY.fullmatch(str(text).strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (e.g. 500m or 2 for CPU "
                         "cores, 512Mi or 2Gi for memory)")
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _DECIMAL[suffix]


class StepResources(BaseModel):
    """One step's container resources (unset: none of that kind)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    cpu_request: Optional[str] = None
    cpu_limit: Optional[str] = None
    memory_request: Optional[str] = None
    memory_limit: Optional[str] = None

    @field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit")
    @classmethod
    def _positive_quantity(cls, value):
        if value is None:
            return value
        if not isinstance(value, str):  # YAML reads 2 and 0.5 as numbers; quantities are text
            value = str(value)
        if parse_quantity(value) <= 0:
            raise ValueError(f"{value!r} must be above zero")
        return value

    @model_validator(mode="after")
    def _request_within_limit(self) -> "StepResources":
        problem = _above_limit(self.model_dump())
        if problem:
            raise ValueError(problem)
        return self

    def over(self, base: "StepResources") -> "StepResources":
        """These settings, each unset one taken from base."""
        return StepResources(**_merged(self, base))


def _merged(own: StepResources, base: StepResources) -> dict:
    return {k: getattr(own, k) or getattr(base, k) for k in type(own).model_fields}


def _above_limit(values: dict) -> Optional[str]:
    """Why the API server would refuse these (core/v1 validation ValidateResourceRequirements:
    a request "must be less than or equal to" its limit): the step would never start."""
    for kind in ("cpu", "memory"):
        request, limit = values.get(f"{kind}_request"), values.get(f"{kind}_limit")
        if request and limit and parse_quantity(request) > parse_quantity(limit):
            return (f"{kind}_request {request} is above {kind}_limit {limit}: Kubernetes "
                    "refuses such a pod")
    return None


# Measured with the emulated backend, each step a process (deploy/kubeflow/README.md, Resources:
# the command, each step's peak RSS): the largest peaked at 966 MiB on the bundled data and at
# 1,178 MiB (Transform) on 1M rows; ~820 MiB of that is the libraries a step imports.
DEFAULT = StepResources(cpu_request="1", memory_request="1536Mi", memory_limit="1536Mi")


class ResourcesConfig(BaseModel):
    """`kubeflow.resources`: `default` for every step; `components.<node id>` overrides its
    fields for that step."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    default: StepResources = DEFAULT
    components: Dict[str, StepResources] = {}

    @field_validator("components")
    @classmethod
    def _known_steps(cls, components: Dict[str, StepResources]) -> Dict[str, StepResources]:
        unknown = sorted(set(components) - set(NODE_IDS))
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a step of the pipeline; the steps "
                             f"are {', '.join(NODE_IDS)} (core/nodes.py)")
        return components

    @model_validator(mode="after")
    def _each_step_within_limits(self) -> "ResourcesConfig":
        for name, own in self.components.items():
            problem = _above_limit(_merged(own, self.default))
            if problem:
                raise ValueError(f"components.{name} with the default: {problem}")
        return self

    def for_step(self, node_id: Optional[str]) -> StepResources:
        """What the step node_id gets (None: a task of no node, e.g. the span driver)."""
        own = self.components.get(node_id or "")
        return own.over(self.default) if own else self.default
