"""`--runner kubeflow` compiles a PipelineSpec that open-source KFP can run in the project's image.

The spec is compiled once, by the real CLI, from the bundled config with its outputs redirected.
"""
from __future__ import annotations

import json
import re

import pytest

from core.config import ConfigError, load_config
from pipeline.kubeflow.client.compiler import IMAGE_WORKDIR
from devtools.kfp_backend import load_spec, task_order
from pipeline.kubeflow.client.spec import open_source_problems
from tests.helpers import REPO, example_config, load_yaml, load_yaml_all, run_cli, write_config

NAME, MODEL = example_config().pipeline_name, example_config().serving.model_name
IMAGE = "ghcr.io/acme/tfx-pipeline-template:1.2.3"
# Each step runs TFX's entrypoint through ours, which restores the input types the backend drops
# and sets aside the outputs it adds, keeping those the component declares.
RUN_EXECUTOR = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"


# Each step's part in the run lease (pipeline/kubeflow/step/run_lease_step.py), 26 h by default.
ROLES = {"CsvExampleGenDriver": "take", "Pusher": "push", "RunReport": "release"}
EXPIRY_S = 26 * 3600


def entrypoint(task: str, *declared: str, module: str = RUN_EXECUTOR) -> list:
    lease = json.dumps({"expiry_s": EXPIRY_S, "role": ROLES.get(task, "hold"), "task": task},
                       sort_keys=True)
    return ["python", "-m", "pipeline.kubeflow.step.entrypoint", "--night_lease", lease,
            "--declared_output_artifacts", json.dumps(sorted(declared)), module]


EXECUTORS = {
    "CsvExampleGen": "components.example_gen.component.Executor",
    "ImportSchemaGen": "components.import_schema.executor.Executor",
    "StatisticsGen": "tfx.components.statistics_gen.executor.Executor",
    "ExampleValidator": "tfx.components.example_validator.executor.Executor",
    "AnomalyGate": "components.anomaly_gate.executor.Executor",
    "DriftCheck": "components.drift_gate.executor.CheckExecutor",
    "DriftGate": "components.drift_gate.executor.GateExecutor",
    "SkewCheck": "components.skew_gate.executor.CheckExecutor",
    "SkewGate": "components.skew_gate.executor.GateExecutor",
    "Transform": "tfx.components.transform.executor.Executor",
    "Trainer": "tfx.components.trainer.executor.GenericExecutor",
    "ServingBaseline": "components.serving_baseline.executor.Executor",
    "Evaluator": "components.evaluator.component.Executor",
    "Pusher": "components.pusher.executor.Executor",
    "RunReport": "components.run_report.executor.Executor",
}
BEAM = ["--runner=DataflowRunner", "--project=acme", "--region=europe-west1",
        f"--sdk_container_image={IMAGE}"]
CLUSTER = {"notify.kubeflow_secret": "night-webhook",
           "kubeflow.image": IMAGE, "kubeflow.pipeline_root": "gs://acme-ml/tfx/nightly",
           "kubeflow.input_base": "gs://acme-ml/data/spans",
           "kubeflow.serving_dir": "gs://acme-ml/serving", "kubeflow.beam_args": BEAM,
           # An override of one step's memory (test_every_step_has_its_resources).
           "kubeflow.resources.components.Trainer": {"memory_request": "3Gi",
                                                     "memory_limit": "3Gi"}}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kubeflow_spec")
    config = write_config(folder, {**CLUSTER, "kubeflow.output_dir": str(folder / "spec")})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    path = folder / "spec" / f"{NAME}.yaml"
    assert f"Compiled pipeline '{NAME}' for Kubeflow Pipelines: {path}" in result.stdout
    assert "compiled only" in result.stdout
    return load_spec(path)[0], path.read_text()


def guarded(spec) -> dict:
    """The pipeline's steps: all inside the exit handler
    (pipeline/kubeflow/client/exit_handler.py)."""
    return spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]


