"""In-process latency of a pushed model: the serving path against the network alone, and load time.

    .venv/bin/python -m bench.serving_latency [--model-dir outputs/serving/penguins/<version>]
        [--iterations 1000] [--intra-op-threads N] [--inter-op-threads N]

Latency (P50/P99, batch 1 and 64, real rows of the config's data), every path a concrete function
of the loaded SavedModel (tf.saved_model.load), outputs fetched to NumPy:
- serving_default: serialized tf.Examples -> parse -> Transform -> network (what clients call);
- raw_features: dense raw tensors -> Transform -> network (the REST path; no parse);
- transform_features: serialized tf.Examples -> parse -> Transform (no network);
- network: the floor. The SavedModel's own Keras `__call__` (training=False) on inputs that
  transform_features produced beforehand; no second artifact is exported for it.
- call overhead: an identity function, i.e. what any call costs in Python whatever it computes;
- serving_default, TF1 session: the same signature loaded by the TF1 loader, the one TF Serving
  uses, run through Session.make_callable.
The calls take turns within each batch size, so that load from other processes hits all alike.
Load time: fresh processes each load the version with the TF1 loader, then answer batch-1
serving_default requests, without and with replaying assets.extra/tf_serving_warmup_requests first
(as TF Serving does before it marks a version AVAILABLE), then a first raw_features request.
No assertions: it prints a table.

    .venv/bin/python -m bench.serving_latency --retrieve [--items 100000] [--dim 64] [--k 10]

The retrieval case instead (no pushed model needed): a SavedModel holding `--items` seeded random
candidate embeddings and their ids (components/trainer/retrieval.py BruteForceTopK) with a
`retrieve(queries float32 [None, dim])` signature, i.e. the export's brute-force top k without
the query tower (that network's cost is the floor of the table above). Batch-1 P50/P99 of
`retrieve` through tf.saved_model.load's signature and through the TF1 session loader TF Serving
uses, against the floor measured in the same run, taking turns: NumPy on the same embeddings,
matmul + np.argpartition top k + a sort of those k (and its matmul alone, to show the split).
Every answer is checked against the floor's (the same ids, exact) before timing. Goals: P99 <= 2x
the floor, and far below a 100 ms SLO.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # as every entry point: Keras 2 before TensorFlow loads
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow_serving.apis import prediction_log_pb2  # noqa: E402

from core.config import DEFAULT_CONFIG, load_config  # noqa: E402

GOAL_P99_BATCH1_MS = 2.0
GOAL_RATIO_TO_FLOOR = 1.5
BATCHES = (1, 64)
FLOOR = "network (floor)"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
RETRIEVE_FLOOR = "numpy matmul+argpartition (floor)"
GOAL_RETRIEVE_RATIO, RETRIEVE_SLO_MS = 2.0, 100.0


def newest_version(config_path: Path) -> Path:
    base = load_config(config_path).model_base_path
    versions = sorted((p for p in base.glob("*") if p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        sys.exit(f"error: no pushed version under {base}; run the pipeline or pass --model-dir")
    return versions[-1]


def real_rows(config_path: Path):
    """The config's data rows three ways: serialized tf.Examples with and without the label (the
    pipeline's CSV reader) and typed raw rows (the REST client's reader)."""
    from components.example_gen.csv_reader import files_in_window, parse_csv
    from pipeline.predict import read_rows

    config = load_config(config_path)
    features, nulls = config.features, config.data.null_markers
    files = files_in_window(str(config.data.input_base), config.data.file_pattern, 10**9,
                            config.data.span_window)
    labelled, examples, rows = [], [], []
    for path in [f for span_files in files.values() for f in span_files]:
        for example in parse_csv(path, Path(path).read_text(), config.reader_features, nulls):
            labelled.append(example.SerializeToString())
            del example.features.feature[features.label]  # clients do not send the label
            examples.append(example.SerializeToString())
        rows += [row.values for row in read_rows(Path(path), features, nulls)]
    return config, labelled, examples, rows


def percentiles(calls: Dict[str, Callable[[], object]], iterations: int
                ) -> Dict[str, Dict[str, float]]:
    """P50/P99 in ms per call. The calls take turns, one each per iteration, so that a busy
    moment of the machine hits every path alike and the ratios stay comparable."""
    for call in calls.values():
        for _ in range(min(50, iterations)):  # first calls build kernels and caches
            call()
    times = {name: np.empty(iterations) for name in calls}
    for i in range(iterations):
        for name, call in calls.items():
            start = time.perf_counter_ns()
            call()
            times[name][i] = time.perf_counter_ns() - start
    return {name: {"p50": np.percentile(t, 50) / 1e6, "p99": np.percentile(t, 99) / 1e6}
            for name, t in times.items()}


class ServingPaths:
    """The version loaded once by each loader; `calls(batch)` gives one zero-argument call per
    path. Inputs are built outside the timed calls, and each call takes the next of up to 64
    different batches, so that consecutive requests differ as real traffic does."""

    def __init__(self, model_dir: Path, config, labelled: List[bytes], examples: List[bytes],
                 rows: List[dict]):
        from models.features import FeatureSpec

        self.loaded = tf.saved_model.load(str(model_dir))
        self.session_run = _session_callable(model_dir)
        self.spec = FeatureSpec(label=config.features.label, numeric=config.features.numeric,
                                categorical=config.features.categorical)
        self.labelled, self.examples, self.rows = labelled, examples, rows

    def calls(self, batch: int) -> Dict[str, Callable[[], object]]:
        from models.features import as_model_inputs

        spec, loaded = self.spec, self.loaded
        starts = range(0, len(self.examples) - batch + 1, batch)[:64]
        examples = [self.examples[s:s + batch] for s in starts]
        example_tensors = [tf.constant(b) for b in examples]
        example_arrays = [np.array(b, dtype=object) for b in examples]
        raw_tensors = [{name: tf.constant([row[name] for row in self.rows[s:s + batch]],
                                          tf.float32 if name in spec.numeric else tf.string)
                        for name in spec.inputs} for s in starts]
        # transform_features parses the label too (it is TFMA's preprocessing).
        labelled = [tf.constant(self.labelled[s:s + batch]) for s in starts]
        transform = loaded.signatures["transform_features"]
        transformed = [as_model_inputs(transform(examples=b), spec) for b in labelled]
        # The network alone: the SavedModel's Keras __call__ (training=False), wrapped in a
        # concrete function so that it is dispatched like a signature.
        network = tf.function(lambda inputs: loaded(inputs, False, None)).get_concrete_function(
            {name: tf.TensorSpec([None, 1], t.dtype) for name, t in transformed[0].items()})
        # What any concrete-function call costs in Python, whatever it computes.
        identity = tf.function(lambda x: tf.identity(x)).get_concrete_function(
            tf.TensorSpec([None], tf.string))
        serving, raw = loaded.signatures["serving_default"], loaded.signatures["raw_features"]
        next_batch = _Cycle(len(starts))
        return {
            "serving_default": lambda: serving(examples=example_tensors[next_batch()])[
                "probabilities"].numpy(),
            "raw_features": lambda: raw(**raw_tensors[next_batch()])["probabilities"].numpy(),
            "transform_features": lambda: {k: v.numpy() for k, v in transform(
                examples=labelled[next_batch()]).items()},
            FLOOR: lambda: network(transformed[next_batch()]).numpy(),
            "call overhead (identity fn)": lambda: identity(
                example_tensors[next_batch()]).numpy(),
            "serving_default, TF1 session": lambda: self.session_run(
                example_arrays[next_batch()]),
        }


class _Cycle:
    def __init__(self, size: int):
        self.size, self.i = size, -1

    def __call__(self) -> int:
        self.i = (self.i + 1) % self.size
        return self.i


def _session_callable(model_dir: Path):
    """serving_default through the TF1 loader and Session, fetching every output as TF Serving
    does; make_callable keeps Python's per-call feed handling out of the way."""
    session = tf.compat.v1.Session(graph=tf.Graph())
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(model_dir))
    signature = meta_graph.signature_def["serving_default"]
    fetches = [info.name for _, info in sorted(signature.outputs.items())]
    return session.make_callable(fetches, [signature.inputs["examples"].name])


