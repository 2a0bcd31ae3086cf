"""The local KFP backend's behaviours (devtools/kfp_backend), each on a literal spec (no TFX step
runs), at the releases where they differ.

Each test names the kubeflow/pipelines file (backend/src/v2) whose behaviour it pins; the
emulation's code names the same file beside the behaviour, and devtools/kfp_backend/SOURCES lists
them all. The expectations are written here from the Go code at each tag, not from the
emulation.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import re
from pathlib import Path

import pytest

from devtools import kfp_backend
from devtools.kfp_backend import (
    DEFAULT_PIPELINE_ROOT,
    Runner,
    SpecError,
    TaskFailed,
    TaskResult,
    backend,
    cache,
    driver,
    launcher,
    metadata,
    pipeline_root,
    pod,
    read_launcher_config,
    read_secrets,
)
from devtools.local_image import ImageError, installed_lock, modules_not_in, parse_dockerfile
from pipeline.kubeflow.step.entrypoint import (EntrypointError, prepare, restore_input_types,
                                          restore_output_classes, set_aside_undeclared_outputs)
from tests.helpers import REPO, dump_yaml
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
    path.write_text(dump_yaml({"apiVersion": "v1", "kind": "ConfigMap",
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
    path.write_text(dump_yaml({"kind": "ConfigMap", "metadata": {"name": "other"},
                                    "data": {"defaultPipelineRoot": "s3://x/y"}}))
    with pytest.raises(SpecError, match="kfp-launcher"):
        read_launcher_config(path)


# -- the driver: driver/driver.go provisionOutputs (driver/container.go calls it at 2.17.0),
# metadata/client.go GetPipeline, GetOutputArtifactsByExecutionId

UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def provisioned(tag: str, root: str, work: Path) -> dict:
    return driver.provision_outputs(driver.run_root(root, "mini", "run-1"), "Gen",
                                    literal_spec()["components"]["Gen"], backend(tag),
                                    lambda uri: launcher.local_path(uri, work))


def test_at_2_4_1_outputs_are_under_the_task_root_with_a_uuid_and_the_output_file_is_in_tmp(
        tmp_path):
    outputs = provisioned("2.4.1", "s3://bucket/tfx/", tmp_path)
    assert set(outputs["artifacts"]) == {"examples"}
    [artifact] = outputs["artifacts"]["examples"]["artifacts"]
    assert set(artifact) == {"uri", "type"}  # no name before 2.15.0
    assert re.fullmatch(f"s3://bucket/tfx/mini/run-1/Gen/{UUID}/examples", artifact["uri"])
    assert artifact["type"] == EXAMPLES
    assert outputs["outputFile"] == "/tmp/kfp_outputs/output_metadata.json"
    assert outputs["parameters"]["span"]["outputFile"] == "/tmp/kfp/outputs/span"


def test_at_2_17_0_every_task_gets_executor_logs_names_and_its_output_file_in_the_task_root(
        tmp_path):
    outputs = provisioned("2.17.0", "s3://bucket/tfx/", tmp_path)
    artifacts = {k: v["artifacts"][0] for k, v in outputs["artifacts"].items()}
    assert set(artifacts) == {"examples", "executor-logs"}
    task_root = artifacts["examples"]["uri"].rsplit("/", 1)[0]
    assert re.fullmatch(f"s3://bucket/tfx/mini/run-1/Gen/{UUID}", task_root)
    assert artifacts == {
        "examples": {"name": "examples", "uri": f"{task_root}/examples", "type": EXAMPLES},
        "executor-logs": {"name": "executor-logs", "uri": f"{task_root}/executor-logs",
                          "type": {"schemaTitle": "system.Artifact"}}}
    # /s3/<bucket>/<key>/output_metadata.json in the pod: here under the pod's folder.
    assert outputs["outputFile"] == str(
        tmp_path / "s3" / task_root.removeprefix("s3://") / "output_metadata.json")
    assert outputs["parameters"]["span"]["outputFile"] == "/tmp/kfp/outputs/span"
    # A second execution of the task gets a task root of its own.
    assert provisioned("2.17.0", "s3://bucket/tfx", tmp_path)["artifacts"]["examples"][
        "artifacts"][0]["uri"] != artifacts["examples"]["uri"]


@pytest.mark.parametrize("tag,since", [("2.4.1", None), ("2.5.0", "executor_logs"),
                                       ("2.15.0", "task_root_output_file"),
                                       ("2.16.0", "logs_on_failure"),
                                       ("2.16.1", "logs_retry_suffix"),
                                       ("2.17.0", "download_under_key")])
def test_each_release_has_the_behaviours_its_code_has(tag, since):
    """versions.py: read at each tag (git show TAG:backend/src/v2/...)."""
    arrived = {"2.4.1": set(), "2.5.0": {"executor_logs"},
               # task_final_status came with 2.14.0, not emulated: 2.15.0 is the first that is.
               "2.15.0": {"task_root_output_file", "output_names", "cache_pvc_names",
                          "session_max_retries", "task_final_status"},
               "2.16.0": {"seaweedfs_endpoint", "logs_on_failure"},
               "2.16.1": {"logs_retry_suffix", "logs_not_merged"},
               "2.17.0": {"download_under_key", "env_credentials_with_endpoint"}}
    tags = list(arrived)
    expected = set().union(*(arrived[t] for t in tags[:tags.index(tag) + 1]))
    release = backend(tag)
    assert {k for k, v in dataclasses.asdict(release).items() if v is True} == expected
    assert since is None or since in arrived[tag]
    assert set(kfp_backend.versions.CHANGES) == set(dataclasses.asdict(release)) - {"tag"}


def test_a_release_not_read_is_refused():
    with pytest.raises(SpecError, match="2.18.0.*not emulated"):
        backend("2.18.0")
    assert kfp_backend.NEWEST == "2.17.0"


def test_sources_lists_every_file_the_emulation_cites_and_nothing_else():
    """The audit's one diff covers what the code follows (devtools/kfp_backend/SOURCES)."""
    folder = REPO / "devtools" / "kfp_backend"
    sources = [line for line in (folder / "SOURCES").read_text().splitlines()
               if line and not line.startswith("#")]
    cited = set()
    for module in folder.glob("*.py"):
        text = module.read_text()
        cited |= set(re.findall(r"[\w./-]+\.(?:go|proto)\b|ml-pipeline-[\w-]+\.yaml", text))
    cited = {c for c in cited if not c.startswith(("devtools/", "pipeline/"))}
    unlisted = {c for c in cited if not any(s == c or s.endswith("/" + c) for s in sources)}
    assert unlisted == set()
    assert [s for s in sources if not any(s == c or s.endswith("/" + c) for c in cited)] == []
    assert sources == sorted(sources)


