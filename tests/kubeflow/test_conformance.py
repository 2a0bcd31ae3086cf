"""The conformance runner's backend behaviours, each on a literal spec (no TFX step runs).

Each test names the KFP 2.3.0 backend file whose behaviour it pins (kubeflow/pipelines,
backend/src/v2); the runner's code names the same file beside the behaviour.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from devtools import kfp_backend as conformance
from devtools.kfp_backend import (
    DEFAULT_PIPELINE_ROOT,
    ObjectStore,
    Runner,
    SpecError,
    TaskFailed,
    pipeline_root,
    read_launcher_config,
    read_secrets,
)
from pipeline.kubeflow.entrypoint import (EntrypointError, prepare, restore_input_types,
                                          restore_output_classes)
from devtools.local_image import (ImageError, installed_lock, modules_not_in,
                                            parse_dockerfile)
from tests.helpers import REPO
from tests.s3_server import s3  # noqa: F401  (fixture)

EXAMPLES = {"schemaTitle": "tfx.Examples", "schemaVersion": "0.0.1"}


def literal_spec(executor: dict | None = None) -> dict:
    """Two tasks: Gen writes `examples`, Stats reads it; like TFX's spec, in miniature."""
    container = {"image": "img:1", "command": ["python", "-m", "step"],
                 "args": ["--in", "{{$}}"]}
    return {
        "pipelineInfo": {"name": "mini"}, "schemaVersion": "2.1.0",
        "defaultPipelineRoot": "gs://never-read/root",
        "components": {
            "Gen": {"executorLabel": "Gen_executor", "outputDefinitions": {
                "artifacts": {"examples": {"artifactType": EXAMPLES}},
                "parameters": {"span": {"parameterType": "NUMBER_INTEGER"}}}},
            "Stats": {"executorLabel": "Stats_executor", "inputDefinitions": {
                "artifacts": {"examples": {"artifactType": EXAMPLES}},
                "parameters": {"exclude": {"parameterType": "STRING"}}}}},
        "deploymentSpec": {"executors": {"Gen_executor": executor or {"container": container},
                                         "Stats_executor": {"container": container}}},
        "root": {"dag": {"tasks": {
            "Gen": {"taskInfo": {"name": "Gen"}, "componentRef": {"name": "Gen"},
                    "cachingOptions": {"enableCache": True}},
            "Stats": {"taskInfo": {"name": "Stats"}, "componentRef": {"name": "Stats"},
                      "dependentTasks": ["Gen"], "inputs": {
                          "artifacts": {"examples": {"taskOutputArtifact": {
                              "producerTask": "Gen", "outputArtifactKey": "examples"}}},
                          "parameters": {"exclude": {"runtimeValue": {"constant": "[]"}}}}}}}}}


def launcher_configmap(tmp_path, data):
    path = tmp_path / "kfp-launcher.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "kfp-launcher", "namespace": "kubeflow"},
                                    "data": data}))
    return read_launcher_config(path)


# -- pipeline root: backend/src/v2/driver/driver.go RootDAG, backend/src/v2/config/env.go

def test_the_runs_root_wins_then_the_launcher_configmap_then_minio(tmp_path):
    config = launcher_configmap(tmp_path, {"defaultPipelineRoot": "s3://from-configmap/r"})
    assert pipeline_root("s3://from-run/r", config) == "s3://from-run/r"
    assert pipeline_root(None, config) == "s3://from-configmap/r"
    assert pipeline_root(None, launcher_configmap(tmp_path, {})) == DEFAULT_PIPELINE_ROOT
    assert pipeline_root(None, None) == "minio://mlpipeline/v2/artifacts"


def test_only_a_configmap_named_kfp_launcher_is_read(tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump({"kind": "ConfigMap", "metadata": {"name": "other"},
                                    "data": {"defaultPipelineRoot": "s3://x/y"}}))
    with pytest.raises(SpecError, match="kfp-launcher"):
        read_launcher_config(path)


# -- the driver: backend/src/v2/driver/driver.go, backend/src/v2/metadata/client.go