def load_probe(model_dir: Path, replay_warmup: bool, example: bytes) -> Dict[str, float]:
    """Runs in a fresh process: TF1 load, optional warmup replay, then the first two requests."""
    # Read in both modes and before any clock starts, so that neither mode is charged for
    # starting tf.data (TF Serving reads the file in C++).
    requests = [prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
                for record in tf.data.TFRecordDataset(str(model_dir / WARMUP_FILE))]
    timings = {}
    start = time.perf_counter()
    session = tf.compat.v1.Session(graph=tf.Graph())
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(model_dir))
    timings["load_s"] = time.perf_counter() - start

    def run(signature_name: str, inputs: dict):
        signature = meta_graph.signature_def[signature_name or "serving_default"]
        return session.run({k: v.name for k, v in signature.outputs.items()},
                           {signature.inputs[k].name: v for k, v in inputs.items()})

    start = time.perf_counter()
    for request in requests if replay_warmup else []:
        run(request.model_spec.signature_name,
            {k: tf.make_ndarray(v) for k, v in request.inputs.items()})
    timings["warmup_s"] = time.perf_counter() - start
    for key in ("first_request_s", "second_request_s"):
        start = time.perf_counter()
        run("serving_default", {"examples": np.array([example], dtype=object)})
        timings[key] = time.perf_counter() - start
    # The REST client's signature: a session prepares each signature on its first request, so
    # only warmup records for raw_features itself would take this off a user's request.
    raw = _raw_inputs(example, meta_graph.signature_def["raw_features"])
    start = time.perf_counter()
    run("raw_features", raw)
    timings["first_raw_features_s"] = time.perf_counter() - start
    return timings