def _args(spec, task):
    component = spec["components"][guarded(spec)[task]["componentRef"]["name"]]
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    return container, dict(zip(container["args"][::2], container["args"][1::2], strict=True))


def _constant(spec, task, parameter):
    return guarded(spec)[task]["inputs"]["parameters"][parameter][
        "runtimeValue"]["constant"]


def test_spec_holds_every_component_in_the_configured_image(compiled):
    spec, _ = compiled
    tasks = guarded(spec)
    assert set(tasks) == {*EXECUTORS, "CsvExampleGenDriver"}
    assert spec["schemaVersion"] == "2.1.0"
    assert spec["defaultPipelineRoot"] == "gs://acme-ml/tfx/nightly"
    for task, executor_class in EXECUTORS.items():
        container, args = _args(spec, task)
        assert container["image"] == IMAGE
        declared = spec["components"][tasks[task]["componentRef"]["name"]].get(
            "outputDefinitions", {}).get("artifacts", {})
        assert container["command"] == entrypoint(task, *declared)
        assert args["--executor_class_path"] == executor_class
        assert args["--json_serialized_invocation_args"] == "{{$}}"
    assert task_order(tasks)[:2] == ["CsvExampleGenDriver", "CsvExampleGen"]


def test_production_beam_args_reach_every_step(compiled):
    """TFX passes them to every executor; the Beam-based ones (ExampleGen, StatisticsGen,
    Transform, Evaluator) run their pipelines with them."""
    spec, _ = compiled
    for task in EXECUTORS:
        container, _ = _args(spec, task)
        assert container["args"][-len(BEAM):] == BEAM, task


def test_every_entry_point_imports_from_the_installed_project(compiled):
    from tfx.utils import import_utils

    spec, _ = compiled
    for task in EXECUTORS:
        _, args = _args(spec, task)
        assert import_utils.import_class_by_path(args["--executor_class_path"])
    assert _constant(spec, "Transform", "preprocessing_fn") == (
        "components.transform.preprocessing_fn")
    assert _constant(spec, "Trainer", "run_fn") == "components.trainer.training.run_fn"


def test_spec_has_nothing_open_source_kfp_cannot_run(compiled):
    spec, text = compiled
    assert open_source_problems(spec) == []
    for vertex_only in ("resolver", "outputArtifactQueries", "lifecycle", "preCacheCheck",
                        "constantValue", "customJob"):
        assert vertex_only not in text
    # User code by module path: no module file, no wheel built for it.
    assert not re.search(r"module_file|module_path|\.whl|_wheels", text)


def test_spec_points_at_cluster_paths_not_this_machine(compiled):
    spec, text = compiled
    assert str(REPO) not in text
    assert _constant(spec, "CsvExampleGen", "input_base") == "gs://acme-ml/data/spans"
    assert _constant(spec, "DriftCheck", "input_base") == "gs://acme-ml/data/spans"
    assert _constant(spec, "SkewCheck", "input_base") == "gs://acme-ml/data/spans"
    assert _constant(spec, "SkewCheck", "serving_base") == "gs://acme-ml/tfx/nightly/requests"
    assert _constant(spec, "ServingBaseline", "model_base_path") == f"gs://acme-ml/serving/{MODEL}"
    assert json.loads(_constant(spec, "Pusher", "push_destination")) == {
        "filesystem": {"base_directory": f"gs://acme-ml/serving/{MODEL}"}}
    assert _constant(spec, "ImportSchemaGen", "schema_file") == (
        f"{IMAGE_WORKDIR}/configs/schema.pbtxt")


