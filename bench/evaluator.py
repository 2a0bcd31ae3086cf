"""The Evaluator alone, on a finished run's artifacts: its seconds and the metrics it wrote.

    .venv/bin/python -m bench.evaluator --run-dir DIR [--extractors ours|tfma] [--baseline]
        [--profile FILE] [--keep]

DIR is a run's output folder (runner.output_dir, e.g. the `ours/outputs` of a `bench.scale
--keep` folder); its config is the pipeline.yaml beside it (ours/pipeline.yaml), else --config.
The newest examples, schema and model there are evaluated by components.evaluator.component's
Executor with components.evaluator.eval_config's EvalConfig, in this process, as the pipeline runs
it. --extractors tfma runs TFMA's default extractors instead of ours (components.evaluator.
unbatch_and_slice; the Evaluator before them), on the same artifacts. --baseline also evaluates
the same model as the serving baseline (the two-model path a night with a serving model takes).
Prints wall and CPU seconds, the process's peak RSS, the eval examples, and every metric TFMA
wrote (all models and diffs, full precision, sorted: diff two runs), the validation result and
the blessing. --profile writes cProfile stats (CPU time) of the Executor's Do (read with pstats).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import sys
import time
from pathlib import Path
from typing import List, Optional
from bench.scratch import keep_or_remove, scratch_folder

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def newest(folder: Path) -> Path:
    """The artifact folder of the newest execution: <component>/<output>/<execution id>."""
    found = sorted((p for p in folder.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    if not found:
        raise SystemExit(f"{folder}: no artifact; run the pipeline first")
    return found[-1]


def artifacts(run_dir: Path, baseline: bool):
    from tfx.types import artifact_utils, standard_artifacts

    from components.serving_baseline.component import HAS_BASELINE

    root = run_dir / "pipeline"
    examples = standard_artifacts.Examples()
    examples.uri = str(newest(root / "CsvExampleGen" / "examples"))
    examples.split_names = artifact_utils.encode_split_names(
        sorted(p.name[len("Split-"):] for p in Path(examples.uri).glob("Split-*")))
    model = standard_artifacts.Model()
    model.uri = str(newest(root / "Trainer" / "model"))
    schema = standard_artifacts.Schema()
    schema.uri = str(newest(root / "ImportSchemaGen" / "schema"))
    served = standard_artifacts.Model()
    served.uri = model.uri
    served.set_int_custom_property(HAS_BASELINE, int(baseline))
    return {"examples": [examples], "model": [model], "baseline_model": [served],
            "schema": [schema]}


def print_metrics(output: Path) -> None:
    """Every metric TFMA wrote (all models, diffs included), one line each, in a fixed order."""
    import tensorflow_model_analysis as tfma
    from google.protobuf import text_format

    lines = []
    for metrics in tfma.load_metrics(str(output)):
        slice_key = text_format.MessageToString(metrics.slice_key, as_one_line=True)
        for entry in metrics.metric_keys_and_values:
            key = text_format.MessageToString(entry.key, as_one_line=True)
            value = text_format.MessageToString(entry.value, as_one_line=True)
            lines.append(f"  [{slice_key}] {key}: {value}")
    print("\n".join(sorted(lines)))
    validation = tfma.load_validation_result(str(output))
    print(f"  validation_ok: {validation.validation_ok}")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.evaluator", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path, help="default: pipeline.yaml beside --run-dir")
    parser.add_argument("--baseline", action="store_true",
                        help="evaluate the model against itself as the serving baseline")
    parser.add_argument("--extractors", choices=["ours", "tfma"], default="ours",
                        help="ours: components.evaluator.unbatch_and_slice's; tfma: TFMA's default "
                             "extractors (as before them), to compare both on the same artifacts")
    parser.add_argument("--profile", type=Path, help="write cProfile stats here")
    parser.add_argument("--keep", action="store_true", help="keep the evaluation folder")
    parser.add_argument("--beam-arg", action="append", default=[], dest="beam_args",
                        help="a Beam pipeline argument for the Evaluator (repeat), e.g. "
                             "--beam-arg=--direct_running_mode=multi_processing")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tfx.proto import evaluator_pb2  # noqa: F401  (TFX's protos before the executor)
    from tfx.types import standard_artifacts
    from tfx.utils import proto_utils

    from components.evaluator.component import Executor
    from core.config import load_config
    from components.evaluator.eval_config import build_eval_config

    config = load_config(args.config or args.run_dir.parent / "pipeline.yaml")
    inputs = artifacts(args.run_dir, args.baseline)
    scratch = scratch_folder("bench-evaluator-")
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = str(scratch / "evaluation"), str(scratch / "blessing")
    os.makedirs(evaluation.uri)
    os.makedirs(blessing.uri)
    properties = {"eval_config": proto_utils.proto_to_json(build_eval_config(config)),
                  "example_splits": '["eval"]'}
    if args.extractors == "tfma":
        properties["custom_extractors"] = "tensorflow_model_analysis.default_extractors"
    executor = Executor(Executor.Context(tmp_dir=str(scratch / "tmp"), unique_id="bench",
                                         beam_pipeline_args=args.beam_args))
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    executor.Do(inputs, {"evaluation": [evaluation], "blessing": [blessing]}, properties)
    if profiler:
        profiler.disable()
        profiler.dump_stats(str(args.profile))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    eval_rows = sum(1 for _ in __import__("tensorflow").data.TFRecordDataset(
        [str(p) for p in Path(inputs["examples"][0].uri, "Split-eval").glob("*")],
        compression_type="GZIP"))
    import resource
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"evaluator: {wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {peak_mib:.0f} MiB (process), "
          f"{eval_rows:,} eval examples, baseline: {args.baseline}, "
          f"extractors: {args.extractors}, load average {os.getloadavg()[0]:.1f}")
    print_metrics(Path(evaluation.uri))
    print(f"  blessed: {os.path.exists(os.path.join(blessing.uri, 'BLESSED'))}")
    keep_or_remove(scratch, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