def _raw_inputs(serialized: bytes, signature) -> Dict[str, np.ndarray]:
    """One example as raw_features inputs: a missing value is NaN or "", as the client sends."""
    features = tf.train.Example.FromString(serialized).features.feature
    inputs = {}
    for name, info in signature.inputs.items():
        if info.dtype == tf.string.as_datatype_enum:
            value = features[name].bytes_list.value[0] if name in features else b""
            inputs[name] = np.array([value], dtype=object)
        else:
            value = features[name].float_list.value[0] if name in features else np.nan
            inputs[name] = np.array([value], dtype=np.float32)
    return inputs


def load_times(model_dir: Path, example: bytes, repeats: int) -> Dict[str, Dict[str, float]]:
    results = {}
    for mode in ("no warmup", "warmup replay"):
        runs = []
        for _ in range(repeats):
            command = [sys.executable, "-m", "bench.serving_latency", "--model-dir", str(model_dir),
                       "--load-probe", mode, "--probe-example", base64.b64encode(example).decode()]
            done = subprocess.run(command, capture_output=True, text=True, check=False,
                                  cwd=Path(__file__).resolve().parent.parent)
            if done.returncode != 0:
                sys.exit(f"error: load probe failed:\n{done.stderr[-2000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        results[mode] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    return results


def print_report(model_dir: Path, latencies: Dict[int, Dict[str, Dict[str, float]]],
                 loads: Dict[str, Dict[str, float]], args, load_before: float) -> None:
    threads = (tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads())
    load_after, cpus = os.getloadavg()[0], os.cpu_count() or 1
    print(f"model: {model_dir}")
    print(f"iterations: {args.iterations} per path and batch; CPUs: {cpus}; "
          f"intra/inter-op threads: {threads[0] or 'default'}/{threads[1] or 'default'}; "
          f"load average before/after: {load_before:.2f}/{load_after:.2f}")
    if max(load_before, load_after) > cpus / 2:
        print("note: other processes were using the CPUs; P99 mostly measures them (compare the "
              "empty call's P99), P50 and its ratios hold up better")
    print()
    print(f"{'path':32} {'batch':>5} {'P50 ms':>8} {'P99 ms':>8} {'P50 x floor':>12} "
          f"{'P99 x floor':>12}")
    for batch, paths in latencies.items():
        floor = paths[FLOOR]
        for name, stats in paths.items():
            print(f"{name:32} {batch:>5} {stats['p50']:>8.3f} {stats['p99']:>8.3f} "
                  f"{stats['p50'] / floor['p50']:>12.2f} {stats['p99'] / floor['p99']:>12.2f}")
    print()
    served, floor = latencies[1]["serving_default"], latencies[1][FLOOR]
    ratios = {q: served[q] / floor[q] for q in ("p50", "p99")}
    print(f"goal P99 batch 1 < {GOAL_P99_BATCH1_MS} ms (serving_default): "
          f"{served['p99']:.3f} ms -> {'met' if served['p99'] < GOAL_P99_BATCH1_MS else 'NOT met'}")
    print(f"goal <= {GOAL_RATIO_TO_FLOOR}x floor (serving_default, batch 1): "
          f"{ratios['p50']:.2f}x at P50, {ratios['p99']:.2f}x at P99 -> "
          f"{'met' if max(ratios.values()) <= GOAL_RATIO_TO_FLOOR else 'NOT met'}")
    if loads:
        print()
        print(f"load time, TF1 loader, median of {args.load_repeats} fresh processes (seconds):")
        print(f"{'':16} {'load':>8} {'warmup':>8} {'1st req':>8} {'2nd req':>8} "
              f"{'to 1st answer':>14} {'then 1st raw_features':>22}")
        for mode, t in loads.items():
            total = t["load_s"] + t["warmup_s"] + t["first_request_s"]
            print(f"{mode:16} {t['load_s']:>8.3f} {t['warmup_s']:>8.3f} "
                  f"{t['first_request_s']:>8.4f} {t['second_request_s']:>8.4f} {total:>14.3f} "
                  f"{t['first_raw_features_s']:>22.4f}")
        print("(req: serving_default, batch 1; the warmup records hold serving_default requests)")


def retrieval_case(folder: Path, items: int, dim: int, k: int, iterations: int
                   ) -> Dict[str, Dict[str, float]]:
    """Batch-1 P50/P99 of the retrieve signature, both loaders, against the NumPy floor."""
    from components.trainer.retrieval import BruteForceTopK, retrieval_signature

    rng = np.random.default_rng(23)
    embeddings = rng.normal(size=(items, dim)).astype(np.float32)
    ids = np.array([f"item-{i:07d}".encode() for i in range(items)], dtype=object)
    queries = [rng.normal(size=(1, dim)).astype(np.float32) for _ in range(64)]
    root = tf.Module()
    root.retrieval = BruteForceTopK(embeddings, ids, k)
    k = root.retrieval.k  # clamped to the candidates
    signature = retrieval_signature(root.retrieval, lambda inputs: inputs["queries"],
                                    {"queries": tf.TensorSpec([None, dim], tf.float32)})
    start = time.perf_counter()
    tf.saved_model.save(root, str(folder), signatures={"retrieve": signature})
    timings = {"save_s": time.perf_counter() - start}
    del root, signature
    start = time.perf_counter()
    retrieve = tf.saved_model.load(str(folder)).signatures["retrieve"]
    timings["tf2_load_s"] = time.perf_counter() - start
    start = time.perf_counter()
    session = tf.compat.v1.Session(graph=tf.Graph())
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], str(folder))
    sig = meta_graph.signature_def["retrieve"]
    session_run = session.make_callable([sig.outputs["item_ids"].name, sig.outputs["scores"].name],
                                        [sig.inputs["queries"].name])
    timings["tf1_load_s"] = time.perf_counter() - start

    def floor(query: np.ndarray):
        scores = embeddings @ query[0]  # [N]: a matrix-vector product on the row-major [N, d]
        top = np.argpartition(scores, items - k)[items - k:]
        top = top[np.argsort(-scores[top], kind="stable")]
        return ids[top], scores[top]

    tensors = [tf.constant(q) for q in queries]
    agree = 0
    for query, tensor in zip(queries, tensors, strict=True):
        want, _ = floor(query)
        got = retrieve(queries=tensor)["item_ids"].numpy()[0]
        agree += int(list(got) == list(want) == list(session_run(query)[0][0]))
    identity = tf.function(lambda x: tf.identity(x)).get_concrete_function(
        tf.TensorSpec([None, dim], tf.float32))
    next_query = _Cycle(len(queries))
    calls = {
        "retrieve": lambda: {name: v.numpy() for name, v in retrieve(
            queries=tensors[next_query()]).items()},
        "retrieve, TF1 session": lambda: session_run(queries[next_query()]),
        RETRIEVE_FLOOR: lambda: floor(queries[next_query()]),
        "numpy matmul alone": lambda: embeddings @ queries[next_query()][0],
        "call overhead (identity fn)": lambda: identity(tensors[next_query()]).numpy(),
    }
    latencies = percentiles(calls, iterations)
    session.close()
    latencies["_info"] = {**timings, "k": k, "agree": agree, "queries": len(queries),
                          "size_mb": sum(f.stat().st_size for f in folder.rglob("*")
                                         if f.is_file()) / 2**20}
    return latencies