def test_output_uris_are_root_pipeline_run_task_key_and_typed_from_the_spec(tmp_path):
    runner = Runner(literal_spec(), "s3://bucket/tfx/", tmp_path)
    outputs = runner._outputs("run-1", "Gen", literal_spec()["components"]["Gen"])
    [artifact] = outputs["artifacts"]["examples"]["artifacts"]
    assert artifact["uri"] == "s3://bucket/tfx/mini/run-1/Gen/examples"
    assert artifact["type"] == EXAMPLES
    assert outputs["outputFile"] == "/tmp/kfp_outputs/output_metadata.json"
    assert outputs["parameters"]["span"]["outputFile"] == "/tmp/kfp/outputs/span"


def test_upstream_artifacts_arrive_as_mlmd_gives_them_back_with_an_empty_schema(tmp_path):
    spec = literal_spec()
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state")
    recorded = runner._record_artifacts(
        runner._outputs("run-1", "Gen", spec["components"]["Gen"]),
        {"artifacts": {"examples": {"artifacts": [{"metadata": {"span": 3.0}}]}}}, tmp_path)
    runner.results["Gen"] = conformance.TaskResult("Gen", "ran", 0, recorded, {}, 1)
    inputs = runner._inputs("Stats", spec["root"]["dag"]["tasks"]["Stats"],
                            spec["components"]["Stats"])
    [artifact] = inputs["artifacts"]["examples"]["artifacts"]
    assert artifact["type"] == {"instanceSchema": ""}  # not tfx.Examples
    assert artifact["name"] == "1"  # the MLMD id
    assert artifact["metadata"]["span"] == 3.0
    assert artifact["metadata"]["display_name"] == "examples"  # RecordArtifact's default
    assert "store_session_info" in artifact["metadata"]


@pytest.mark.parametrize("kind,expected", [
    ({"resolver": {"outputArtifactQueries": {}}}, "open-source KFP runs none"),
    ({"importer": {"artifactUri": {"constant": "gs://x"}}},
     "Open-source KFP supports importers.*this runner does not")])
def test_executors_the_backend_rejects_are_refused(tmp_path, kind, expected):
    with pytest.raises(SpecError, match=expected):
        Runner(literal_spec(kind), str(tmp_path), tmp_path).run()


# -- the cache key: backend/src/v2/cacheutils/cache.go GenerateCacheKey

def test_the_cache_key_sees_what_the_backend_sees_and_nothing_else():
    spec = literal_spec()
    component = spec["components"]["Gen"]
    container = spec["deploymentSpec"]["executors"]["Gen_executor"]["container"]

    def key(uri="s3://b/r/mini/run-1/Gen/examples", **changes):
        inputs = {"parameterValues": {"p": "1"}, "artifacts": {"a": {"artifacts": [
            {"name": changes.get("input_id", "7"), "uri": "ignored"}]}}}
        outputs = {"artifacts": {"examples": {"artifacts": [{"uri": uri, "type": EXAMPLES}]}},
                   "parameters": {"span": {"outputFile": "/tmp/kfp/outputs/span"}}}
        return conformance._fingerprint({"inputs": inputs, "outputs": outputs}, component,
                                        {**container, **changes.get("container", {})})

    assert key() == key(uri="s3://b/r/mini/run-2/Gen/examples")  # URIs wiped
    assert key() == key(container={"env": [{"name": "X", "value": "1"}]})  # env not in it
    assert key() != key(input_id="8")  # a new upstream artifact is new work
    assert key() != key(container={"image": "img:2"})
    assert key() != key(container={"args": ["--in", "{{$}}", "--more"]})


# -- the kubernetes PlatformSpec: driver.go extendPodSpecPatch (secretAsEnv)

