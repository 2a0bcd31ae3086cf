"""The compiled spec, run task by task through the local KFP backend (devtools/kfp_backend) as
an open-source KFP release's driver and launcher run it, from the image emulated from
deploy/kubeflow/Dockerfile (the project as its wheel installs it, configs/ at /opt/pipeline).

The image itself; the step check: the spec's StatisticsGen handed an ExecutorInput built here as
the 2.17.0 and the 2.4.1 drivers build it, with our entrypoint's set-aside of the outputs the
backend adds and without it (the negative control: 2.17.0 fails as TFX does, 2.4.1 passes);
and the other negative controls: the spec without our entrypoint dies at StatisticsGen on 2.4.1;
an image without configs/ fails; a run with no root gets KFP's minio:// default and fails
clearly; TFX's own Vertex spec finds no span without its driver task. The nights themselves run
on an s3:// root as on a cluster, on 2.17.0 and 2.4.1: test_s3_night.py.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    compile_for_local_backend,
    copy_spans,
    dump_yaml,
    load_yaml,
    run_cli,
    without_entrypoint,
    without_output_handling,
    write_config,
)

pytestmark = pytest.mark.e2e


def conformance(spec, *args, root=None, env=None):
    """`python -m devtools.kfp_backend` and the run's record (None if none)."""
    result = run_cli("devtools.kfp_backend", str(spec),
                     *(["--pipeline-root", str(root)] if root else []), *args, timeout=3000,
                     env=env)
    found = re.search(r"details:\s+(\S+)", result.stdout + result.stderr)
    record = json.loads(Path(found.group(1)).read_text())["tasks"] if found else None
    return result, record


@pytest.fixture(scope="session")
def image(step_image):
    """The step image, emulated once per session (tests/conftest.py), shared with test_s3_night."""
    return step_image


def find_in_image(image, *modules, cwd):
    """Where the image's Python finds each module (None: not importable), from cwd."""
    code = ("import importlib.util as u, json, sys; print(json.dumps({m: getattr(u.find_spec(m), "
            "'origin', None) for m in sys.argv[1:]}))")
    result = subprocess.run([str(image / "venv" / "bin" / "python"), "-c", code, *modules],
                            cwd=cwd, capture_output=True, text=True, check=True,
                            env={"PATH": "/usr/bin:/bin"})
    return json.loads(result.stdout)


def test_the_image_imports_the_project_from_its_wheel_not_the_checkout(image, tmp_path):
    found = find_in_image(image, "core", "pipeline", "components", "models", "tfx", "devtools",
                          cwd=tmp_path)
    for package in ("core", "pipeline", "components", "models"):
        assert found[package].startswith(str(image / "venv")), found
    assert found["tfx"] is not None  # the lock's packages are there
    assert found["devtools"] is None  # the dev tools are not shipped


def test_the_image_has_the_runtime_lock_only(image, tmp_path):
    """What requirements-image.lock leaves out (the dev extras) is not importable in a step, as in
    the real image; find_spec raises for it, like an import."""
    code = ("import sys\ntry:\n    __import__(sys.argv[1])\nexcept ImportError as e:\n"
            "    print(e)\nelse:\n    print('imported')")
    python = str(image / "venv" / "bin" / "python")

    def try_import(module):
        return subprocess.run([python, "-c", code, module], cwd=tmp_path, capture_output=True,
                              text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stdout
    for module in ("moto", "pytest", "kubernetes_validate"):
        assert "not in the image: requirements-image.lock" in try_import(module), module
    for module in ("yaml", "requests", "pip"):
        assert try_import(module) == "imported\n", module


def test_a_package_left_out_of_the_wheel_and_the_image_cannot_be_imported(tmp_path):
    """A packaging gap fails: models/ neither in the wheel nor copied into the WORKDIR."""
    from devtools.local_image import build

    context = tmp_path / "context"
    context.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements-image.lock", "core", "pipeline",
                 "components", "models", "configs"):
        source = REPO / name
        (shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__"))
         if source.is_dir() else shutil.copy2(source, context / name))
    pyproject = context / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(', "models*"', ""))
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text((REPO / "deploy/kubeflow/Dockerfile").read_text().replace(
        "COPY models/ models/", ""))
    gap = build(tmp_path / "image", dockerfile, context)
    assert find_in_image(gap, "models", cwd=gap / "workdir")["models"] is None
    assert find_in_image(gap, "pipeline", cwd=tmp_path)["pipeline"] is not None


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("conformance")
    _, data, path = compile_for_local_backend(folder)
    return folder, data, path


@pytest.fixture(scope="module")
def no_fix_run(compiled, image):
    """The spec with TFX's own entrypoints, run to StatisticsGen on 2.4.1 (before the backend
    added executor-logs): ExampleGen has no input artifact and runs."""
    folder, _, spec = compiled
    no_fix = folder / "no_fix.yaml"
    no_fix.write_text(dump_yaml(without_entrypoint(load_yaml(spec.read_text()))))
    return conformance(no_fix, "--image", str(image), "--until", "StatisticsGen",
                       "--backend-version", "2.4.1", root=folder / "no-fix-root")