def print_retrieval_report(latencies: Dict[str, Dict[str, float]], args,
                           load_before: float) -> None:
    info = latencies.pop("_info")
    threads = (tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads())
    load_after, cpus = os.getloadavg()[0], os.cpu_count() or 1
    clamped = f" (clamped to {info['k']})" if info["k"] != args.k else ""
    print(f"retrieve: {args.items:,} candidates, d={args.dim}, k={args.k}{clamped}, batch 1; "
          f"SavedModel {info['size_mb']:.1f} MiB (save {info['save_s']:.2f} s, TF2 load "
          f"{info['tf2_load_s']:.2f} s, TF1 load {info['tf1_load_s']:.2f} s)")
    print(f"iterations: {args.iterations} per path; CPUs: {cpus}; intra/inter-op threads: "
          f"{threads[0] or 'default'}/{threads[1] or 'default'}; load average before/after: "
          f"{load_before:.2f}/{load_after:.2f}")
    if max(load_before, load_after) > cpus / 2:
        print("note: other processes were using the CPUs; P99 mostly measures them (compare the "
              "empty call's P99), P50 and its ratios hold up better")
    print(f"same top-k ids as the floor (both loaders): {info['agree']}/{info['queries']} queries")
    print()
    floor = latencies[RETRIEVE_FLOOR]
    print(f"{'path':36} {'P50 ms':>8} {'P99 ms':>8} {'P50 x floor':>12} {'P99 x floor':>12}")
    for name, stats in latencies.items():
        print(f"{name:36} {stats['p50']:>8.3f} {stats['p99']:>8.3f} "
              f"{stats['p50'] / floor['p50']:>12.2f} {stats['p99'] / floor['p99']:>12.2f}")
    print()
    for name in ("retrieve", "retrieve, TF1 session"):
        served = latencies[name]
        ratio = served["p99"] / floor["p99"]
        met = ratio <= GOAL_RETRIEVE_RATIO and served["p99"] < RETRIEVE_SLO_MS
        print(f"goal P99 <= {GOAL_RETRIEVE_RATIO}x floor and < {RETRIEVE_SLO_MS:.0f} ms ({name}): "
              f"{served['p99']:.3f} ms, {ratio:.2f}x -> {'met' if met else 'NOT met'}")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.serving_latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path,
                        help="a pushed version (default: the newest under the config's "
                             "serving_dir/model_name)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--load-repeats", type=int, default=3,
                        help="fresh processes per load-time mode (0: skip load times)")
    parser.add_argument("--intra-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--inter-op-threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--retrieve", action="store_true",
                        help="the brute-force retrieval case instead (synthetic candidates)")
    parser.add_argument("--items", type=int, default=100_000, help="--retrieve: candidates")
    parser.add_argument("--dim", type=int, default=64, help="--retrieve: embedding size")
    parser.add_argument("--k", type=int, default=10, help="--retrieve: results per query")
    # Internal: one load measurement in a fresh process, for one serialized tf.Example (base64).
    parser.add_argument("--load-probe", choices=["no warmup", "warmup replay"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--probe-example", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    tf.get_logger().setLevel("ERROR")  # the TF1 loader's deprecation notice, on every load
    if args.load_probe:
        example = base64.b64decode(args.probe_example)
        print(json.dumps(load_probe(args.model_dir, args.load_probe == "warmup replay", example)))
        return 0
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.retrieve:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="retrieve-") as folder:
            latencies = retrieval_case(Path(folder) / "1", args.items, args.dim, args.k,
                                       args.iterations)
        print_retrieval_report(latencies, args, load_before)
        return 0
    model_dir = (args.model_dir or newest_version(args.config)).resolve()
    config, labelled, examples, rows = real_rows(args.config)
    paths = ServingPaths(model_dir, config, labelled, examples, rows)
    latencies = {batch: percentiles(paths.calls(batch), args.iterations) for batch in BATCHES}
    loads = load_times(model_dir, examples[0], args.load_repeats) if args.load_repeats else {}
    print_report(model_dir, latencies, loads, args, load_before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
