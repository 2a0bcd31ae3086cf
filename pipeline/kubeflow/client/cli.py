"""`python -m pipeline.run --runner kubeflow [--config FILE] [--endpoint URL] [--schedule]`:
compile, then with an endpoint upload and run, or replace the nightly schedule."""
from __future__ import annotations

import sys
from typing import Optional

from core.config import PipelineConfig
from pipeline.kubeflow import KubeflowError

from pipeline.kubeflow.client.compiler import compile_spec
from pipeline.kubeflow.client.preflight import cluster_problems
from pipeline.kubeflow.client.publish import publish


def run_kubeflow(config: PipelineConfig, endpoint: Optional[str] = None,
                 schedule: bool = False) -> int:
    """The CLI's kubeflow runner: compile, then upload and run or schedule when there is an
    endpoint. Exit codes as the local runner: 1 for any failure, with one message."""
    endpoint = endpoint or config.kubeflow.endpoint
    try:
        _check_endpoint(endpoint)
        if schedule and not endpoint:
            raise KubeflowError("--schedule needs an endpoint: --endpoint URL or "
                                "kubeflow.endpoint in the config")
        problems = cluster_problems(config) if endpoint else []
        if problems:  # before compiling: nothing to upload would come of it
            raise KubeflowError("not compiled, not uploaded: the config is not ready for a "
                                "cluster:\n  " + "\n  ".join(problems))
        path = compile_spec(config)
        print(f"Compiled pipeline '{config.pipeline_name}' for Kubeflow Pipelines: {path} "
              f"(image {config.kubeflow.image})")
        if not endpoint:
            print("No endpoint: compiled only. Upload it with --endpoint URL (and --schedule "
                  "for the nightly run). Run it here as open-source KFP would: "
                  "`python -m devtools.local_image IMAGE_DIR` once, then "
                  f"`python -m devtools.kfp_backend {path} --image IMAGE_DIR "
                  "--pipeline-root ROOT`.")
            return 0
        for line in publish(path, config, endpoint, schedule):
            print(line)
    except KubeflowError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def _check_endpoint(endpoint: Optional[str]) -> None:
    """--endpoint gets the same check as kubeflow.endpoint in the config."""
    from pydantic import ValidationError

    from core.config import KubeflowConfig

    try:
        KubeflowConfig(endpoint=endpoint)
    except ValidationError as error:
        raise KubeflowError(f"bad endpoint: {error.errors()[0]['msg']}".replace(
            "Value error, ", "")) from None
