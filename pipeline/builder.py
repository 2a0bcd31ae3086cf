"""build_pipeline(config): the one TFX pipeline, for every orchestrator."""
from __future__ import annotations

import json
import re
from typing import List, Optional

# Each component from its own module: `tfx.v1` also loads the Google Cloud extensions (~7 s of
# start-up), and `tfx.components` every component TFX has (pipeline/lazy_tfx.py).
from tfx.components.example_validator.component import ExampleValidator
from tfx.components.schema_gen.component import SchemaGen
from tfx.components.statistics_gen.component import StatisticsGen
from tfx.components.trainer.component import Trainer
from tfx.components.transform.component import Transform
from tfx.dsl.components.base.base_beam_component import BaseBeamComponent
from tfx.dsl.components.base.base_node import BaseNode
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2, pusher_pb2, trainer_pb2

from components.example_gen import component as csv_example_gen
from components.anomaly_gate.component import AnomalyGate
from components.drift_gate.component import DriftCheck, DriftGate
from components.skew_gate.component import SkewCheck, SkewGate, skew_settings
from components.evaluator.component import Evaluator
from components.import_schema.component import LightImportSchemaGen
from components.pusher.component import AtomicPusher
from components.run_report.component import RunReport
from components.release.component import Release
from components.serving_baseline.component import ServingBaseline
from core import nodes
from core.rollout import rollout_ref
from core.config import PipelineConfig, beam_flag
from components.evaluator.eval_config import build_eval_config
from core.fingerprint import (EVALUATOR_MODULES, PUSHER_MODULES, READER_MODULES,
                              TRAINER_MODULES, TRANSFORM_MODULES, code_fingerprint)

# The code DriftCheck and SkewCheck share: a span's statistics and the reader they read with.
SPAN_MODULES = ("components.span_statistics", *READER_MODULES)
PREPROCESSING_FN = "components.transform.preprocessing_fn"
RUN_FN = "components.trainer.training.run_fn"


def model_code_config(config: PipelineConfig) -> dict:
    """What Transform's and Trainer's code reads from the config (plain JSON for TFX)."""
    code_config = {"features": config.features.model_dump(mode="json"),
                   "task": config.task.model_dump(mode="json"),
                   "preprocessing": config.preprocessing.model_dump(mode="json")}
    if config.retrieval is not None:  # only then: other configs' cache keys stay
        code_config["retrieval"] = config.retrieval.model_dump(mode="json")
    return code_config


def canary_rollout(config: PipelineConfig) -> dict:
    """The serving Rollout for the steps that read or release it (serving.release: canary);
    nothing under direct, so that those steps and their cache keys stay as they were."""
    ref = rollout_ref(config.serving)
    return {"rollout": ref} if ref else {}


def canary_modules(config: PipelineConfig) -> tuple:
    """Code the canary steps run besides their own (the Rollout client), in their fingerprints."""
    return ("core.rollout",) if config.serving.release == "canary" else ()


