"""Compile: the TFX pipeline built from the config, pointed at the cluster's paths, written as the
PipelineSpec YAML that kfp.Client uploads (TFX's KubeflowV2DagRunner, then `spec` adapts it)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, Optional

import yaml

from core import nodes
from core.config import DEFAULT_CONFIG, PipelineConfig
from pipeline.kubeflow import KubeflowError

from pipeline.kubeflow.client.exit_handler import (exit_config, uses_final_status, with_exit_step,
                                            with_webhook_secret)
from pipeline.kubeflow.client.kubernetes_platform import (needs_object_store, platform_spec,
                                                  with_object_store)
from pipeline.kubeflow.client.resources import with_resources
from pipeline.kubeflow.client.spec import for_open_source_kfp, open_source_problems

# deploy/kubeflow/Dockerfile's WORKDIR: the project (and configs/) inside the image.
IMAGE_WORKDIR = "/opt/pipeline"


def cluster_paths(config: PipelineConfig) -> Dict[str, Optional[str]]:
    """Where the steps read and write, as the pods see it; local paths where unset."""
    kf = config.kubeflow
    serving_dir = kf.serving_dir or str(config.serving.serving_dir)
    # The serving spans: skew.serving_base when it is a URI, else beside the runs' outputs as
    # locally (<runner.output_dir>/requests there, <pipeline_root>/requests here).
    serving_base = config.serving_base
    if "://" not in serving_base and kf.pipeline_root:
        serving_base = f"{kf.pipeline_root.rstrip('/')}/requests"
    return {"pipeline_root": kf.pipeline_root, "serving_base": serving_base,
            "input_base": kf.input_base or str(config.data.input_base),
            "model_base_path": f"{serving_dir.rstrip('/')}/{config.serving.model_name}",
            "schema_file": kf.schema_file or _schema_in_image(config.schema_file)}


def _schema_in_image(schema_file: Optional[Path]) -> Optional[str]:
    if schema_file is None:
        return None
    project = DEFAULT_CONFIG.parent.parent
    if project not in schema_file.parents:
        raise KubeflowError(f"schema_file {schema_file} is outside the project, so not in the "
                            "image: set kubeflow.schema_file to a URI the pods can read")
    return f"{IMAGE_WORKDIR}/{schema_file.relative_to(project).as_posix()}"


def _point_at_cluster(components, paths: Dict[str, Optional[str]]) -> None:
    """The components' local paths replaced by the cluster's (config paths are local Paths)."""
    from tfx.proto import pusher_pb2
    from tfx.utils import proto_utils

    by_id = {c.id: c for c in components}
    by_id[nodes.EXAMPLE_GEN].exec_properties["input_base"] = paths["input_base"]
    by_id[nodes.DRIFT_CHECK].exec_properties["input_base"] = paths["input_base"]
    by_id[nodes.SKEW_CHECK].exec_properties["input_base"] = paths["input_base"]
    by_id[nodes.SKEW_CHECK].exec_properties["serving_base"] = paths["serving_base"]
    by_id[nodes.SERVING_BASELINE].exec_properties["model_base_path"] = paths["model_base_path"]
    # As JSON, the form the component's constructor stored it in.
    by_id[nodes.PUSHER].exec_properties["push_destination"] = proto_utils.proto_to_json(
        pusher_pb2.PushDestination(filesystem=pusher_pb2.PushDestination.Filesystem(
            base_directory=paths["model_base_path"])))
    if nodes.IMPORT_SCHEMA_GEN in by_id:
        by_id[nodes.IMPORT_SCHEMA_GEN].exec_properties["schema_file"] = paths["schema_file"]
        by_id[nodes.ANOMALY_GATE].exec_properties["schema_hint"] = paths["schema_file"]


def _report_at_cluster(components, config: PipelineConfig,
                       paths: Dict[str, Optional[str]]) -> None:
    """The report step reads the config with the cluster's paths (none of this machine's)."""
    data = config.model_dump(mode="json")
    data["data"]["input_base"] = paths["input_base"]
    data["schema_file"] = paths["schema_file"]
    data["skew"]["serving_base"] = paths["serving_base"]
    data["serving"]["serving_dir"] = paths["model_base_path"].rsplit("/", 1)[0]
    data["runner"]["output_dir"] = paths["pipeline_root"] or data["runner"]["output_dir"]
    data["kubeflow"]["output_dir"] = None
    [report] = [c for c in components if c.id == nodes.RUN_REPORT]
    report.exec_properties["config"] = json.dumps(data, sort_keys=True)
    report.exec_properties["input_base"] = paths["input_base"]


def spec_path(config: PipelineConfig) -> Path:
    folder = config.kubeflow.output_dir or config.runner.output_dir / "kubeflow"
    return folder / f"{config.pipeline_name}.yaml"


def _train_as_tfjob(components) -> None:
    """On a cluster, the multi-worker strategies train in a Training Operator TFJob of N pods
    (deploy/training); locally the same strategies need a TF_CONFIG cluster of their own."""
    from tfx.dsl.components.base import executor_spec

    from pipeline.kubeflow.training_job.executor import TrainingJobExecutor

    [trainer] = [c for c in components if c.id == nodes.TRAINER]
    trainer.executor_spec = executor_spec.ExecutorClassSpec(TrainingJobExecutor)


def compile_spec(config: PipelineConfig) -> Path:
    """Writes the open-source KFP PipelineSpec for config; returns its path."""
    from tfx.orchestration.kubeflow.v2.kubeflow_v2_dag_runner import (
        KubeflowV2DagRunner, KubeflowV2DagRunnerConfig)

    from pipeline.builder import build_pipeline
    from pipeline.kubeflow.training_job.pods import MULTI_WORKER, trainer_pod

    paths = cluster_paths(config)
    tfx_pipeline = build_pipeline(config, beam_args=config.kubeflow.beam_args, run_report=True,
                                  trainer_pod=trainer_pod(config))
    _point_at_cluster(tfx_pipeline.components, paths)
    _report_at_cluster(tfx_pipeline.components, config, paths)
    if config.training.distribution_strategy in MULTI_WORKER:
        _train_as_tfjob(tfx_pipeline.components)
    # Schema 2.1 writes `parameterType`/`constant` and hands each step its inputs spec: the
    # open-source backend and TFX's container entrypoint need both.
    runner = KubeflowV2DagRunner(KubeflowV2DagRunnerConfig(
        default_image=config.kubeflow.image, use_pipeline_spec_2_1=True))
    spec = runner.run(tfx_pipeline, write_out=False)["pipelineSpec"]
    lease = config.kubeflow.run_lease
    spec = for_open_source_kfp(spec, paths["pipeline_root"],
                               run_lease_expiry_s=lease.expiry_s if lease.enabled else None)
    # Every step inside an exit handler; the exit step reports a failed or stopped night.
    [report] = [c for c in tfx_pipeline.components if c.id == nodes.RUN_REPORT]
    spec = with_exit_step(spec, config.kubeflow.image,
                          exit_config(report.exec_properties["config"]),
                          uses_final_status(config.kubeflow.backend_version),
                          run_lease_expiry_s=lease.expiry_s if lease.enabled else None)
    spec = with_resources(spec, config.kubeflow.resources)
    problems = open_source_problems(spec)
    if problems:
        raise KubeflowError("the compiled spec has what open-source KFP cannot run:\n  "
                            + "\n  ".join(problems))
    # s3:// paths: every step gets the object store's env, the credentials from a Secret named
    # in the kubernetes PlatformSpec (a second YAML document, as kfp-kubernetes writes it).
    platform = None
    if needs_object_store(config.kubeflow):
        spec = with_object_store(spec, config.kubeflow.object_store)
        platform = platform_spec(spec, config.kubeflow.object_store)
    platform = with_webhook_secret(platform, config)
    path = spec_path(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# PipelineSpec of '{config.pipeline_name}' for open-source Kubeflow "
                    "Pipelines v2; written by pipeline.kubeflow.client.compiler, do not edit.\n"
                    + yaml.safe_dump(spec, sort_keys=True)
                    + (f"---\n{yaml.safe_dump(platform, sort_keys=True)}" if platform else ""))
    return path