def test_every_step_has_its_resources(compiled):
    """No step's container is BestEffort: each has the config's CPU request and memory request
    and limit (kubeflow.resources; the default, the Trainer its override), as the numbers of
    ResourceSpec that every KFP driver from 2.4.1 to 2.17 reads (driver.go getPodResource)."""
    from core.resources import DEFAULT, parse_quantity
    from devtools.kfp_backend.resources import pod_resources

    spec, _ = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert DEFAULT.memory_request == DEFAULT.memory_limit and DEFAULT.cpu_limit is None
    steps = {**guarded(spec), "RunExit": spec["root"]["dag"]["tasks"]["RunExit"]}
    for task_name, task in steps.items():
        label = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        got = pod_resources(task_name, executors[label]["container"])
        memory = 3 * 2 ** 30 if task_name == "Trainer" else parse_quantity(DEFAULT.memory_limit)
        assert got == {"requests": {"cpu": parse_quantity(DEFAULT.cpu_request), "memory": memory},
                       "limits": {"memory": memory}}, task_name
    assert set(executors["Trainer_executor"]["container"]["resources"]) == {
        "cpuRequest", "memoryRequest", "memoryLimit"}


def test_the_span_driver_is_a_task_of_its_own_never_cached(compiled):
    spec, _ = compiled
    tasks = guarded(spec)
    driver = tasks["CsvExampleGenDriver"]
    assert driver["cachingOptions"] == {"enableCache": False}
    container, _ = _args(spec, "CsvExampleGenDriver")
    assert container["command"] == entrypoint(
        "CsvExampleGenDriver", "examples",
        module="tfx.orchestration.kubeflow.v2.file_based_example_gen.driver")
    assert container["image"] == IMAGE
    example_gen = tasks["CsvExampleGen"]
    assert example_gen["cachingOptions"] == {"enableCache": True}
    for key in ("span", "input_fingerprint", "input_config"):
        assert example_gen["inputs"]["parameters"][key] == {"taskOutputParameter": {
            "producerTask": "CsvExampleGenDriver", "outputParameterKey": key}}
    # The executor's inputs spec declares them, so the span arrives as an integer.
    _, args = _args(spec, "CsvExampleGen")
    inputs_spec = json.loads(args["--json_serialized_inputs_spec_args"])
    assert inputs_spec["parameters"]["span"] == {"parameterType": "NUMBER_INTEGER"}


def test_the_run_report_that_releases_the_run_lease_is_never_cached(compiled):
    """A cached step runs nothing: a run report served from the cache would leave the lease
    held after every unchanged night."""
    tasks = guarded(compiled[0])
    assert tasks["RunReport"]["cachingOptions"] == {"enableCache": False}
    # And the exit step gives it back whatever the outcome (a stopped night's steps never reach
    # the run report).
    exit_args = compiled[0]["deploymentSpec"]["executors"]["RunExit_executor"]["container"]
    assert exit_args["args"][0] == "--night_lease"
    assert json.loads(exit_args["args"][1])["role"] == "release"
    assert tasks["Pusher"]["cachingOptions"] == {"enableCache": True}


def test_the_skew_check_is_never_cached(compiled):
    """Requests arrive whether the training data changed or not: a cached SkewCheck would show
    the night before's serving span (a local run digests the spans instead: spans_fingerprint)."""
    assert guarded(compiled[0])["SkewCheck"]["cachingOptions"] == {"enableCache": False}
    assert guarded(compiled[0])["SkewGate"]["cachingOptions"] == {"enableCache": True}


@pytest.mark.slow
def test_without_the_run_lease_the_steps_get_no_lease_flag(tmp_path):
    config = write_config(tmp_path, {**CLUSTER, "kubeflow.output_dir": str(tmp_path / "spec"),
                                     "kubeflow.run_lease.enabled": False})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    spec = load_spec(tmp_path / "spec" / f"{NAME}.yaml")[0]
    commands = [e["container"]["command"] + e["container"].get("args", [])
                for e in spec["deploymentSpec"]["executors"].values()]
    assert commands and not [c for c in commands if "--night_lease" in c]
    assert guarded(spec)["RunReport"]["cachingOptions"] == {"enableCache": True}