def build_components(config: PipelineConfig, run_report: bool = False,
                     trainer_pod: Optional[dict] = None,
                     serving_spans: Optional[str] = None) -> List[BaseNode]:
    """The pipeline's steps; run_report: end with the report step (Kubeflow: the report as run
    artifacts the KFP UI shows; a local run writes its report from the CLI); trainer_pod: the
    pods of the TFJob that runs the Trainer on Kubeflow (pipeline/kubeflow/training_job/pods.py), in
    its custom_config; serving_spans: the serving spans' digest (a local run: new requests
    re-run SkewCheck, components/skew_gate/executor.py spans_fingerprint)."""
    example_gen = FileBasedExampleGen(
        input_base=str(config.data.input_base),
        input_config=example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="data", pattern=config.data.file_pattern)]),
        output_config=example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
            example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=ratio)
            for name, ratio in config.data.splits.items()])),
        custom_config=csv_example_gen.reader_settings(config.reader_settings,
                                                      code_fingerprint(*READER_MODULES)),
        custom_executor_spec=executor_spec.BeamExecutorSpec(csv_example_gen.Executor),
    ).with_id(nodes.EXAMPLE_GEN)
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"]).with_id(
        nodes.STATISTICS_GEN)
    if config.schema_file is not None:
        schema_gen = LightImportSchemaGen(schema_file=str(config.schema_file)).with_id(
            nodes.IMPORT_SCHEMA_GEN)
        schema_hint = str(config.schema_file)
    else:
        schema_gen = SchemaGen(statistics=statistics_gen.outputs["statistics"],
                               infer_feature_shape=False).with_id(nodes.SCHEMA_GEN)
        schema_hint = "run `python -m pipeline.schema` to write one for review"
    example_validator = ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"]
    ).with_id(nodes.EXAMPLE_VALIDATOR)
    anomaly_gate = AnomalyGate(anomalies=example_validator.outputs["anomalies"],
                               schema_hint=schema_hint,
                               code_fingerprint=code_fingerprint("components.anomaly_gate")
                               ).with_id(nodes.ANOMALY_GATE)

    drift_check = DriftCheck(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        input_base=str(config.data.input_base),
        settings=json.dumps({
            "reader": config.reader_settings.model_dump(mode="json"),
            "thresholds": config.drift_thresholds(),
            "code_fingerprint": code_fingerprint("components.drift_gate", *SPAN_MODULES)},
            sort_keys=True)).with_id(nodes.DRIFT_CHECK)
    drift_gate = DriftGate(drift=drift_check.outputs["drift"],
                           on_drift=config.drift.on_drift).with_id(nodes.DRIFT_GATE)
    # After the anomaly gate: a run stopped for drift has its statistics and anomalies too.
    drift_gate.add_upstream_node(anomaly_gate)

    # What the served model was asked (the newest serving span) against what it was trained on.
    skew_check = SkewCheck(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        input_base=str(config.data.input_base), serving_base=config.serving_base,
        settings=json.dumps({
            **skew_settings(config),
            **({"serving_spans": serving_spans} if serving_spans else {}),
            "code_fingerprint": code_fingerprint("components.skew_gate", *SPAN_MODULES)},
            sort_keys=True)).with_id(nodes.SKEW_CHECK)
    skew_gate = SkewGate(skew=skew_check.outputs["skew"],
                         on_skew=config.skew.on_skew).with_id(nodes.SKEW_GATE)
    skew_gate.add_upstream_node(anomaly_gate)

    transform = Transform(
        examples=example_gen.outputs["examples"], schema=schema_gen.outputs["schema"],
        preprocessing_fn=PREPROCESSING_FN,
        # The Trainer applies the transform graph itself: nothing to materialize.
        materialize=False, disable_statistics=True, disable_analyzer_cache=True,
        custom_config={**model_code_config(config),
                       "code_fingerprint": code_fingerprint(*TRANSFORM_MODULES)}
    ).with_id(nodes.TRANSFORM)
    transform.add_upstream_node(anomaly_gate)
    transform.add_upstream_node(drift_gate)
    transform.add_upstream_node(skew_gate)

    trainer = Trainer(
        run_fn=RUN_FN,
        examples=example_gen.outputs["examples"],
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        train_args=trainer_pb2.TrainArgs(num_steps=config.training.train_steps),
        eval_args=trainer_pb2.EvalArgs(num_steps=config.training.eval_steps),
        custom_config={**model_code_config(config),
                       "model": config.model,
                       "model_module": config.model_module,
                       "training": config.training.model_dump(mode="json"),
                       "model_name": config.serving.model_name,
                       **({"tfjob_pod": trainer_pod} if trainer_pod else {}),
                       "code_fingerprint": code_fingerprint(*TRAINER_MODULES)}
    ).with_id(nodes.TRAINER)
    # The Evaluator's executor (components/evaluator/) reads the baseline this step marks: its
    # code is in this step's fingerprint (EVALUATOR_MODULES).
    baseline = ServingBaseline(candidate=trainer.outputs["model"],
                               model_base_path=str(config.model_base_path),
                               code_fingerprint=code_fingerprint(
                                   *EVALUATOR_MODULES, *canary_modules(config)),
                               **canary_rollout(config)).with_id(nodes.SERVING_BASELINE)
    evaluator = Evaluator(
        examples=example_gen.outputs["examples"], model=trainer.outputs["model"],
        baseline_model=baseline.outputs["baseline"], schema=schema_gen.outputs["schema"],
        eval_config=build_eval_config(config)).with_id(nodes.EVALUATOR)
    # TFX's Pusher, its copy made atomic (components/pusher/): its code in custom_config, which
    # TFX's executor ignores and its cache key covers.
    pusher = AtomicPusher(
        model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
        push_destination=pusher_pb2.PushDestination(
            filesystem=pusher_pb2.PushDestination.Filesystem(
                base_directory=str(config.model_base_path))),
        custom_config={"code_fingerprint": code_fingerprint(*PUSHER_MODULES)},
    ).with_id(nodes.PUSHER)
    components = [example_gen, statistics_gen, schema_gen, example_validator, anomaly_gate,
                  drift_check, drift_gate, skew_check, skew_gate, transform, trainer, baseline,
                  evaluator, pusher]
    report_inputs = {}
    if config.serving.release == "canary":
        release = Release(pushed_model=pusher.outputs["pushed_model"],
                          code_fingerprint=code_fingerprint("components.release",
                                                            *canary_modules(config)),
                          **canary_rollout(config)).with_id(nodes.RELEASE)
        components.append(release)
        report_inputs["release"] = release.outputs["status"]
    if run_report:
        components.append(RunReport(
            examples=example_gen.outputs["examples"],
            statistics=statistics_gen.outputs["statistics"],
            anomalies=example_validator.outputs["anomalies"],
            drift=drift_check.outputs["drift"], skew=skew_check.outputs["skew"],
            model_run=trainer.outputs["model_run"],
            baseline=baseline.outputs["baseline"], evaluation=evaluator.outputs["evaluation"],
            blessing=evaluator.outputs["blessing"], pushed_model=pusher.outputs["pushed_model"],
            config=config.model_dump_json(), input_base=str(config.data.input_base),
            **report_inputs).with_id(nodes.RUN_REPORT))
    return components


