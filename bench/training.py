"""Training throughput, side by side in one run on the same transformed data.

    .venv/bin/python -m bench.training [--run-dir DIR] [--steps N] [--repeat N]

Data: the pipeline's own ExampleGen output and Transform graph. With --run-dir, those of a
finished run there (a folder holding outputs/pipeline/); without, the pipeline runs first into a
temporary folder (about a minute). Every figure is training examples/s in steady state, measured
by components.trainer.training.Throughput (the first, tracing call and validation excluded);
each line is the median of --repeat runs, taken alternately.

1. Trainer input pipeline against the floor: components.trainer.training.train_and_export (the
   Trainer's code path: TFXIO reads, Transform's graph in tf.data, cache, shuffle, prefetch),
   one_device, float32, against a bare Keras fit of the same network on the same transformed
   examples held
   in memory as numpy arrays. Goal: >= 0.9x the floor.
2. Multi-worker: 2 multi_worker_mirrored worker processes (`python -m
pipeline.kubeflow.training_job.worker`,
   TF_CONFIG on loopback, RING all-reduce) against 1, at the same per-worker batch (the global
   batch doubles with the workers), for each --worker-runs pair of per-worker batch and
   steps_per_execution. Each worker is pinned to its own share of the CPUs (half the machine
   each; the single worker gets the same share), as separate machines would be. Goal: 2 workers
   >= 1.6x one. Every step all-reduces the gradients over gRPC; the pairs show where the
   network's compute per step starts to outweigh that.
3. Precision: float32 against mixed_bfloat16 (Trainer path) on this machine's CPU; on a GPU
   also mixed_float16. Multi-worker runs stay on the CPU (one GPU cannot be shared by 2 workers).
No assertions: it prints a table. On a busy machine the numbers move; it prints the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional

import yaml

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
WORKER_TIMEOUT_S = 600


def _run_pipeline(folder: Path) -> None:
    raw = yaml.safe_load((REPO / "configs" / "pipeline.yaml").read_text())
    raw["data"]["input_base"] = str(REPO / "data" / "penguins")
    raw["schema_file"] = str(REPO / "configs" / "schema.pbtxt")
    raw["runner"]["output_dir"] = str(folder / "outputs")
    raw["serving"]["serving_dir"] = str(folder / "serving")
    raw.pop("kubeflow", None)
    (folder / "pipeline.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    print(f"running the pipeline into {folder} for its transformed data ...", flush=True)
    subprocess.run([PYTHON, "-m", "pipeline.run", "--config", str(folder / "pipeline.yaml")],
                   cwd=REPO, check=True, timeout=1200, stdout=subprocess.DEVNULL)


def _newest(folder: Path) -> Path:
    return max(folder.iterdir(), key=lambda p: int(p.name))


class Data:
    def __init__(self, run_dir: Path):
        root = run_dir / "outputs" / "pipeline"
        self.config = run_dir / "pipeline.yaml"
        from core import nodes

        self.examples = _newest(root.joinpath(*nodes.EXAMPLES))
        self.transform_graph = _newest(root.joinpath(*nodes.TRANSFORM_GRAPH))


def _exec_properties(data: Data, **overrides) -> dict:
    from pipeline.kubeflow.training_job.properties import trainer_exec_properties
    from core.config import load_config

    return trainer_exec_properties(load_config(data.config, overrides))


def trainer_examples_per_second(data: Data, scratch: Path, **overrides) -> float:
    """The Trainer's training function, in this process, without TF_CONFIG."""
    from components.trainer import training
    from pipeline.kubeflow.training_job.worker import fn_args_for

    props = _exec_properties(data, **overrides)
    out = Path(tempfile.mkdtemp(dir=scratch))
    fn_args = fn_args_for(props, str(data.examples), str(data.transform_graph),
                          str(out / "model"), str(out / "model_run"))
    result = training.train_and_export(fn_args, None)
    shutil.rmtree(out, ignore_errors=True)
    return result.examples_per_second


