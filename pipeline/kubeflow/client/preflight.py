"""Checks before anything is sent to a KFP API: paths the steps can open, names the backend takes.

The steps open the pipeline root, the data and the serving dir with TensorFlow's file system in
the step image: gs:// natively, s3:// through tensorflow-io (MinIO included, with its endpoint
from the environment). Everything else would upload fine and fail in a pod, so it is refused
here with the key, the value and what to do.
"""
from __future__ import annotations

import re
from typing import List, Optional

from core import storage
from core.config import PipelineConfig
from pipeline.kubeflow.client.compiler import IMAGE_WORKDIR, cluster_paths

# backend/src/apiserver/common/utils.go ValidatePipelineName (KFP 2.3.0): the spec's
# pipelineInfo.name, which TFX takes from pipeline_name; the upload fails otherwise.
KFP_PIPELINE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
_PLACEHOLDER = re.compile(r"YOUR_|<[^>]*>|\{\{")


def cluster_problems(config: PipelineConfig) -> List[str]:
    """Every reason the published pipeline could not run on a cluster; empty when ready."""
    kf, paths = config.kubeflow, cluster_paths(config)
    problems = []
    if not kf.pipeline_root:
        problems.append(
            "kubeflow.pipeline_root is not set: each run and the recurring run send it as their "
            "pipeline root; without one KFP falls back to the kfp-launcher ConfigMap or "
            "minio://mlpipeline/v2/artifacts, which TensorFlow cannot open. Set it, e.g. "
            "gs://BUCKET/tfx/NAME or s3://BUCKET/tfx/NAME")
    else:
        problems += _uri_problems("kubeflow.pipeline_root", kf.pipeline_root)
    problems += _uri_problems("kubeflow.input_base", kf.input_base,
                              fallback=("data.input_base", paths["input_base"]))
    problems += _uri_problems("kubeflow.serving_dir", kf.serving_dir,
                              fallback=("serving.serving_dir", str(config.serving.serving_dir)))
    if kf.schema_file:  # unset: the copy baked into the image, an absolute path there
        problems += _schema_problems(kf.schema_file)
    if not KFP_PIPELINE_NAME.match(config.pipeline_name):
        problems.append(
            f"pipeline_name '{config.pipeline_name}': KFP accepts only lowercase letters, digits "
            "and '-', starting with a letter or digit, at most 128 characters; rename it")
    registry = kf.image.split("/")[0]
    if registry == "example.com" or registry.endswith(".example.com"):  # reserved for examples
        problems.append(f"kubeflow.image {kf.image} still names the example registry: push the "
                        "image built from deploy/kubeflow/Dockerfile and name it here")
    return problems


def _uri_problems(key: str, value: Optional[str], fallback=None) -> List[str]:
    if not value:
        fallback_key, local = fallback
        return [f"{key} is not set, so the pods would get {fallback_key} {local}, a path on this "
                "machine: set it to a gs:// or s3:// URI"]
    problem = _why_not_openable(value)
    return [f"{key} {value}: {problem}"] if problem else []


def _why_not_openable(value: str) -> Optional[str]:
    if _PLACEHOLDER.search(value):
        return "still holds a placeholder: put your bucket's URI"
    kind = storage.scheme(value)
    if kind in ("", "file"):
        return ("a local path, which the pods do not have: use a gs:// or s3:// URI they can "
                "reach")
    problem = storage.problem(value)  # minio://, http(s)://, ...: what the config refuses too
    if problem:
        return problem.removeprefix(f"{value}: ")
    return None if value.split("://", 1)[1].split("/")[0] else "has no bucket name"


def _schema_problems(value: str) -> List[str]:
    if storage.scheme(value) in ("", "file") and not _PLACEHOLDER.search(value):
        # The config makes relative paths absolute on this machine; the image holds the project
        # under IMAGE_WORKDIR (deploy/kubeflow/Dockerfile), nothing else of ours.
        if value.startswith(IMAGE_WORKDIR + "/"):
            return []
        return [f"kubeflow.schema_file {value}: a path outside the image's {IMAGE_WORKDIR}: "
                "leave it unset for the image's copy of schema_file, or use a gs:// or s3:// URI"]
    problem = _why_not_openable(value)
    return [f"kubeflow.schema_file {value}: {problem}"] if problem else []
