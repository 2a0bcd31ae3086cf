"""Prints the TrainJob (training.operator: trainjob) or TFJob (tfjob) that trains the pipeline's
model on N workers, as the Trainer step creates it, and the NetworkPolicy that goes with it (only
the job's own pods reach its replicas' port).

    .venv/bin/python -m pipeline.kubeflow.training_job.render [--config configs/pipeline.yaml] \
        --examples gs://.../CsvExampleGen/examples/<id> \
        --transform-graph gs://.../Transform/transform_graph/<id> \
        --model gs://.../Trainer/model/<id> --model-run gs://.../Trainer/model_run/<id> \
        [--set training.job.workers=4 ...] > tfjob.yaml
    kubectl create -f tfjob.yaml    # ... kubectl delete -f tfjob.yaml: the job and its policy

The same manifest pipeline/kubeflow/training_job/executor.py's TrainingJobExecutor submits from the
Trainer step: the image is `kubeflow.image`, replicas and resources come from `training.job`,
and every replica runs `python -m pipeline.kubeflow.training_job.worker` with the Trainer's
exec-properties (from this config) and the artifact URIs given here. Use it to run or inspect a
multi-worker training by hand. The replicas run as `kubeflow.service_account`, or the
namespace's `default` without it. By hand the policy has no owner (the step makes the TFJob its
owner once the job exists), so delete it with the job.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pipeline  # noqa: F401  (Keras 2 before TensorFlow loads)
from core.config import DEFAULT_CONFIG


def render(config, examples: str, transform_graph: str, model: str, model_run: str) -> dict:
    """The TrainJob or TFJob (see `render_all` for it and its NetworkPolicy)."""
    return render_all(config, examples, transform_graph, model, model_run)[0]


def render_all(config, examples: str, transform_graph: str, model: str, model_run: str) -> list:
    """[the TrainJob or TFJob, its NetworkPolicy], as the Trainer step creates them."""
    from pipeline.kubeflow.training_job.manifest import (all_peer_ports, job_name, network_policy,
                                                         tfjob_manifest, worker_args)
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from pipeline.kubeflow.training_job.trainjob import trainjob_manifest

    props = trainer_exec_properties(config)
    custom = json.loads(props["custom_config"])
    training, pod = custom["training"], custom["tfjob_pod"]
    # By hand there is no step pod whose service account the replicas could share: without
    # kubeflow.service_account they run as the namespace's `default` (deploy/training/README.md).
    build = trainjob_manifest if training.get("operator") == "trainjob" else tfjob_manifest
    manifest = build(
        job_name(model), config.kubeflow.namespace or "kubeflow", config.kubeflow.image,
        training["distribution_strategy"], training["job"],
        worker_args(props, examples, transform_graph, model, model_run),
        service_account=config.kubeflow.service_account,
        labels={"app.kubernetes.io/part-of": config.pipeline_name},
        env=pod.get("env") or [])
    return [manifest, network_policy(manifest, any_port=all_peer_ports(training))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    for name in ("examples", "transform-graph", "model", "model-run"):
        parser.add_argument(f"--{name}", required=True, help=f"the {name} artifact's URI")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override (a YAML value)")
    args = parser.parse_args(argv)
    import yaml

    from pipeline.kubeflow.training_job.properties import parse_overrides
    from core.config import ConfigError, load_config

    overrides = parse_overrides(args.set)
    overrides.setdefault("training.distribution_strategy", "multi_worker_mirrored")
    try:
        config = load_config(args.config, overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    documents = render_all(config, args.examples, args.transform_graph, args.model,
                           args.model_run)
    print(yaml.safe_dump_all(documents, sort_keys=False, width=100), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