def test_upstream_artifacts_arrive_as_mlmd_gives_them_back_with_an_empty_schema(tmp_path):
    spec = literal_spec()
    recorded = metadata.Metadata(tmp_path).record_artifact(
        "examples", {"uri": "s3://b/r/mini/run-1/Gen/u/examples", "type": EXAMPLES,
                     "metadata": {"span": 3.0}}, '{"Provider":"s3"}')
    gen = TaskResult("Gen", "ran", 0, {"examples": recorded}, {}, 1)
    inputs = driver.resolve_inputs("Stats", spec["root"]["dag"]["tasks"]["Stats"],
                                   spec["components"]["Stats"], {"Gen": gen})
    [artifact] = inputs["artifacts"]["examples"]["artifacts"]
    assert artifact["type"] == {"instanceSchema": ""}  # not tfx.Examples
    assert artifact["name"] == "1"  # the MLMD id
    assert artifact["metadata"] == {"span": 3.0, "display_name": "examples",
                                    "store_session_info": '{"Provider":"s3"}'}
    assert inputs["parameterValues"] == {"exclude": "[]"}


def test_the_session_info_follows_each_releases_minio_defaults():
    """config/env.go getDefaultMinioSessionInfo, objectstore/config.go's endpoint."""
    from devtools.kfp_backend.objectstore import session_info

    old, new = (json.loads(session_info("minio://mlpipeline/v2/artifacts", backend(t)))
                for t in ("2.4.1", "2.17.0"))
    assert old["Params"]["endpoint"] == "minio-service.kubeflow:9000"
    assert new["Params"]["endpoint"] == "seaweedfs.kubeflow:9000"
    assert "maxRetries" not in old["Params"] and new["Params"]["maxRetries"] == "5"
    assert json.loads(session_info("s3://b/r", backend()))["Params"] == {"fromEnv": "true"}


