"""Each step's CPU and memory: `kubeflow.resources` on load, in the compiled spec, and as the KFP
driver, the API server and the kubelet treat them (the emulated backend's resources.py).

The compiled spec itself is checked in test_spec.py (every step has its resources, an override
reaches its step); here the config's checks, the spec's numbers round trip through the driver's
formatting, and the negative controls: what the backend refuses, and a step over its memory
limit killed as the kubelet kills it.
"""
from __future__ import annotations

import re
import sys
from decimal import Decimal

import pytest

from core.config import ConfigError, load_config
from core.resources import ResourcesConfig, StepResources, parse_quantity
from devtools.kfp_backend import Runner, TaskFailed
from devtools.kfp_backend.resources import go_float, pod_resources
from pipeline.kubeflow.client.resources import resource_spec, with_resources
from tests.helpers import run_cli, write_config


@pytest.mark.parametrize("text, value", [("500m", Decimal("0.5")), ("2", Decimal(2)),
                                         ("1536Mi", Decimal(1610612736)), ("1.5G", Decimal(1.5e9)),
                                         ("1e3", Decimal(1000)), (".5", Decimal("0.5"))])
def test_quantities_parse_as_kubernetes_reads_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("changes, words", [
    ({"kubeflow.resources.components.Trainer.memory_limit": "8 GB"},
     "kubeflow.resources.components.Trainer.memory_limit: '8 GB' is not a Kubernetes quantity"),
    ({"kubeflow.resources.default.cpu_request": "-1"},
     "kubeflow.resources.default.cpu_request: '-1' must be above zero"),
    ({"kubeflow.resources.components.Trainr": {"cpu_request": "2"}},
     "kubeflow.resources.components: Trainr: not a step of the pipeline"),
    ({"kubeflow.resources.components.Evaluator.memory_request": "64Gi"},
     "components.Evaluator with the default: memory_request 64Gi is above memory_limit"),
])
def test_a_bad_resource_setting_is_refused_on_load_naming_the_key(tmp_path, changes, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(write_config(tmp_path, changes))


@pytest.mark.slow
def test_the_compile_command_exits_2_naming_the_file_and_the_key(tmp_path):
    config = write_config(tmp_path, {"kubeflow.resources.components.Transform.cpu_limit": "two"})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"error: invalid config {config}" in result.stderr
    assert "kubeflow.resources.components.Transform.cpu_limit: 'two' is not a Kubernetes " \
        "quantity" in result.stderr


def test_an_override_changes_only_its_fields_of_only_its_step():
    resources = ResourcesConfig(components={"Trainer": StepResources(memory_limit="8Gi",
                                                                    memory_request="4Gi")})
    trainer, other = resources.for_step("Trainer"), resources.for_step("Transform")
    assert (trainer.memory_request, trainer.memory_limit) == ("4Gi", "8Gi")
    assert trainer.cpu_request == other.cpu_request == resources.default.cpu_request
    assert other == resources.default
    assert resources.for_step(None) == resources.default  # the span driver: no node


def literal_spec(labels: dict) -> dict:
    return {"components": {t: {"executorLabel": label} for t, label in labels.items()},
            "deploymentSpec": {"executors": {label: {"container": {"image": "i:1"}}
                                             for label in labels.values()}},
            "root": {"dag": {"tasks": {t: {"componentRef": {"name": t}} for t in labels}}}}


@pytest.mark.parametrize("step", [StepResources(cpu_request="250m", memory_request="1536Mi",
                                                memory_limit="1536Mi"),
                                  StepResources(cpu_request="1.5", cpu_limit="2",
                                                memory_request="900M", memory_limit="3Gi")])
def test_the_driver_reads_back_the_quantities_the_config_gave(step):
    """The numbers written (cores; GB, formatted "%vG" by the driver) parse back exactly."""
    spec = with_resources(literal_spec({"Trainer": "Trainer_executor"}),
                          ResourcesConfig(default=step))
    container = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    got = pod_resources("Trainer", container)
    wanted = {"requests": {}, "limits": {}}
    for name in ("cpu_request", "cpu_limit", "memory_request", "memory_limit"):
        if getattr(step, name):
            kind, kind_of = name.split("_")
            wanted["requests" if kind_of == "request" else "limits"][kind] = parse_quantity(
                getattr(step, name))
    assert got == wanted


def test_go_formats_floats_as_the_driver_does():
    assert [go_float(x) for x in (1.0, 0.25, 1.610612736, 1e-05, 1e21)] == [
        "1", "0.25", "1.610612736", "1e-05", "1e+21"]


@pytest.mark.parametrize("resources, words", [
    ({"resourceMemoryLimit": "lots"}, "failed to init podSpecPatch: quantities must match"),
    ({"cpuRequest": 2.0, "cpuLimit": 1.0}, "requests: Invalid value: 2: must be less than or "
                                           "equal to cpu limit of 1"),
    ({"memoryRequest": -1.0}, "must be greater than or equal to 0"),
])
def test_the_backend_refuses_what_kubernetes_refuses(resources, words):
    """Negative controls: a quantity the driver cannot parse, a pod the API server rejects."""
    with pytest.raises(TaskFailed, match=re.escape(words)):
        pod_resources("T", {"resources": resources})
    assert resource_spec(StepResources(cpu_request="2", cpu_limit="2")) == {
        "cpuRequest": 2.0, "cpuLimit": 2.0}


def memory_spec(limit_gb: float, mib: int) -> dict:
    """One task that holds `mib` MiB for a moment, its memory limit limit_gb."""
    script = f"import time; b = b'x' * ({mib} * 2**20); time.sleep(0.2)"
    return {
        "pipelineInfo": {"name": "memory"}, "schemaVersion": "2.1.0",
        "components": {"M": {"executorLabel": "M_executor"}},
        "deploymentSpec": {"executors": {"M_executor": {"container": {
            "image": "img:1", "command": [sys.executable, "-c", script],
            "resources": {"memoryRequest": limit_gb, "memoryLimit": limit_gb}}}}},
        "root": {"dag": {"tasks": {"M": {"taskInfo": {"name": "M"},
                                         "componentRef": {"name": "M"}}}}}}


@pytest.mark.slow
def test_a_step_over_its_memory_limit_is_oomkilled_and_one_within_it_runs(tmp_path):
    """The kubelet kills a container at its limit: the emulation compares the step's peak RSS
    with it, and records what each step used."""
    with pytest.raises(TaskFailed, match=r"task M: OOMKilled \(exit code 137\): peak RSS \d+ "
                                         r"MiB is over its memory limit 191 MiB"):
        Runner(memory_spec(0.2, 300), str(tmp_path / "a"), tmp_path / "a-state").run()
    result = Runner(memory_spec(0.6, 300), str(tmp_path / "b"), tmp_path / "b-state").run()
    task = result.tasks["M"]
    assert 300 <= task.peak_rss_mib < 0.6e9 / 2**20 and task.cpu_seconds > 0