PLATFORM = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"Gen_executor": {
    "secretAsEnv": [{"secretName": "mlpipeline-minio-artifact", "keyToEnv": [
        {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"}]}]}}}}}}


def test_secret_as_env_comes_from_the_named_secret_and_a_missing_one_fails_the_step(tmp_path):
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Secret",
                                       "metadata": {"name": "mlpipeline-minio-artifact"},
                                       "data": {"accesskey": base64.b64encode(b"k").decode()}}))
    spec = literal_spec()
    container = spec["deploymentSpec"]["executors"]["Gen_executor"]["container"]
    runner = Runner(spec, str(tmp_path), tmp_path, PLATFORM, read_secrets(secrets))
    assert runner._pod_env("Gen", "Gen_executor", container)["AWS_ACCESS_KEY_ID"] == "k"
    with pytest.raises(TaskFailed, match='CreateContainerConfigError: secret '
                                         '"mlpipeline-minio-artifact" not found'):
        Runner(spec, str(tmp_path), tmp_path, PLATFORM, {})._pod_env("Gen", "Gen_executor",
                                                                     container)


# -- the launcher's object store: launcher_v2.go downloadArtifacts / uploadOutputArtifacts

def test_the_launcher_round_trips_an_artifact_folder_through_s3_and_minio(s3, tmp_path):  # noqa: F811
    store = ObjectStore(s3.env)
    local = tmp_path / "out"
    (local / "Split-train").mkdir(parents=True)
    (local / "Split-train" / "data.gz").write_bytes(b"rows")
    (local / "schema.pbtxt").write_text("feature {}")
    uri = f"s3://{s3.bucket}/tfx/mini/run-1/Gen/examples"
    assert store.upload(local, uri) == 2
    assert sorted(s3.keys("tfx/mini/run-1/Gen/")) == [
        "tfx/mini/run-1/Gen/examples/Split-train/data.gz",
        "tfx/mini/run-1/Gen/examples/schema.pbtxt"]
    back = tmp_path / "minio" / s3.bucket / "examples"
    assert store.download(f"minio://{s3.bucket}/tfx/mini/run-1/Gen/examples", back) == 2
    assert (back / "Split-train" / "data.gz").read_bytes() == b"rows"


def test_a_remote_root_without_credentials_fails_at_the_launchers_open_bucket(tmp_path):
    runner = Runner(literal_spec(), DEFAULT_PIPELINE_ROOT, tmp_path, store_env={})
    with pytest.raises(TaskFailed, match="cannot open the bucket of minio://mlpipeline"):
        runner.run(until="Gen")


# -- the image: deploy/kubeflow/Dockerfile; the entrypoint

def test_the_image_is_emulated_from_the_dockerfiles_workdir_env_and_copy_lines():
    workdir, env, copies = parse_dockerfile((REPO / "deploy/kubeflow/Dockerfile").read_text())
    assert workdir == "/opt/pipeline"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert ("configs/", "configs/") in copies and ("pipeline/", "pipeline/") in copies


def test_the_image_hides_what_its_lock_leaves_out():
    import setuptools  # noqa: F401  (puts its vendored distributions on sys.path)
    import sysconfig

    hidden = modules_not_in("pyyaml==6.0.1\n", project="tfx-pipeline-template",
                            site_packages=sysconfig.get_paths()["purelib"])
    assert {"pytest", "moto", "tensorflow"} <= set(hidden)
    # The lock's, the project's own (from its wheel) and the venv's seeds stay importable.
    assert not {"yaml", "pipeline", "components", "models", "pip"} & set(hidden)
    # setuptools' vendored packages (jaraco, ...) are its own business, in the image too.
    assert "jaraco" not in hidden
    assert installed_lock("COPY a.lock /tmp/a.lock\nRUN uv pip install -r /tmp/a.lock\n") == (
        "a.lock")
    with pytest.raises(ImageError, match="must COPY one lock file"):
        installed_lock("COPY a.lock /tmp/a.lock\nRUN uv pip install -r /tmp/other.lock\n")


def test_the_entrypoint_restores_each_input_type_from_the_inputs_spec():
    executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
        {"name": "1", "uri": "s3://b/x", "type": {"instanceSchema": ""}}]}},
        "parameterValues": {"input_base": "s3://b/data"}}}
    spec = {"artifacts": {"examples": {"artifactType": EXAMPLES}}}
    _, args, uris = prepare([
        "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
        "--json_serialized_invocation_args", json.dumps(executor_input),
        "--json_serialized_inputs_spec_args", json.dumps(spec), "--runner=DirectRunner"])
    restored = json.loads(args[1])
    assert restored["inputs"]["artifacts"]["examples"]["artifacts"][0]["type"] == EXAMPLES
    assert args[-1] == "--runner=DirectRunner"
    assert sorted(uris) == ["s3://b/data", "s3://b/x"]
    with pytest.raises(EntrypointError, match="does not declare it"):
        restore_input_types(executor_input | {"inputs": {"artifacts": {"other": {
            "artifacts": [{"type": {"instanceSchema": ""}}]}}}}, spec)