def build_pipeline(config: PipelineConfig, beam_args: Optional[List[str]] = None,
                   metadata_connection_config=None, run_report: bool = False,
                   trainer_pod: Optional[dict] = None,
                   serving_spans: Optional[str] = None) -> tfx_pipeline.Pipeline:
    """The pipeline; the local runner's metadata store unless another connection is given."""
    if metadata_connection_config is None:
        metadata_connection_config = metadata.sqlite_metadata_connection_config(
            str(config.metadata_path))
    beam_args = beam_args if beam_args is not None else config.runner.beam_args
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=str(config.pipeline_root),
        components=_named_beam_jobs(build_components(config, run_report, trainer_pod,
                                                     serving_spans),
                                    config.pipeline_name, beam_args),
        enable_cache=config.runner.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_args)


def _named_beam_jobs(components: list, pipeline_name: str, beam_args: List[str]) -> list:
    """On a cluster's job service (Flink through Beam's job server), each Beam step's job is
    named after the step (`penguins-transform`), so Flink's UI and REST API say which job is
    which (Beam's default is BeamApp-<user>-<time>); a --job_name of the user's is left alone."""
    if beam_flag(beam_args, "job_endpoint") in (None, "embed") or beam_flag(beam_args, "job_name"):
        return components
    for component in components:
        if isinstance(component, BaseBeamComponent):
            name = re.sub(r"[^a-z0-9-]+", "-", f"{pipeline_name}-{component.id}".lower())
            component.with_beam_pipeline_args([f"--job_name={name}"])
    return components
