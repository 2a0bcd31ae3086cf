"""Each step's CPU and memory (config `kubeflow.resources`) written into the compiled spec.

Pure dict -> dict. Where: `deploymentSpec.executors.<label>.container.resources`
(api/v2alpha1/pipeline_spec.proto ResourceSpec). The driver makes the pod's requests and limits
of it (backend/src/v2/driver/driver.go initPodSpecPatch, getPodResource, the same at 2.4.1, 2.5.0
and 2.17.0): for each of the four it takes the string field (resourceCpuLimit, ...) when set,
else the number (cpuLimit in cores formatted "%v", memoryLimit in GB formatted "%vG"), then
k8s ParseQuantity. Both kinds are read by every release; the numbers are written because the
kfp SDK this project pins (kfp 2.5.0 -> kfp-pipeline-spec 0.2.2, whose ResourceSpec has only
them) parses the spec on upload, and the emulated backend with it. Bytes / 1e9 and back is exact
for the quantities people write (1536Mi -> 1.610612736G).
TFX's compiler writes resources only for a component's platform_config, which ours never set.
"""
from __future__ import annotations

import copy

from core.resources import ResourcesConfig, StepResources, parse_quantity

# ResourceSpec's number fields, by our config's names.
FIELDS = {"cpu_request": "cpuRequest", "cpu_limit": "cpuLimit",
          "memory_request": "memoryRequest", "memory_limit": "memoryLimit"}


def resource_spec(step: StepResources) -> dict:
    """One container's ResourceSpec (JSON form); memory in GB, CPU in cores."""
    spec = {}
    for name, field in FIELDS.items():
        value = getattr(step, name)
        if value is None:
            continue
        number = parse_quantity(value)
        spec[field] = float(number / 1_000_000_000 if name.startswith("memory") else number)
    return spec


def with_resources(spec: dict, resources: ResourcesConfig) -> dict:
    """A copy of spec whose every container executor has its step's resources: a task's node
    id is its name (TFX names each task by its component's id); a task of no node (the span
    driver, spec.py) gets the default."""
    spec = copy.deepcopy(spec)
    executors = spec["deploymentSpec"]["executors"]

    def place(tasks: dict) -> None:
        for name, task in tasks.items():
            component = spec["components"][task["componentRef"]["name"]]
            if "dag" in component:  # the exit handler's sub-DAG (exit_handler.py): its steps
                place(component["dag"]["tasks"])
                continue
            container = executors[component["executorLabel"]].get("container")
            if container is not None:
                container["resources"] = resource_spec(resources.for_step(name))

    place(spec["root"]["dag"]["tasks"])
    return spec


__all__ = ["FIELDS", "resource_spec", "with_resources"]