def test_a_folder_marker_object_breaks_the_download_as_in_the_launcher(s3, tmp_path):  # noqa: F811
    """objectstore.DownloadBlob writes the key "<artifact>/" as a file at the artifact's local
    path, so the files below it cannot be written: steps must not leave folder markers."""
    s3.client.put_object(Bucket=s3.bucket, Key="marker/mini/r/T/out/", Body=b"")
    s3.client.put_object(Bucket=s3.bucket, Key="marker/mini/r/T/out/file", Body=b"x")
    with pytest.raises(TaskFailed, match="failed to download input artifact"):
        ObjectStore(s3.env).download(f"s3://{s3.bucket}/marker/mini/r/T/out",
                                     tmp_path / "local")


def test_config_map_as_env_comes_from_the_named_config_map(tmp_path):
    platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"Gen_executor": {
        "configMapAsEnv": [{"configMapName": "object-store", "keyToEnv": [
            {"configMapKey": "endpoint", "envVar": "S3_ENDPOINT"}]}]}}}}}}
    spec = literal_spec()
    container = spec["deploymentSpec"]["executors"]["Gen_executor"]["container"]
    runner = Runner(spec, str(tmp_path), tmp_path, platform,
                    config_maps={"object-store": {"endpoint": "http://minio:9000"}})
    assert runner._pod_env("Gen", "Gen_executor", container)["S3_ENDPOINT"] == "http://minio:9000"
    with pytest.raises(TaskFailed, match='configmap "object-store" not found'):
        Runner(spec, str(tmp_path), tmp_path, platform)._pod_env("Gen", "Gen_executor",
                                                                 container)


def test_the_platform_spec_is_the_compiled_files_second_yaml_document(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(literal_spec()) + "---\n" + yaml.safe_dump(PLATFORM))
    spec, platform = conformance.load_spec(path)
    assert spec["pipelineInfo"]["name"] == "mini" and platform == PLATFORM
    path.write_text(yaml.safe_dump(literal_spec()) + "---\n" + yaml.safe_dump(
        {"platforms": {"kubernetes": {"deploymentSpec": {"executors": []}}}}))
    with pytest.raises(SpecError, match="not a KFP PipelineSpec"):
        conformance.load_spec(path)