@pytest.mark.parametrize("kind,expected", [
    ({"resolver": {"outputArtifactQueries": {}}}, "resolver executors not implemented"),
    ({"importer": {"artifactUri": {"constant": "gs://x"}}},
     "Open-source KFP supports importers.*this runner does not")])
def test_executors_the_backend_rejects_are_refused(tmp_path, kind, expected):
    with pytest.raises(SpecError, match=expected):
        Runner(literal_spec(kind), str(tmp_path), tmp_path).run()


# -- the cache key: cacheutils/cache.go GenerateCacheKey, driver/cache.go getFingerPrint

def test_the_cache_key_sees_what_the_backend_sees_and_nothing_else(tmp_path):
    spec = literal_spec()
    component = spec["components"]["Gen"]
    container = spec["deploymentSpec"]["executors"]["Gen_executor"]["container"]

    def key(tag="2.17.0", pvcs=(), **changes):
        outputs = provisioned(tag, changes.get("root", "s3://b/r"), tmp_path)
        inputs = {"parameterValues": {"p": "1"}, "artifacts": {"a": {"artifacts": [
            {"name": changes.get("input_id", "7"), "uri": "ignored"}]}}}
        return cache.fingerprint({"inputs": inputs, "outputs": outputs}, component,
                                 {**container, **changes.get("container", {})}, backend(tag),
                                 pvcs)

    for tag in ("2.4.1", "2.17.0"):
        assert key(tag) == key(tag)  # URIs (and their uuids) wiped
        assert key(tag) == key(tag, root="s3://other/r")
        assert key(tag) == key(tag, container={"env": [{"name": "X", "value": "1"}]})
        assert key(tag) != key(tag, input_id="8")  # a new upstream artifact is new work
        assert key(tag) != key(tag, container={"image": "img:2"})
        assert key(tag) != key(tag, container={"args": ["--in", "{{$}}", "--more"]})
    # PVC names are in the key from 2.15.0; executor-logs (2.5.0) and the outputs' names
    # (2.15.0) are too: an upgraded backend finds none of the old entries.
    assert key("2.4.1", pvcs=("data",)) == key("2.4.1")
    assert key("2.17.0", pvcs=("data",)) != key("2.17.0")
    assert len({key(t) for t in ("2.4.1", "2.5.0", "2.15.0")}) == 3
    assert key("2.15.0") == key("2.16.1") == key("2.17.0")


def test_a_cached_execution_must_hold_every_output_of_the_new_executor_input(tmp_path):
    """driver/cache.go collectOutputArtifactMetadataFromCache."""
    entries = cache.Cache(tmp_path, "kubeflow", "mini")
    outputs = provisioned("2.17.0", "s3://b/r", tmp_path)
    entries.put("k", "Gen", "run-0", {"examples": {}}, {}, 1)
    with pytest.raises(TaskFailed, match="unable to find artifact with name executor-logs"):
        entries.get("k", outputs)
    entries.put("k", "Gen", "run-0", {"examples": {}, "executor-logs": {}}, {}, 1)
    assert entries.get("k", outputs)["run_id"] == "run-0"
    assert entries.get("other", outputs) is None


# -- the kubernetes PlatformSpec: driver.go extendPodSpecPatch (secretAsEnv)