def test_dockerfile_bakes_in_what_the_spec_references():
    dockerfile = (REPO / "deploy" / "kubeflow" / "Dockerfile").read_text()
    assert f"WORKDIR {IMAGE_WORKDIR}\n" in dockerfile
    assert "COPY configs/ configs/" in dockerfile
    assert "-r /tmp/requirements-image.lock" in dockerfile and "--no-deps ." in dockerfile
    assert re.search(r"^USER [1-9][0-9]*$", dockerfile, re.M), "a numeric non-root user"
    assert "pip install -e" not in dockerfile and "--editable" not in dockerfile


def test_open_source_check_catches_what_tfx_compiles_for_vertex(tmp_path):
    """A latest-blessed-model Resolver, compiled by TFX, is flagged."""
    from tfx.dsl.components.common import resolver
    from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import (
        LatestBlessedModelStrategy)
    from tfx.orchestration import pipeline as tfx_pipeline
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner, KubeflowV2DagRunnerConfig)
    from tfx.types import Channel, standard_artifacts

    latest = resolver.Resolver(strategy_class=LatestBlessedModelStrategy,
                               model=Channel(type=standard_artifacts.Model),
                               model_blessing=Channel(type=standard_artifacts.ModelBlessing))
    spec = KubeflowV2DagRunner(KubeflowV2DagRunnerConfig(use_pipeline_spec_2_1=True)).run(
        tfx_pipeline.Pipeline(pipeline_name="p", pipeline_root=str(tmp_path),
                              components=[latest.with_id("latest_blessed")]),
        write_out=False)["pipelineSpec"]
    problems = "\n".join(open_source_problems(spec))
    assert "resolver executor" in problems and "artifact query" in problems


def test_open_source_check_catches_old_schema_and_hooks():
    spec = {"schemaVersion": "2.0.0", "components": {"A": {"inputDefinitions": {
        "parameters": {"x": {"type": "STRING"}}}}},
            "deploymentSpec": {"executors": {"A_executor": {"container": {
                "image": "i:1", "lifecycle": {"preCacheCheck": {}}}}}}}
    problems = open_source_problems(spec)
    assert len(problems) == 3, problems
    assert all(any(word in p for p in problems)
               for word in ("schemaVersion", "lifecycle hook", "parameterType"))


# --- the config's kubeflow section


def test_kubeflow_section_is_optional_with_defaults(tmp_path):
    config = load_config(write_config(tmp_path, {"kubeflow": None}))
    assert config.kubeflow.schedule == "0 2 * * *" and config.kubeflow.kfp_cron == "0 0 2 * * *"
    assert config.kubeflow.endpoint is None and config.kubeflow.beam_args == []


def test_bundled_kubeflow_section_loads():
    kubeflow = load_yaml((REPO / "configs" / "pipeline.yaml").read_text())["kubeflow"]
    config = load_config(REPO / "configs" / "pipeline.yaml").kubeflow
    assert config.image == kubeflow["image"] and config.experiment == kubeflow["experiment"]
    assert config.output_dir == (REPO / "outputs" / "kubeflow")