def test_without_a_mount_namespace_the_workdir_path_is_rewritten_to_the_copy(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    (image / "image.json").write_text(json.dumps({
        "workdir": "/opt/pipeline", "env": {}, "python_bin": str(image / "venv" / "bin"),
        "workdir_copy": str(image / "workdir")}))
    runner = Runner(literal_spec(), str(tmp_path), tmp_path, image=image)
    runner.mount_namespace = False  # e.g. not root: unshare --mount is refused
    argv, cwd = runner._in_pod(["python", "--schema", "/opt/pipeline/configs/schema.pbtxt"],
                               tmp_path / "pod")
    assert argv[-1] == f"{image}/workdir/configs/schema.pbtxt"
    assert cwd == image / "workdir"
    runner.mount_namespace = True
    argv, _ = runner._in_pod(["python", "/opt/pipeline/x"], tmp_path / "pod")
    assert argv[:2] == ["unshare", "--mount"] and argv[-1] == "/opt/pipeline/x"


def test_the_entrypoint_builds_the_report_outputs_as_their_tfx_classes():
    """The UI's system.* titles are no import path: TFX would fail to build the outputs."""
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils
    from tfx.utils import import_utils

    executor_input = {"outputs": {"artifacts": {
        "html": {"artifacts": [{"uri": "s3://b/r/html",
                                "type": {"schemaTitle": "system.HTML",
                                         "schemaVersion": "0.0.1"}}]},
        "examples": {"artifacts": [{"uri": "s3://b/r/examples",
                                    "type": {"schemaTitle": "tfx.Examples"}}]}}}}
    fixed = restore_output_classes(executor_input)["outputs"]["artifacts"]
    html_type = fixed["html"]["artifacts"][0]["type"]
    assert import_utils.import_class_by_path(html_type["schemaTitle"]).TYPE_NAME == "report.HTML"
    assert fixed["examples"]["artifacts"][0]["type"] == {"schemaTitle": "tfx.Examples"}
    assert hasattr(utils, "parse_raw_artifact_dict")


# -- scheduling: the Argo Workflow of argocompiler/dag.go (depends: <task>.Succeeded), no
# WorkflowSpec.parallelism (argocompiler/argo.go), Argo's DAG failFast (default true)

def shell_spec(scripts: dict[str, str], needs: dict[str, list[str]]) -> dict:
    """One task per script (`sh -c SCRIPT`), each depending on needs[task]."""
    return {
        "pipelineInfo": {"name": "shells"}, "schemaVersion": "2.1.0",
        "components": {name: {"executorLabel": f"{name}_executor"} for name in scripts},
        "deploymentSpec": {"executors": {f"{name}_executor": {"container": {
            "image": "img:1", "command": ["sh", "-c", script]}}
            for name, script in scripts.items()}},
        "root": {"dag": {"tasks": {name: {
            "taskInfo": {"name": name}, "componentRef": {"name": name},
            **({"dependentTasks": needs[name]} if needs.get(name) else {})}
            for name in scripts}}}}


def wait_for(mark, seconds: int, code: int = 9) -> str:
    return (f"i=0; while [ ! -e {mark} ]; do i=$((i+1)); [ $i -gt {seconds * 10} ] && "
            f"exit {code}; sleep 0.1; done")


@pytest.fixture
def pods(tmp_path):
    """A minimal image (a WORKDIR and no packages) and a folder the pods leave marks in."""
    if not conformance._can_unshare():
        pytest.skip("unshare --mount is refused here (not root): tasks run one at a time")
    image, marks = tmp_path / "image", tmp_path / "marks"
    for folder in (image / "workdir", tmp_path / "wd", marks):
        folder.mkdir(parents=True)
    (image / "image.json").write_text(json.dumps({
        "workdir": str(tmp_path / "wd"), "env": {}, "python_bin": "/usr/bin",
        "workdir_copy": str(image / "workdir")}))
    return image, marks


def run_record(runner) -> dict:
    return {name: task["status"] for name, task in json.loads(
        runner.record.read_text())["tasks"].items()}


def test_tasks_whose_upstream_succeeded_run_at_once(tmp_path, pods):
    """A and B each wait for the other's mark: they pass only if both run at the same time."""
    image, marks = pods
    spec = shell_spec({"A": f"touch {marks}/A; {wait_for(marks / 'B', 60)}",
                       "B": f"touch {marks}/B; {wait_for(marks / 'A', 60)}",
                       "C": f"touch {marks}/C"}, {"C": ["A", "B"]})
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    result = runner.run()
    assert result.names("ran") == ["A", "B", "C"]
    assert run_record(runner) == {"A": "ran", "B": "ran", "C": "ran"}


def test_with_parallelism_one_the_tasks_wait_for_each_other_and_a_failure_starts_nothing(
        tmp_path, pods):
    """The same A and B one at a time: A waits in vain and fails; B, ready, never starts."""
    image, marks = pods
    spec = shell_spec({"A": f"touch {marks}/A; {wait_for(marks / 'B', 2)}",
                       "B": f"touch {marks}/B; {wait_for(marks / 'A', 2)}",
                       "C": f"touch {marks}/C"}, {"C": ["A", "B"]})
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    with pytest.raises(TaskFailed, match="task A exited with 9"):
        runner.run(parallelism=1)
    assert run_record(runner) == {"A": "failed", "B": "not run", "C": "not run"}
    assert sorted(p.name for p in marks.iterdir()) == ["A"]


def test_after_a_failure_running_tasks_finish_and_no_task_starts(tmp_path, pods):
    """Argo's failFast: F fails while S runs; S finishes (and is recorded), T (ready, waiting
    for a slot) and U (after S) never start, and the run fails with F's error."""
    image, marks = pods
    spec = shell_spec({"F": f"{wait_for(marks / 'S', 60)}; exit 3",
                       "S": f"touch {marks}/S; sleep 3; touch {marks}/S.done",
                       "T": f"touch {marks}/T", "U": f"touch {marks}/U"}, {"U": ["S"]})
    runner = Runner(spec, str(tmp_path / "root"), tmp_path / "state", image=image)
    with pytest.raises(TaskFailed, match="task F exited with 3"):
        runner.run(parallelism=2)
    assert run_record(runner) == {"F": "failed", "S": "ran", "T": "not run", "U": "not run"}
    assert sorted(p.name for p in marks.iterdir()) == ["S", "S.done"]


# -- --prefork: a `python -m` step forked from a preloaded server sees the pod a fresh one sees

POD_PROBE = '''
import json, os, sys
from pathlib import Path
print("cwd", os.getcwd(), "path0", sys.path[0], "argv", sys.argv[1:])
print("env", os.environ.get("FROM_IMAGE"), os.environ.get("FROM_SPEC"),
      os.environ.get("ONLY_THE_RUNNER_HAS"))
try:
    Path("written-by-the-step").write_text("x")
    print("workdir writable")
except OSError as error:
    print("workdir read-only:", error.strerror)
Path("/tmp/kfp_outputs/output_metadata.json").write_text(json.dumps(
    {"parameterValues": {"span": 7}}))
sys.exit(int(os.environ.get("EXIT", "0")))
'''


def python_spec(exit_code: int) -> dict:
    """One task, `python -m pod_probe` from the image's WORKDIR, with env from the spec."""
    spec = shell_spec({"P": "unused"}, {})
    spec["components"]["P"]["outputDefinitions"] = {
        "parameters": {"span": {"parameterType": "NUMBER_INTEGER"}}}
    spec["deploymentSpec"]["executors"]["P_executor"]["container"] = {
        "image": "img:1", "command": ["python", "-m", "pod_probe"], "args": ["--flag", "x"],
        "env": [{"name": "FROM_SPEC", "value": "spec"}, {"name": "EXIT", "value": str(exit_code)}]}
    return spec


@pytest.mark.parametrize("exit_code", [0, 4])
def test_a_forked_step_sees_the_pod_a_fresh_step_sees(tmp_path, pods, monkeypatch, exit_code):
    import os
    import sys

    image, _ = pods
    (image / "workdir" / "pod_probe.py").write_text(POD_PROBE)
    described = json.loads((image / "image.json").read_text())
    described.update(env={"FROM_IMAGE": "image"}, python_bin=os.path.dirname(sys.executable))
    (image / "image.json").write_text(json.dumps(described))
    monkeypatch.setenv("ONLY_THE_RUNNER_HAS", "runner")
    host_mounts = Path("/proc/self/mountinfo").read_text()
    logs, outputs = {}, {}
    for prefork in (False, True):
        # STEP_PRELOAD is TensorFlow's ~11 s of imports: a small library here.
        runner = Runner(python_spec(exit_code), str(tmp_path / "root"),
                        tmp_path / f"state-{prefork}", image=image, prefork=prefork,
                        prefork_preload=("json",))
        run_id = "run-1"
        if exit_code:
            with pytest.raises(TaskFailed, match=f"task P exited with {exit_code}"):
                runner.run(run_id=run_id)
        else:
            outputs[prefork] = runner.run(run_id=run_id).tasks["P"].parameters
        logs[prefork] = (tmp_path / f"state-{prefork}" / "pods" / run_id / "P" / "P.log"
                         ).read_text()
    workdir = described["workdir"]
    # The pods' mounts stayed in their own namespaces.
    assert Path("/proc/self/mountinfo").read_text() == host_mounts
    assert logs[True] == logs[False]
    assert logs[True].splitlines() == [
        f"cwd {workdir} path0 {workdir} argv ['--flag', 'x']", "env image spec None",
        "workdir read-only: Read-only file system"]
    if not exit_code:
        assert outputs[True] == outputs[False] == {"span": 7}
