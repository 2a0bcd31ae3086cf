"""Whether each path of the config can be reached and written from here: local folders,
s3:// buckets, and the object store the Kubeflow steps use."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from core.config import PipelineConfig
from core.storage import scheme
from pipeline.doctor.findings import FAIL, INFO, OK, WARN, Finding

S3_TIMEOUT_S = 5


def _writable(path: Path) -> Optional[str]:
    """Why a folder cannot be created or written at path, or None."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _s3_reachable(uri: str, endpoint: Optional[str]) -> Optional[str]:
    """Why an s3:// bucket cannot be listed from here (None: it can)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = uri[len("s3://"):].split("/", 1)[0]
    client = boto3.client("s3", endpoint_url=endpoint, config=Config(
        connect_timeout=S3_TIMEOUT_S, read_timeout=S3_TIMEOUT_S, retries={"max_attempts": 1}))
    try:
        client.head_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def storage_findings(config: PipelineConfig) -> List[Finding]:
    found = []
    data = Path(config.data.input_base)
    spans = sorted(p.name for p in data.glob("span-*")) if data.is_dir() else []
    found.append(Finding("storage", OK if spans else FAIL,
                         f"data.input_base {data}: {len(spans)} span folder(s)",
                         None if spans else "put the CSV files in span-YYYYMMDD/ folders there"))
    for key, path in (("runner.output_dir", config.runner.output_dir),
                      ("serving.serving_dir", config.serving.serving_dir)):
        problem = _writable(Path(path))
        found.append(Finding("storage", FAIL if problem else OK,
                             f"{key} {path}: {problem or 'writable'}",
                             "point it at a folder this user can write" if problem else None))
    return found


def kubeflow_storage_findings(config: PipelineConfig) -> List[Finding]:
    found, kubeflow = [], config.kubeflow
    # On Kubeflow the steps, not this machine, read these; an in-cluster endpoint is often not
    # reachable from here, so what fails is a warning.
    endpoint = os.environ.get("S3_ENDPOINT") or kubeflow.object_store.endpoint
    for key in ("pipeline_root", "input_base", "serving_dir"):
        uri = getattr(kubeflow, key)
        if not uri:
            continue
        kind = scheme(uri)
        if kind == "s3":
            problem = _s3_reachable(uri, endpoint)
            state = f"not reachable from here: {problem}" if problem else "reachable"
            found.append(Finding("storage", WARN if problem else OK,
                                 f"kubeflow.{key} {uri} via {endpoint}: {state}",
                                 "fine if the endpoint is in-cluster only; to check from here, "
                                 "port-forward it and set S3_ENDPOINT" if problem else None))
        else:
            found.append(Finding("storage", INFO, f"kubeflow.{key} {uri}: {kind or 'a path'} "
                                 "in the steps' pods (not checked from here)"))
    return found