def test_without_our_entrypoint_the_spec_dies_at_statistics_gen_as_on_the_backend(no_fix_run):
    """Negative control: TFX's own entrypoint cannot parse an input artifact whose type the
    driver read back from MLMD as an empty schema (metadata/client.go)."""
    result, tasks = no_fix_run
    assert result.returncode == 1
    assert tasks["CsvExampleGen"]["status"] == "ran"  # no input artifact: fine
    assert tasks["StatisticsGen"]["status"] == "failed"
    assert "task StatisticsGen exited with 1" in result.stderr
    # TFX's own failure, not any AttributeError (one of the emulation's would pass "AttributeError"
    # alone): load_yaml("") is None in kubeflow_v2_entrypoint_utils._retrieve_class_path.
    assert "in _retrieve_class_path" in result.stderr, result.stderr[-3000:]
    assert "AttributeError: 'NoneType' object has no attribute 'get'" in result.stderr


def as_the_driver_builds_it(tag: str, spec: dict, examples: dict, run_root: str) -> dict:
    """StatisticsGen's ExecutorInput as the `tag` driver builds it, written here from the Go code
    (kubeflow/pipelines backend/src/v2), not from the emulation's driver: the upstream Examples as
    ML Metadata gives them back (name = the MLMD id, the metadata, type.instanceSchema "":
    metadata/client.go GetOutputArtifactsByExecutionId, OutputArtifact.ToRuntimeArtifact), the
    task's constant, outputs under <run root>/<task>/<uuid>/<key> typed from the spec
    (driver/driver.go provisionOutputs). 2.17.0 adds `executor-logs` (system.Artifact), names
    each output by its key and puts the ExecutorOutput file in the task root (its local folder:
    for a local root, the folder itself); its launcher then qualifies the logs' URI with -0
    (component/launcher_v2.go qualifyExecutorLogsURI), as the step receives it."""
    from devtools.kfp_backend.spec import dag_tasks

    task = dag_tasks(spec)[0]["StatisticsGen"]  # inside the exit handler
    component = spec["components"][task["componentRef"]["name"]]
    task_root = f"{run_root}/StatisticsGen/{uuid.uuid4()}"
    statistics = {"uri": f"{task_root}/statistics",
                  "type": component["outputDefinitions"]["artifacts"]["statistics"][
                      "artifactType"]}
    inputs = {"parameterValues": {"exclude_splits": task["inputs"]["parameters"][
        "exclude_splits"]["runtimeValue"]["constant"]}, "artifacts": {"examples": {"artifacts": [
            {"name": examples["name"], "uri": examples["uri"], "metadata": examples["metadata"],
             "type": {"instanceSchema": ""}}]}}}
    if tag == "2.4.1":
        return {"inputs": inputs, "outputs": {
            "artifacts": {"statistics": {"artifacts": [statistics]}}, "parameters": {},
            "outputFile": "/tmp/kfp_outputs/output_metadata.json"}}
    assert tag == "2.17.0"
    return {"inputs": inputs, "outputs": {"artifacts": {
        "statistics": {"artifacts": [{"name": "statistics", **statistics}]},
        "executor-logs": {"artifacts": [{"name": "executor-logs",
                                         "uri": f"{task_root}/executor-logs",
                                         "type": {"schemaTitle": "system.Artifact"}}]}},
        "parameters": {}, "outputFile": f"{task_root}/output_metadata.json"}}


@pytest.fixture(scope="module")
def step_checks(compiled, image, no_fix_run, tmp_path_factory):
    """The compiled spec's StatisticsGen, run by each release's emulated launcher from the image on
    the ExecutorInput its driver builds (the examples: no_fix_run's ExampleGen), with our
    entrypoint as compiled and with its set-aside removed (the step's command compiled without
    --declared_output_artifacts). The four steps fork one server that imported the image's
    libraries. {(tag, handled): (TaskResult or TaskFailed, the ExecutorInput)}"""
    from devtools.kfp_backend import Runner, TaskFailed, step_server

    _, _, spec_path = compiled
    _, tasks = no_fix_run
    assert tasks["CsvExampleGen"]["status"] == "ran"
    examples = tasks["CsvExampleGen"]["artifacts"]["examples"]
    spec = load_yaml(spec_path.read_text())
    variants = {True: spec, False: without_output_handling(spec, "StatisticsGen_executor")}
    folder = tmp_path_factory.mktemp("step_check")
    found = {}
    with step_server(json.loads((image / "image.json").read_text()), folder / "prefork") as steps:
        steps.wait_ready(timeout=600)
        for tag in ("2.17.0", "2.4.1"):
            for handled, variant in variants.items():
                root = folder / f"root-{tag}-{handled}"
                executor_input = as_the_driver_builds_it(
                    tag, variant, examples, f"{root}/{spec['pipelineInfo']['name']}/run-1")
                runner = Runner(variant, str(root), folder / f"state-{tag}-{handled}",
                                image=image, prefork=steps.socket_path, version=tag)
                try:
                    result = runner.run_step("StatisticsGen", executor_input)
                except TaskFailed as error:
                    result = error
                found[tag, handled] = result, executor_input
    return found


