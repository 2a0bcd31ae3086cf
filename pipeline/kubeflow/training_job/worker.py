"""One training task outside the TFX Trainer: a TrainJob or TFJob replica, a test's worker, the
benchmark's.

    python -m pipeline.kubeflow.training_job.worker --exec-properties trainer.json \
        --examples <CsvExampleGen examples URI> --transform-graph <Transform graph URI> \
        --model <Trainer model URI> --model-run <Trainer model_run URI> [--result-json r.json]

trainer.json holds the exec-properties of the pipeline's Trainer (steps, custom_config), written
from the config by `python -m pipeline.kubeflow.training_job.properties`. FnArgs are built the
way TFX's
GenericExecutor builds them, then components.trainer.training.run_fn runs: the pipeline
Trainer's code path.
The cluster comes from TF_CONFIG, read once by run_fn (a TrainJob replica first builds it from
its pod's environment: jobset_cluster.py). The chief writes the SavedModel to
<model>/Format-Serving; other workers save to scratch and delete it.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import List, Optional

import core

# A replica's log keeps TensorFlow's C++ errors (a peer unreachable over gRPC): level 2, not the
# CLIs' default that core set (3: no C++ lines at all), unless the pod sets its own; before
# components loads TensorFlow, which reads it once.
if not core.CPP_LOG_LEVEL_GIVEN:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"

import components  # noqa: E402, F401  (Keras 2 and the AutoGraph rule before TensorFlow loads)


def _parse(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.training_job.worker",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exec-properties", required=True,
                        help="the Trainer's exec-properties: a JSON file (written by "
                             "`python -m pipeline.kubeflow.training_job.properties`) or inline "
                             "JSON")
    parser.add_argument("--examples", required=True, help="ExampleGen's examples artifact URI")
    parser.add_argument("--transform-graph", required=True, help="Transform's graph URI")
    parser.add_argument("--model", required=True, help="the Trainer's model artifact URI")
    parser.add_argument("--model-run", required=True, help="the Trainer's model_run URI")
    parser.add_argument("--result-json", type=Path,
                        help="write what this task did (loss, examples/s, weights digest) here")
    parser.add_argument("--weights-npz", type=Path, help="write the trained weights here")
    return parser.parse_args(argv)


def load_exec_properties(value: str) -> dict:
    text = value if value.lstrip().startswith("{") else Path(value).read_text()
    return json.loads(text)


def fn_args_for(exec_properties: dict, examples: str, transform_graph: str, model: str,
                model_run: str):
    """FnArgs built as TFX's GenericExecutor builds them for run_fn."""
    from tfx.components.trainer.executor import GenericExecutor
    from tfx.components.util import examples_utils
    from tfx.proto import example_gen_pb2
    from tfx.types import artifact_utils, standard_artifacts

    def artifact(kind, uri, splits=None):
        instance = kind()
        instance.uri = uri
        if splits:
            instance.split_names = artifact_utils.encode_split_names(splits)
        return [instance]

    inputs = {"examples": artifact(standard_artifacts.Examples, examples, ["train", "eval"]),
              "transform_graph": artifact(standard_artifacts.TransformGraph, transform_graph)}
    # What the pipeline's ExampleGen writes (serialized tf.Examples).
    examples_utils.set_payload_format(inputs["examples"][0],
                                      example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    outputs = {"model": artifact(standard_artifacts.Model, model),
               "model_run": artifact(standard_artifacts.ModelRun, model_run)}
    # The executor's own FnArgs builder, so the fields match the Trainer's exactly.
    return GenericExecutor()._GetFnArgs(inputs, outputs, exec_properties)


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("tensorflow", "absl", "apache_beam"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    from pipeline.kubeflow.training_job import jobset_cluster

    # A TrainJob replica (Trainer v2, PlainML) gets no TF_CONFIG: it builds its own from the
    # pod's completion index and the JobSet's hostnames (jobset_cluster.py). A TFJob's comes
    # from the Training Operator; one given by hand wins.
    if "TF_CONFIG" not in os.environ and jobset_cluster.is_trainjob_replica(os.environ):
        try:
            os.environ["TF_CONFIG"] = jobset_cluster.tf_config_from_jobset(os.environ)
        except jobset_cluster.ClusterEnvError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    # A replica runs one executor's code: not every TFX component's imports (~3.5 s of CPU).
    from pipeline.lazy_tfx import defer_tfx_packages

    defer_tfx_packages()
    from components.trainer import distribution
    from components.trainer.training import run_fn

    from pipeline.kubeflow.step import file_systems


    # s3:// URIs (a TFJob replica on MinIO/S3, with the env kubernetes_platform.pod_env gives
    # it): tensorflow-io's file system; imports only, no TensorFlow op runs.
    file_systems.enable([args.examples, args.transform_graph, args.model, args.model_run])
    # Nothing before run_fn may run TensorFlow ops: multi-worker collectives are configured
    # when run_fn builds the strategy, and TensorFlow allows that only at start-up.
    fn_args = fn_args_for(load_exec_properties(args.exec_properties), args.examples,
                          args.transform_graph, args.model, args.model_run)
    try:
        result = run_fn(fn_args)
    except distribution.TrainingSetupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if result is None:  # a parameter-server worker or ps task whose server was stopped
        return 0
    if args.result_json:
        args.result_json.write_text(json.dumps(result.summary(), indent=1))
    if args.weights_npz:
        import numpy as np

        np.savez(args.weights_npz, *result.model.get_weights())
    print(json.dumps(result.summary()))
    return 0


if __name__ == "__main__":
    from core.storage import exit_now

    # Not sys.exit: a process that touched s3:// aborts at interpreter exit (status 134), which
    # the Training Operator would take for a failed replica and restart.
    exit_now(main())