PLATFORM = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"Gen_executor": {
    "secretAsEnv": [{"secretName": "mlpipeline-minio-artifact", "keyToEnv": [
        {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"}]}]}}}}}}


def gen_env(platform: dict, secrets=None, config_maps=None) -> dict:
    """Gen's pod env (driver/k8s.go extendPodSpecPatch; driver/driver.go at 2.4.1)."""
    container = literal_spec()["deploymentSpec"]["executors"]["Gen_executor"]["container"]
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["Gen_executor"]
    return driver.pod_env("Gen", container, {}, k8s, secrets or {}, config_maps or {}, {}, print)


def test_secret_as_env_comes_from_the_named_secret_and_a_missing_one_fails_the_step(tmp_path):
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text(dump_yaml({"apiVersion": "v1", "kind": "Secret",
                                       "metadata": {"name": "mlpipeline-minio-artifact"},
                                       "data": {"accesskey": base64.b64encode(b"k").decode()}}))
    assert gen_env(PLATFORM, read_secrets(secrets))["AWS_ACCESS_KEY_ID"] == "k"
    with pytest.raises(TaskFailed, match='CreateContainerConfigError: secret '
                                         '"mlpipeline-minio-artifact" not found'):
        gen_env(PLATFORM)


# -- the launcher's object store: launcher_v2.go downloadArtifacts / uploadOutputArtifacts

def test_the_launcher_round_trips_an_artifact_folder_through_s3_and_minio(s3, tmp_path):  # noqa: F811
    store = s3.object_store(backend())
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


@pytest.mark.parametrize("tag,downloaded", [
    ("2.4.1", ["examples-old/stale", "examples/data"]), ("2.17.0", ["examples/data"])])
def test_a_download_takes_the_key_and_what_is_under_it_and_to_2_16_a_sibling_too(
        s3, tmp_path, tag, downloaded):  # noqa: F811
    """objectstore/object_store.go DownloadBlob lists with the key as prefix: to 2.16.1 a
    sibling key `<key>-old` lands beside the artifact's folder (filepath.Rel gives ../); from
    2.17.0 only keys under `<key>/` (isBlobKeyUnderPrefix)."""
    prefix = f"download-{tag}/T"  # the session's bucket is shared
    for key in ("examples/data", "examples-old/stale"):
        s3.client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{key}", Body=b"x")
    local = tmp_path / "s3" / "examples"
    store = s3.object_store(backend(tag))
    assert store.download(f"s3://{s3.bucket}/{prefix}/examples", local,
                          pod=tmp_path) == len(downloaded)
    assert sorted(str(p.relative_to(tmp_path / "s3")) for p in (tmp_path / "s3").rglob("*")
                  if p.is_file()) == downloaded


@pytest.mark.parametrize("tag", ["2.4.1", "2.17.0"])
def test_a_key_climbing_out_of_the_pod_is_never_written_on_this_machine(s3, tmp_path, tag):  # noqa: F811
    """Issue 25: to 2.16 a key `<key>/../../...` lands where filepath.Join puts it (inside the
    real pod's file system); the emulation wrote it outside its folder, on this machine. Now the
    task fails naming the key (2.17.0 refuses it as the backend does: path traversal)."""
    prefix = f"climb-{tag}/T"
    climbing = f"{prefix}/examples/" + "../" * 8 + "escaped"
    s3.client.put_object(Bucket=s3.bucket, Key=climbing, Body=b"x")
    pod = tmp_path / "pod"
    local = pod / "s3" / s3.bucket / prefix / "examples"
    store = s3.object_store(backend(tag))
    with pytest.raises(TaskFailed, match="outside the pod's folder|path traversal"):
        store.download(f"s3://{s3.bucket}/{prefix}/examples", local, pod=pod)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not (tmp_path.parent / "escaped").exists()


def test_a_remote_root_without_credentials_fails_at_the_launchers_open_bucket(tmp_path):
    runner = Runner(literal_spec(), DEFAULT_PIPELINE_ROOT, tmp_path)
    with pytest.raises(TaskFailed, match="cannot open the bucket of minio://mlpipeline"):
        runner.run(until="Gen")


# -- the image: deploy/kubeflow/Dockerfile; the entrypoint

def test_the_image_is_emulated_from_the_dockerfiles_workdir_env_and_copy_lines():
    workdir, env, copies = parse_dockerfile((REPO / "deploy/kubeflow/Dockerfile").read_text())
    assert workdir == "/opt/pipeline"
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert ("configs/", "configs/") in copies and ("pipeline/", "pipeline/") in copies


@pytest.mark.slow
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


STATS_RUNNER = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"


def with_backend_outputs() -> dict:
    """An ExecutorInput's outputs as the 2.17.0 driver gives them: the component's `statistics`
    and the backend's `executor-logs`."""
    return {"inputs": {"artifacts": {}, "parameterValues": {}}, "outputs": {"artifacts": {
        "statistics": {"artifacts": [{"name": "statistics", "uri": "s3://b/r/T/u/statistics",
                                      "type": {"schemaTitle": "tfx.ExampleStatistics"}}]},
        "executor-logs": {"artifacts": [{"name": "executor-logs",
                                         "uri": "s3://b/r/T/u/executor-logs-0",
                                         "type": {"schemaTitle": "system.Artifact"}}]}},
        "outputFile": "/s3/b/r/T/u/output_metadata.json"}}


def test_the_entrypoint_sets_aside_the_outputs_the_component_does_not_declare():
    args = ["--json_serialized_invocation_args", json.dumps(with_backend_outputs()),
            "--json_serialized_inputs_spec_args", "{}"]
    module, handled, _ = prepare(["--declared_output_artifacts", '["statistics"]',
                                  STATS_RUNNER, *args])
    assert module == STATS_RUNNER and handled[0] == "--json_serialized_invocation_args"
    given = json.loads(handled[1])
    assert set(given["outputs"]["artifacts"]) == {"statistics"}
    assert given["outputs"]["artifacts"]["statistics"] == with_backend_outputs()["outputs"][
        "artifacts"]["statistics"]  # TFX's own output untouched
    assert given["outputs"]["outputFile"] == "/s3/b/r/T/u/output_metadata.json"
    # A spec compiled without the flag: every output goes to TFX, as with TFX's entrypoint.
    _, kept, _ = prepare([STATS_RUNNER, *args])
    assert set(json.loads(kept[1])["outputs"]["artifacts"]) == {"statistics", "executor-logs"}
    with pytest.raises(EntrypointError, match="takes a JSON list of output keys"):
        prepare(["--declared_output_artifacts", "statistics", STATS_RUNNER, *args])


@pytest.mark.slow
def test_tfx_cannot_build_executor_logs_and_builds_what_the_entrypoint_hands_it():
    """Negative control, in process: TFX 1.16's parser (kubeflow_v2_entrypoint_utils
    parse_raw_artifact_dict) fails on the 2.17.0 driver's outputs exactly as in a step, and
    builds them once set aside."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as utils

    def parse(executor_input):
        message = json_format.ParseDict(executor_input, pipeline_spec_pb2.ExecutorInput())
        return utils.parse_raw_artifact_dict(message.outputs.artifacts)

    with pytest.raises(ImportError, match="Could not import system.Artifact"):
        parse(with_backend_outputs())
    handled = set_aside_undeclared_outputs(with_backend_outputs(), ["statistics"])
    assert [a.type_name for a in parse(handled)["statistics"]] == ["ExampleStatistics"]


def test_a_folder_marker_object_breaks_the_download_as_in_the_launcher(s3, tmp_path):  # noqa: F811
    """objectstore.DownloadBlob writes the key "<artifact>/" as a file at the artifact's local
    path, so the files below it cannot be written: steps must not leave folder markers."""
    s3.client.put_object(Bucket=s3.bucket, Key="marker/mini/r/T/out/", Body=b"")
    s3.client.put_object(Bucket=s3.bucket, Key="marker/mini/r/T/out/file", Body=b"x")
    with pytest.raises(TaskFailed, match="failed to download input artifact"):
        s3.object_store(backend()).download(f"s3://{s3.bucket}/marker/mini/r/T/out",
                                            tmp_path / "local")


def test_config_map_as_env_comes_from_the_named_config_map(tmp_path):
    platform = {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"Gen_executor": {
        "configMapAsEnv": [{"configMapName": "object-store", "keyToEnv": [
            {"configMapKey": "endpoint", "envVar": "S3_ENDPOINT"}]}]}}}}}}
    config_maps = {"object-store": {"endpoint": "http://minio:9000"}}
    assert gen_env(platform, config_maps=config_maps)["S3_ENDPOINT"] == "http://minio:9000"
    with pytest.raises(TaskFailed, match='configmap "object-store" not found'):
        gen_env(platform)


def test_the_platform_spec_is_the_compiled_files_second_yaml_document(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(dump_yaml(literal_spec()) + "---\n" + dump_yaml(PLATFORM))
    spec, platform = kfp_backend.load_spec(path)
    assert spec["pipelineInfo"]["name"] == "mini" and platform == PLATFORM
    path.write_text(dump_yaml(literal_spec()) + "---\n" + dump_yaml(
        {"platforms": {"kubernetes": {"deploymentSpec": {"executors": []}}}}))
    with pytest.raises(SpecError, match="not a KFP PipelineSpec"):
        kfp_backend.load_spec(path)


def test_without_a_mount_namespace_the_workdir_path_is_rewritten_to_the_copy(tmp_path):
    image = tmp_path / "image"
    image.mkdir()
    (image / "image.json").write_text(json.dumps({
        "workdir": "/opt/pipeline", "env": {}, "python_bin": str(image / "venv" / "bin"),
        "workdir_copy": str(image / "workdir")}))
    runner = Runner(literal_spec(), str(tmp_path), tmp_path, image=image)
    runner.pod.mount_namespace = False  # e.g. not root: unshare --mount is refused
    argv, cwd = runner.pod.wrapped(["python", "--schema", "/opt/pipeline/configs/schema.pbtxt"],
                                   tmp_path / "pod")
    assert argv[-1] == f"{image}/workdir/configs/schema.pbtxt"
    assert cwd == image / "workdir"
    runner.pod.mount_namespace = True
    argv, _ = runner.pod.wrapped(["python", "/opt/pipeline/x"], tmp_path / "pod")
    assert argv[:2] == ["unshare", "--mount"] and argv[-1] == "/opt/pipeline/x"


@pytest.mark.slow
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
    if not pod.can_unshare():
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- executor-logs: driver/driver.go provisionOutputs adds it (2.5.0+), the launcher writes it
# (component/launcher_v2.go getLogWriter, uploadOutputArtifacts)

LOG_PROBE = """import json, sys
executor_input = json.loads(sys.argv[1])
print("to stdout", flush=True)
print("to stderr", file=sys.stderr, flush=True)
logs = executor_input["outputs"].get("artifacts", {}).get("executor-logs")
if logs:  # a step that claims the launcher's artifact in its ExecutorOutput
    claim = {"uri": logs["artifacts"][0]["uri"] + "-claimed", "metadata": {"by": "the step"}}
    with open(executor_input["outputs"]["outputFile"], "w") as out:
        json.dump({"artifacts": {"executor-logs": {"artifacts": [claim]}}}, out)
sys.exit(int(sys.argv[2]))
"""


def log_probe_runner(tmp_path, image, tag: str, exit_code: int = 0) -> Runner:
    spec = shell_spec({"L": "unused"}, {})
    spec["deploymentSpec"]["executors"]["L_executor"]["container"] = {
        "image": "img:1", "command": ["python3", "-c", LOG_PROBE, "{{$}}", str(exit_code)]}
    return Runner(spec, str(tmp_path / f"root-{tag}"), tmp_path / f"state-{tag}", image=image,
                  version=tag)


def test_the_launcher_writes_executor_logs_and_from_2_16_1_ignores_what_a_step_says_of_it(
        tmp_path, pods):
    image, _ = pods
    logs = {tag: log_probe_runner(tmp_path, image, tag).run(until="L", run_id="r").tasks[
        "L"].artifacts.get("executor-logs") for tag in ("2.4.1", "2.5.0", "2.17.0")}
    assert logs["2.4.1"] is None  # no such output before 2.5.0
    root = tmp_path / "root-2.17.0" / "shells" / "r" / "L"
    [task_root] = root.iterdir()
    assert logs["2.17.0"]["uri"] == f"{task_root}/executor-logs-0"  # qualifyExecutorLogsURI
    assert logs["2.17.0"]["type"] == "system.Artifact"
    assert "by" not in logs["2.17.0"]["metadata"]
    assert Path(logs["2.17.0"]["uri"]).read_text() == "to stdout\nto stderr\n"
    # 2.5.0 merges the step's claim (mergeRuntimeArtifacts): the record points where the
    # launcher wrote nothing. So a step must not name executor-logs in its ExecutorOutput.
    [old_root] = (tmp_path / "root-2.5.0" / "shells" / "r" / "L").iterdir()
    assert logs["2.5.0"]["uri"] == f"{old_root}/executor-logs-claimed"
    assert logs["2.5.0"]["metadata"]["by"] == "the step"
    assert (old_root / "executor-logs").read_text() == "to stdout\nto stderr\n"


@pytest.mark.parametrize("tag,recorded", [("2.5.0", set()), ("2.17.0", {"executor-logs"})])
def test_from_2_16_0_a_failed_steps_logs_are_still_recorded(tmp_path, pods, tag, recorded):
    image, _ = pods
    runner = log_probe_runner(tmp_path, image, tag, exit_code=3)
    with pytest.raises(TaskFailed, match="task L exited with 3") as failure:
        runner.run(until="L", run_id="r")
    assert set(failure.value.artifacts) == recorded
    assert set(json.loads(runner.record.read_text())["tasks"]["L"]["artifacts"]) == recorded


# -- --prefork: a `python -m` step forked from a preloaded server sees the pod a fresh one sees

POD_PROBE = '''
import json, os, sys
from pathlib import Path
print("cwd", os.getcwd(), "path0", sys.path[0], "argv", sys.argv[1:3])
print("env", os.environ.get("FROM_IMAGE"), os.environ.get("FROM_SPEC"),
      os.environ.get("ONLY_THE_RUNNER_HAS"))
try:
    Path("written-by-the-step").write_text("x")
    print("workdir writable")
except OSError as error:
    print("workdir read-only:", error.strerror)
Path(json.loads(sys.argv[3])["outputs"]["outputFile"]).write_text(json.dumps(
    {"parameterValues": {"span": 7}}))
sys.exit(int(os.environ.get("EXIT", "0")))
'''


def python_spec(exit_code: int) -> dict:
    """One task, `python -m pod_probe` from the image's WORKDIR, with env from the spec."""
    spec = shell_spec({"P": "unused"}, {})
    spec["components"]["P"]["outputDefinitions"] = {
        "parameters": {"span": {"parameterType": "NUMBER_INTEGER"}}}
    spec["deploymentSpec"]["executors"]["P_executor"]["container"] = {
        "image": "img:1", "command": ["python", "-m", "pod_probe"],
        "args": ["--flag", "x", "{{$}}"],
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


# -- the launcher's session: the kfp-launcher ConfigMap's providers (config/env.go, config/s3.go)

def no_providers() -> dict:
    """kfp-launcher as KFP's manifests install it (base/pipeline/kfp-launcher-configmap.yaml)."""
    return {"kind": "ConfigMap", "metadata": {"name": "kfp-launcher"},
            "data": {"defaultPipelineRoot": ""}}


@pytest.mark.parametrize("tag", ["2.4.1", "2.17.0"])
def test_without_providers_an_s3_root_gets_awss_client_and_the_download_fails(
        s3, tmp_path, tag):  # noqa: F811
    """Negative control: the objects are in the store, but with no providers.s3 the session is
    fromEnv and the launcher's client is AWS's (object_store.go OpenBucket), so the download
    fails there; with the README's providers the same download works."""
    from devtools.kfp_backend.objectstore import ObjectStore

    s3.client.put_object(Bucket=s3.bucket, Key=f"aws-{tag}/T/examples/data.gz", Body=b"x")
    uri = f"s3://{s3.bucket}/aws-{tag}/T/examples"
    secrets = {"mlpipeline-minio-artifact": s3.secret_object()["stringData"]}
    store = ObjectStore(backend(tag), no_providers(), secrets)
    with pytest.raises(TaskFailed, match=re.escape(
            f"failed to download input artifact from remote storage URI '{uri}': failed to list "
            f"objects in remote storage 'aws-{tag}/T/examples': operation error S3: "
            "ListObjectsV2, https://s3.us-east-1.amazonaws.com")):
        store.download(uri, tmp_path / "no-providers", env=s3.env)
    with pytest.raises(TaskFailed, match="failed to upload output artifact.*PutObject"):
        store.upload(tmp_path, uri + "-out", env=s3.env)
    assert ObjectStore(backend(tag), s3.launcher_config(), secrets).download(
        uri, tmp_path / "providers") == 1


def test_a_run_without_providers_fails_at_its_first_upload(s3, tmp_path):  # noqa: F811
    """2.17.0: the first task's executor-logs upload is the launcher's first call to AWS."""
    spec = {"pipelineInfo": {"name": "aws"}, "schemaVersion": "2.1.0",
            "components": {"A": {"executorLabel": "A_executor"}},
            "deploymentSpec": {"executors": {"A_executor": {"container": {
                "image": "img:1", "command": ["sh", "-c", "true"]}}}},
            "root": {"dag": {"tasks": {"A": {"taskInfo": {"name": "A"},
                                             "componentRef": {"name": "A"}}}}}}
    runner = Runner(spec, f"s3://{s3.bucket}/aws-run", tmp_path, launcher_config=no_providers(),
                    env=s3.env)
    with pytest.raises(TaskFailed, match="failed to upload output artifact.*executor-logs.*"
                                         "amazonaws.com.*no providers.s3"):
        runner.run()
    assert not s3.keys("aws-run/")


def test_the_launcher_uses_the_first_override_for_the_bucket_prefix(s3, tmp_path):  # noqa: F811
    """config/s3.go getOverrideByPrefix: the default names AWS; an override for this bucket and
    key prefix names the store, with its own Secret."""
    from devtools.kfp_backend.objectstore import ObjectStore

    s3.client.put_object(Bucket=s3.bucket, Key="team/x/T/out/f", Body=b"x")
    address = s3.endpoint.split("://", 1)[1]
    ref = "{fromEnv: false, secretRef: {secretName: %s, accessKeyKey: accesskey, " \
          "secretKeyKey: secretkey}}"
    providers = (f"s3:\n  default:\n    endpoint: s3.amazonaws.com\n    region: us-east-1\n"
                 f"    credentials: {ref % 'aws'}\n  Overrides:\n"
                 f"  - bucketName: {s3.bucket}\n    keyPrefix: team/\n    endpoint: {address}\n"
                 f"    disableSSL: true\n    credentials: {ref % 'team'}\n")
    config = {"kind": "ConfigMap", "metadata": {"name": "kfp-launcher"},
              "data": {"providers": providers}}
    secrets = {name: s3.secret_object()["stringData"] for name in ("aws", "team")}
    store = ObjectStore(backend(), config, secrets)
    assert store.download(f"s3://{s3.bucket}/team/x/T/out", tmp_path / "a") == 1
    with pytest.raises(TaskFailed, match="amazonaws.com"):
        store.download(f"s3://{s3.bucket}/other/x", tmp_path / "b")
    with pytest.raises(TaskFailed, match="failed to get Bucket credentials from secret "
                                         "name='team'.*not found"):
        ObjectStore(backend(), config, {"aws": secrets["aws"]}).download(
            f"s3://{s3.bucket}/team/x/T/out", tmp_path / "c")


@pytest.mark.parametrize("tag, reaches", [("2.16.1", False), ("2.17.0", True)])
def test_env_credentials_keep_the_providers_endpoint_from_2_17_only(  # noqa: F811
        s3, tmp_path, tag, reaches):  # noqa: F811
    """object_store.go createS3BucketSession: fromEnv gave no session (AWS's client) before
    2.17.0; from it the endpoint stays and the keys come from the pod's AWS_* env."""
    from devtools.kfp_backend.objectstore import ObjectStore

    s3.client.put_object(Bucket=s3.bucket, Key=f"env-{tag}/o", Body=b"x")
    providers = (f"s3:\n  default:\n    endpoint: {s3.endpoint.split('://', 1)[1]}\n"
                 "    disableSSL: true\n    credentials: {fromEnv: true}\n")
    store = ObjectStore(backend(tag), {"kind": "ConfigMap", "data": {"providers": providers}})
    uri = f"s3://{s3.bucket}/env-{tag}/o"
    if reaches:
        assert store.download(uri, tmp_path / "o", env=s3.env) == 1
    else:
        with pytest.raises(TaskFailed, match="amazonaws.com"):
            store.download(uri, tmp_path / "o", env=s3.env)