def statistics_written(result, executor_input) -> None:
    """The step ran and the launcher recorded TFX's statistics where the driver put them."""
    assert not isinstance(result, Exception), str(result)
    statistics = result.artifacts["statistics"]
    assert statistics["uri"] == executor_input["outputs"]["artifacts"]["statistics"][
        "artifacts"][0]["uri"]
    assert statistics["type"] == "tfx.ExampleStatistics"
    assert json.loads(statistics["metadata"]["split_names"]) == ["train", "eval"]
    assert {p.name for p in Path(statistics["uri"]).iterdir()} >= {"Split-train", "Split-eval"}


@pytest.mark.parametrize("tag", ["2.17.0", "2.4.1"])
def test_the_compiled_statistics_gen_passes_with_the_executor_input_each_driver_builds(
        step_checks, tag):
    result, executor_input = step_checks[tag, True]
    statistics_written(result, executor_input)
    if tag == "2.17.0":
        # TFX wrote its ExecutorOutput where the 2.17.0 driver put the file, naming only its
        # own output; the launcher wrote, uploaded (here: left) and recorded the logs.
        output = json.loads(Path(executor_input["outputs"]["outputFile"]).read_text())
        assert set(output["artifacts"]) == {"statistics"}
        logs = result.artifacts["executor-logs"]
        assert logs["type"] == "system.Artifact" and logs["uri"].endswith("/executor-logs-0")
        assert "Starting executor" in Path(logs["uri"]).read_text()
    else:
        assert set(result.artifacts) == {"statistics"}


def test_without_the_set_aside_2_17_0_fails_as_tfx_does_and_2_4_1_still_passes(step_checks):
    """Negative control: our entrypoint handing TFX every output, as TFX's own does."""
    from devtools.kfp_backend import TaskFailed

    failed, _ = step_checks["2.17.0", False]
    assert isinstance(failed, TaskFailed)
    assert "task StatisticsGen exited with 1" in str(failed)
    assert "ImportError: Could not import system.Artifact" in str(failed)
    assert set(failed.artifacts) == {"executor-logs"}  # recorded on failure (2.16.0+)
    statistics_written(*step_checks["2.4.1", False])


def test_an_image_without_configs_fails_where_the_spec_reads_the_schema(compiled, tmp_path):
    """A packaging gap fails: the spec reads /opt/pipeline/configs/schema.pbtxt."""
    from devtools.local_image import build

    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text((REPO / "deploy/kubeflow/Dockerfile").read_text().replace(
        "COPY configs/ configs/", ""))
    gap = build(tmp_path / "image", dockerfile)
    _, _, spec = compiled
    result, _ = conformance(spec, "--image", str(gap), "--until", "ImportSchemaGen",
                            root=tmp_path / "root")
    assert result.returncode == 1
    assert "/opt/pipeline/configs/schema.pbtxt" in result.stderr


def test_a_run_without_a_root_gets_kfps_minio_default_and_fails_clearly(compiled, tmp_path):
    """No runtime root and no kfp-launcher ConfigMap: the backend's default, minio://, which
    the spec's own defaultPipelineRoot does not change (driver.go, config/env.go)."""
    _, _, spec = compiled
    result, _ = conformance(spec, "--state", str(tmp_path / "state"))
    assert result.returncode == 1
    assert "pipeline root minio://mlpipeline/v2/artifacts" in result.stdout
    # The launcher's default minio:// session names the cluster's store (config/env.go).
    assert "cannot open the bucket of minio://mlpipeline/v2/artifacts: its default minio:// " \
        "session" in result.stderr


@pytest.fixture(scope="module")
def vertex_spec(tmp_path_factory):
    """The spec as TFX compiles it (for Vertex), without pipeline.kubeflow's adaptation."""
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner,
        KubeflowV2DagRunnerConfig,
    )

    from core.config import load_config
    from pipeline.builder import build_pipeline

    folder = tmp_path_factory.mktemp("vertex_spec")
    config = load_config(write_config(folder, data_dir=copy_spans(folder)))
    spec = KubeflowV2DagRunner(KubeflowV2DagRunnerConfig(
        default_image="tfx-pipeline-template:test", use_pipeline_spec_2_1=True)).run(
        build_pipeline(config), write_out=False)["pipelineSpec"]
    path = folder / "vertex.yaml"
    path.write_text(dump_yaml(spec))
    return path, folder


def test_without_its_driver_task_example_gen_finds_no_span_on_open_source_kfp(vertex_spec, image):
    """Why pipeline.kubeflow moves the driver out of lifecycle.preCacheCheck (never read, at
    every release; on 2.4.1, because from 2.5.0 TFX's own entrypoint fails earlier, on the
    executor-logs output)."""
    path, folder = vertex_spec
    result, _ = conformance(path, "--image", str(image), "--until", "CsvExampleGen",
                            "--backend-version", "2.4.1", root=folder / "oss-root")
    assert result.returncode == 1
    assert "lifecycle.preCacheCheck ignored" in result.stdout
    assert "DataError: no data files match" in result.stderr