@pytest.mark.parametrize("changes, words", [
    ({"kubeflow.imag": "x:1"}, "kubeflow.imag: unknown key"),
    ({"kubeflow.image": "tfx-pipeline-template:latest"}, "kubeflow.image"),
    ({"kubeflow.image": "tfx-pipeline-template"}, "pinned tag"),
    ({"kubeflow.schedule": "at two"}, "kubeflow.schedule"),
    ({"kubeflow.endpoint": "localhost:8080"}, "http(s) URL"),
    ({"kubeflow.run_lease.expiry_s": 60}, "kubeflow.run_lease.expiry_s"),
    ({"kubeflow.run_lease.expiry_s": 7200},
     "run_lease.expiry_s 7200 is not longer than training.job.timeout_s 86400"),
    ({"kubeflow.run_lease.expirey_s": 7200}, "kubeflow.run_lease.expirey_s: unknown key"),
])
def test_kubeflow_mistakes_name_the_key(tmp_path, changes, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(write_config(tmp_path, changes))


def test_six_field_cron_is_kept(tmp_path):
    config = load_config(write_config(tmp_path, {"kubeflow.schedule": "30 15 2 * * 1-5"}))
    assert config.kubeflow.kfp_cron == "30 15 2 * * 1-5"


def test_the_run_report_outputs_are_the_types_the_kfp_ui_renders(compiled):
    """MetricsVisualizations.tsx (KFP 2.3.0) lists system.HTML, system.Markdown and
    system.Metrics artifacts; the backend records an output's schema title as its MLMD type."""
    spec, text = compiled
    component = spec["components"][guarded(spec)["RunReport"]["componentRef"][
        "name"]]
    outputs = component["outputDefinitions"]["artifacts"]
    assert {k: v["artifactType"] for k, v in outputs.items()} == {
        "html": {"schemaTitle": "system.HTML", "schemaVersion": "0.0.1"},
        "markdown": {"schemaTitle": "system.Markdown", "schemaVersion": "0.0.1"},
        "metrics": {"schemaTitle": "system.Metrics", "schemaVersion": "0.0.1"}}
    assert "report.HTML" not in text  # TFX's own title is gone
    config = json.loads(_constant(spec, "RunReport", "config"))
    assert config["data"]["input_base"] == "gs://acme-ml/data/spans"
    assert _constant(spec, "RunReport", "input_base") == "gs://acme-ml/data/spans"


def test_retitling_touches_only_the_report_types():
    """spec.py's rule on a literal component: TFX writes a custom type as an instanceSchema
    titled with its TYPE_NAME; other outputs keep their tfx.* titles."""
    from pipeline.kubeflow.client.spec import _retitle_for_the_ui

    component = {"outputDefinitions": {"artifacts": {
        "html": {"artifactType": {"instanceSchema": "title: report.HTML\ntype: object\n"}},
        "examples": {"artifactType": {"schemaTitle": "tfx.Examples", "schemaVersion": "0.0.1"}},
        "other": {"artifactType": {"instanceSchema": "title: acme.Thing\n"}}}}}
    _retitle_for_the_ui(component)
    kinds = {k: v["artifactType"] for k, v in component["outputDefinitions"]["artifacts"].items()}
    assert kinds == {"html": {"schemaTitle": "system.HTML", "schemaVersion": "0.0.1"},
                     "examples": {"schemaTitle": "tfx.Examples", "schemaVersion": "0.0.1"},
                     "other": {"instanceSchema": "title: acme.Thing\n"}}


# -- serving.release: canary: the release step after the Pusher, its status to the RunReport --

@pytest.fixture(scope="module")
def compiled_canary(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kubeflow_canary")
    config = write_config(folder, {**CLUSTER, "kubeflow.output_dir": str(folder / "spec"),
                                   "serving.release": "canary",
                                   "serving.namespace": "serving"})
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    return load_spec(folder / "spec" / f"{NAME}.yaml")[0]


def test_a_canary_spec_releases_after_the_pusher_and_reports_it(compiled, compiled_canary):
    from tfx.utils import import_utils

    from core.rollout import rollout_name

    spec = compiled_canary
    tasks = guarded(spec)
    assert set(tasks) == {*EXECUTORS, "CsvExampleGenDriver", "Release"}
    assert open_source_problems(spec) == []
    container, args = _args(spec, "Release")
    assert container["image"] == IMAGE and container["command"] == entrypoint("Release", "status")
    assert args["--executor_class_path"] == "components.release.executor.Executor"
    assert import_utils.import_class_by_path(args["--executor_class_path"])
    assert tasks["Release"]["dependentTasks"] == ["Pusher"]
    assert tasks["Release"]["inputs"]["artifacts"]["pushed_model"]["taskOutputArtifact"] == {
        "outputArtifactKey": "pushed_model", "producerTask": "Pusher"}
    rollout = f"serving/{rollout_name(MODEL)}"
    assert _constant(spec, "Release", "rollout") == _constant(
        spec, "ServingBaseline", "rollout") == rollout
    assert tasks["RunReport"]["inputs"]["artifacts"]["release"]["taskOutputArtifact"] == {
        "outputArtifactKey": "status", "producerTask": "Release"}
    # Negative control: the direct spec has no release step and its steps no rollout.
    direct = guarded(compiled[0])
    assert "Release" not in direct and "release" not in direct["RunReport"]["inputs"]["artifacts"]
    assert "rollout" not in direct["ServingBaseline"]["inputs"]["parameters"]


@pytest.mark.slow
def test_the_release_status_type_is_imported_in_the_pod(compiled_canary):
    """release.Status, the title TFX's compiler requires, is no import path: the entrypoint
    retitles it to the class on both sides (the release step's output, the report's input)."""
    from tfx.utils import import_utils

    from pipeline.kubeflow.step.entrypoint import restore_custom_classes

    component = compiled_canary["components"]["Release"]
    kind = component["outputDefinitions"]["artifacts"]["status"]["artifactType"]
    executor_input = {
        "outputs": {"artifacts": {"status": {"artifacts": [{"uri": "s3://b/s", "type": kind}]}}},
        "inputs": {"artifacts": {"release": {"artifacts": [
            {"uri": "s3://b/s", "type": {"schemaTitle": "release.Status"}}]},
            "pushed_model": {"artifacts": [{"uri": "s3://b/p",
                                            "type": {"schemaTitle": "tfx.PushedModel"}}]}}}}
    with pytest.raises(ImportError):  # negative control: TFX imports the title as a class path
        import_utils.import_class_by_path("release.Status")
    fixed = restore_custom_classes(executor_input)
    for side, key in (("outputs", "status"), ("inputs", "release")):
        title = fixed[side]["artifacts"][key]["artifacts"][0]["type"]["schemaTitle"]
        assert import_utils.import_class_by_path(title).TYPE_NAME == "release.Status"
    assert fixed["inputs"]["artifacts"]["pushed_model"]["artifacts"][0]["type"] == {
        "schemaTitle": "tfx.PushedModel"}


def test_the_steps_run_inside_an_exit_handler_and_the_exit_step_after_it_whatever_happens(
        compiled):
    """kfp's dsl.ExitHandler shape (exit_handler.py); the exit step gets the config the
    RunReport gets, and the DAG's final status (the default backend_version is 2.14.0+)."""
    from pipeline.kubeflow.client.exit_handler import exit_handler_problems

    spec, text = compiled
    assert exit_handler_problems(spec) == []
    assert set(spec["root"]["dag"]["tasks"]) == {"exit-handler-1", "RunExit"}
    exit_task = spec["root"]["dag"]["tasks"]["RunExit"]
    assert exit_task["triggerPolicy"] == {"strategy": "ALL_UPSTREAM_TASKS_COMPLETED"}
    assert exit_task["inputs"]["parameters"]["guarded_tasks"]["runtimeValue"]["constant"] == (
        sorted(guarded(spec)))
    assert exit_task["inputs"]["parameters"]["final_status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}}
    config = json.loads(exit_task["inputs"]["parameters"]["config"]["runtimeValue"]["constant"])
    report = json.loads(_constant(spec, "RunReport", "config"))
    assert config == {**report, "notify": {**report["notify"], "webhook_file": None}}


def test_the_webhook_url_comes_from_the_named_secret_never_the_spec(compiled):
    _, text = compiled
    platform = list(load_yaml_all(text))[1]
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert executors == {"RunExit_executor": {"secretAsEnv": [{
        "secretName": "night-webhook",
        "keyToEnv": [{"secretKey": "url", "envVar": "PIPELINE_WEBHOOK_URL"}]}]}}
    assert "hooks.slack.com" not in text and "https://" not in text
