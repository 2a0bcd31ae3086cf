"""A task's container resources, as the driver makes them and the API server admits the pod, and
what the kubelet does with the memory limit.

- driver/driver.go initPodSpecPatch / getPodResource (2.4.1 and 2.5.0; driver/driver.go at
  2.17.0, unchanged): for each of memory limit, memory request, cpu limit, cpu request the
  string field (resourceMemoryLimit, ...) when set, else the number (memoryLimit formatted
  "%vG", cpuLimit "%v"; api/v2alpha1/pipeline_spec.proto ResourceSpec), then apimachinery's
  resource.ParseQuantity; one that does not parse fails the driver
  ("failed to init podSpecPatch: quantities must match the regular expression ...").
- The API server refuses a pod with a negative quantity or a request above its limit (core/v1
  validation ValidateResourceRequirements); Argo's pod creation fails and so does the task.
- A container whose memory goes over its limit is OOMKilled (exit 137). Here the step's peak
  resident memory (usage.py) is compared with the limit after it exits: a cgroup kills it at
  the moment.
  CPU limits throttle and are not reproduced.
"""
from __future__ import annotations

from decimal import Decimal

from core.resources import parse_quantity
from devtools.kfp_backend.errors import TaskFailed

# (kind, string field, number field, the "%v" format of the number), in the driver's order.
FIELDS = (("limits", "memory", "resourceMemoryLimit", "memoryLimit", "{}G"),
          ("requests", "memory", "resourceMemoryRequest", "memoryRequest", "{}G"),
          ("limits", "cpu", "resourceCpuLimit", "cpuLimit", "{}"),
          ("requests", "cpu", "resourceCpuRequest", "cpuRequest", "{}"))
# apimachinery's resource.ErrFormatWrong (package k8s.io/apimachinery/pkg/api/resource).
FORMAT_WRONG = ("quantities must match the regular expression "
                "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


def go_float(number: float) -> str:
    """Go's %v of a float64: the shortest digits, an exponent only below 1e-4 or from 1e21."""
    text = repr(float(number))
    if "e" in text:
        exponent = int(text.split("e")[1])
        if -4 <= exponent < 21:
            text = format(Decimal(text), "f")
        else:
            mantissa, _, power = text.partition("e")
            text = f"{mantissa.removesuffix('.0')}e{int(power):+03d}"
    return text.removesuffix(".0")


def pod_resources(name: str, container: dict) -> dict[str, dict[str, Decimal]]:
    """{"limits"|"requests": {"cpu"|"memory": value}} for the task's container (cores, bytes);
    TaskFailed where the driver or the API server would stop it."""
    spec = container.get("resources") or {}
    found: dict[str, dict[str, Decimal]] = {"limits": {}, "requests": {}}
    for kind, resource, string_field, number_field, form in FIELDS:
        if spec.get(string_field):
            text = spec[string_field]  # placeholders are not resolved here
        elif spec.get(number_field):
            text = form.format(go_float(spec[number_field]))
        else:
            continue
        try:
            found[kind][resource] = parse_quantity(text)
        except ValueError:
            raise TaskFailed(f"task {name}: driver: failed to init podSpecPatch: {FORMAT_WRONG} "
                             f"({string_field if spec.get(string_field) else number_field}: "
                             f"{text!r})") from None
    for kind, values in found.items():
        for resource, value in values.items():
            if value < 0:
                raise TaskFailed(f"task {name}: Pod is invalid: spec.containers[0].resources."
                                 f"{kind}[{resource}]: Invalid value: must be greater than or "
                                 "equal to 0")
    for resource, request in found["requests"].items():
        limit = found["limits"].get(resource)
        if limit is not None and request > limit:
            raise TaskFailed(f"task {name}: Pod is invalid: spec.containers[0].resources."
                             f"requests: Invalid value: {request}: must be less than or equal "
                             f"to {resource} limit of {limit}")
    return found


def check_memory(name: str, resources: dict, peak_rss_bytes: int | None) -> None:
    """TaskFailed as OOMKilled when the step's peak RSS went over its memory limit."""
    limit = resources["limits"].get("memory")
    if limit is not None and peak_rss_bytes is not None and peak_rss_bytes > limit:
        raise TaskFailed(f"task {name}: OOMKilled (exit code 137): peak RSS "
                         f"{peak_rss_bytes / 2**20:.0f} MiB is over its memory limit "
                         f"{limit / 2**20:.0f} MiB (kubeflow.resources)")


def describe(resources: dict) -> str:
    """"requests cpu 1, memory 1536Mi; limits memory 1536Mi" for the run's log."""
    def quantity(resource: str, value: Decimal) -> str:
        return f"{value / 2**20:.0f}Mi" if resource == "memory" else f"{value.normalize()}"
    parts = [f"{kind} " + ", ".join(f"{r} {quantity(r, v)}" for r, v in sorted(values.items()))
             for kind, values in resources.items() if values]
    return "; ".join(parts) or "none (BestEffort container)"