def floor_examples_per_second(data: Data, **overrides) -> float:
    """The same network fitted on the same transformed examples, held in memory (numpy)."""
    import numpy as np
    import tensorflow_transform as tft
    import tf_keras as keras

    from components.trainer import distribution, training
    from core.config import TrainingConfig
    from models.features import FeatureSpec
    from pipeline.kubeflow.training_job.worker import fn_args_for

    props = _exec_properties(data, **overrides)
    custom = json.loads(props["custom_config"])
    settings = TrainingConfig.model_validate(custom["training"])
    fn_args = fn_args_for(props, str(data.examples), str(data.transform_graph), "/x", "/x")
    spec = FeatureSpec.from_custom_config(custom)
    output = tft.TFTransformOutput(fn_args.transform_graph_path)
    features, labels = training.transformed_arrays(fn_args.train_files, fn_args.data_accessor,
                                                   output, spec)
    batch, steps = settings.batch_size, fn_args.train_steps
    repeat = -(-steps * batch // len(labels))  # enough rows for every step, as the Trainer has
    features = {k: np.concatenate([v] * repeat) for k, v in features.items()}
    labels = np.concatenate([labels] * repeat)
    keras.utils.set_random_seed(settings.seed)
    strategy = distribution.make_strategy(settings, distribution.Cluster())
    with strategy.scope():
        model = training.new_model(spec, training.task_head(custom, fn_args, output, spec),
                                   output, custom["model"], settings, custom["model_module"])
    meter = training.Throughput(batch, steps, warmup_steps=settings.steps_per_execution)
    model.fit(features, labels, batch_size=batch, epochs=1, steps_per_epoch=steps,
              shuffle=True, verbose=0, callbacks=[meter])
    return meter.examples_per_second


def _cpu_shares(parts: int) -> List[List[int]]:
    cpus = sorted(os.sched_getaffinity(0))
    size = max(1, len(cpus) // parts)
    return [cpus[i * size:(i + 1) * size] or cpus for i in range(parts)]


def multi_worker_examples_per_second(data: Data, scratch: Path, workers: int, batch: int,
                                     steps: int, shares: List[List[int]],
                                     steps_per_execution: int = 1) -> float:
    """`workers` train_worker processes on loopback; the chief's examples/s."""
    import portpicker

    out = Path(tempfile.mkdtemp(dir=scratch))
    props = out / "trainer.json"
    props.write_text(json.dumps(_exec_properties(
        data, **{"training.distribution_strategy": "multi_worker_mirrored",
                 "training.collective_implementation": "ring",
                 "training.batch_size": batch * workers, "training.train_steps": steps,
                 "training.steps_per_execution": steps_per_execution,
                 "training.startup_timeout_s": 300})))
    cluster = {"worker": [f"127.0.0.1:{portpicker.pick_unused_port()}" for _ in range(workers)]}
    processes = []
    for index in range(workers):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1",
               "TF_CONFIG": json.dumps({"cluster": cluster,
                                        "task": {"type": "worker", "index": index}})}
        cpus = shares[index]
        log = open(out / f"worker{index}.log", "w")
        processes.append((subprocess.Popen(
            [PYTHON, "-m", "pipeline.kubeflow.training_job.worker", "--exec-properties", str(props),
             "--examples", str(data.examples), "--transform-graph", str(data.transform_graph),
             "--model", str(out / "model"), "--model-run", str(out / "run"),
             "--result-json", str(out / f"worker{index}.json")],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=lambda cpus=cpus: os.sched_setaffinity(0, cpus)), log))
    try:
        for process, _ in processes:
            process.wait(timeout=WORKER_TIMEOUT_S)
    finally:
        for process, log in processes:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait()
            log.close()
    if any(p.returncode for p, _ in processes):
        tail = (out / "worker0.log").read_text()[-3000:]
        raise RuntimeError(f"a worker failed:\n{tail}")
    result = json.loads((out / "worker0.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return result["examples_per_second"]


def _alternate(measures: Dict[str, Callable[[], float]], repeat: int) -> Dict[str, float]:
    """Each measure `repeat` times, interleaved (A B A B ...), medians."""
    runs: Dict[str, List[float]] = {name: [] for name in measures}
    for _ in range(repeat):
        for name, measure in measures.items():
            runs[name].append(measure())
    return {name: statistics.median(values) for name, values in runs.items()}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path,
                        help="a folder with a finished run (pipeline.yaml, outputs/pipeline/)")
    parser.add_argument("--steps", type=int, default=3000, help="training steps per measurement")
    parser.add_argument("--batch", type=int, default=32,
                        help="global batch (single process), per-worker batch (multi-worker)")
    parser.add_argument("--worker-runs", nargs="+", default=["32:1", "1024:25", "16384:25"],
                        metavar="BATCH:STEPS_PER_EXECUTION",
                        help="per-worker batch and steps_per_execution to compare 1 and 2 "
                             "workers at (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args(argv)

    import components  # noqa: F401  (Keras 2 before TensorFlow loads)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    scratch = Path(tempfile.mkdtemp(prefix="bench-training-"))
    try:
        run_dir = args.run_dir
        if run_dir is None:
            run_dir = scratch / "run"
            run_dir.mkdir()
            _run_pipeline(run_dir)
        data = Data(run_dir)
        gpus = tf.config.list_physical_devices("GPU")
        base = {"training.train_steps": args.steps, "training.batch_size": args.batch}
        rows = []
        load = os.getloadavg()
        print(f"machine: {os.cpu_count()} CPUs, GPUs: {[g.name for g in gpus] or 'none'}, "
              f"TensorFlow {tf.__version__}; load average {load[0]:.2f} {load[1]:.2f}; "
              f"{args.steps} steps per figure, median of {args.repeat}", flush=True)

        pipeline = _alternate({
            "trainer": lambda: trainer_examples_per_second(data, scratch, **base),
            "floor": lambda: floor_examples_per_second(data, **base)}, args.repeat)
        rows.append((f"Trainer input pipeline, one_device, batch {args.batch}",
                     pipeline["trainer"], pipeline["trainer"] / pipeline["floor"], ">= 0.9x"))
        rows.append((f"bare Keras fit on in-memory arrays (floor), batch {args.batch}",
                     pipeline["floor"], 1.0, "floor"))
        print(f"  input pipeline: {pipeline}", flush=True)

        policies = ["float32", "mixed_bfloat16"] + (["mixed_float16"] if gpus else [])
        device = "GPU" if gpus else "CPU"
        precision = _alternate({p: (lambda p=p: trainer_examples_per_second(
            data, scratch, **base, **{"training.precision": p})) for p in policies}, args.repeat)
        for policy in policies:
            rows.append((f"Trainer {policy} on {device}, batch {args.batch}", precision[policy],
                         precision[policy] / precision["float32"], "vs float32"))
        print(f"  precision: {precision}", flush=True)

        shares = _cpu_shares(2)
        for run in args.worker_runs:
            batch, _, spe = run.partition(":")
            batch, spe = int(batch), int(spe or 1)
            steps = max(200, args.steps // 6)
            scaling = _alternate({
                n: (lambda n=n, batch=batch, spe=spe, steps=steps:
                    multi_worker_examples_per_second(data, scratch, n, batch, steps, shares, spe))
                for n in (1, 2)}, args.repeat)
            what = f"batch {batch}/worker, steps_per_execution {spe}"
            rows.append((f"multi_worker_mirrored, 1 worker ({what})", scaling[1], 1.0,
                         f"CPUs {shares[0]}"))
            rows.append((f"multi_worker_mirrored, 2 workers ({what})", scaling[2],
                         scaling[2] / scaling[1], f">= 1.6x; CPUs {shares[0]} + {shares[1]}"))
            print(f"  workers, {what}: {scaling}", flush=True)

        width = max(len(r[0]) for r in rows)
        print(f"\n{'measure':<{width}}  {'examples/s':>11}  {'ratio':>6}  goal")
        for name, value, ratio, goal in rows:
            print(f"{name:<{width}}  {value:>11,.0f}  {ratio:>5.2f}x  {goal}")
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.2f} {load[1]:.2f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
