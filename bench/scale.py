"""Ours at scale against the bare floor and TFX's own penguin example, in one run.

    .venv/bin/python -m bench.scale [--rows N] [--seed S] [--skip floor,baseline] [--keep]
                                    [--flink 1,2]

Data: one span of N penguins-shaped rows (data/<span>/penguins.csv), deterministic for a seed:
the bundled rows (data/penguins/span-*) drawn with replacement, each numeric cell times
(1 + u), u uniform in [-0.02, 0.02], rounded to the column's bundled precision; missing cells
stay missing. Each contender runs in a fresh process, timed from start to exit:
  1. floor     pandas + tf_keras in one process (`--floor-child`): read the CSV, per-column
               statistics, z-scores and vocabularies from the train share, the pipeline's network
               and training steps (config: train_steps, batch_size, model), evaluate on the eval
               share (every 4th row by a seeded hash, as 3:1), export a SavedModel.
  2. ours      the user's command, `python -m pipeline.run --runner local --config <tmp>` (a
               copy of configs/pipeline.yaml with input_base on the generated span, outputs in
               the temporary folder; tests.helpers.write_config).
  3. baseline  TFX's penguin example from the installed wheel, exactly as
               bench/pipeline_runtime.py runs it (its child, its shipped DirectRunner args), on
               the same rows in the example's penguins_processed.csv form (rows with a missing
               cell dropped, species as 0/1/2, numerics min-max scaled).
  4. flink-N   ours on a fresh `make flink-up` cluster of N TaskManagers (`--flink 1,2`: one
               contender per N; devtools/flink_cluster.py, each TaskManager with its own worker
               pool in a network namespace), `--beam-args` its printed flags. Besides ours'
               process tree, each cluster process is measured over the run: CPU seconds (the
               pools' with the SDK workers they started) and peak resident memory (JVMs: VmHWM;
               pools: the peak of the pool's tree, sampled).
Per component: seconds between TFX's 'Component X is running.' and '... is finished.' lines as
they arrive on the pipe (ours: its progress lines), and rows/s = N / seconds (for the
Evaluator and Trainer that is throughput over the whole span, a comparison figure, not what they
read). Peak RSS: the sum of the resident memory of the command's whole process tree, sampled
every 0.2 s from /proc (Beam workers included), and the largest single process (the highest
VmHWM among them: every peak of a process alive at a sample, even a shorter one).
The machine is shared: the load average is printed before and after; compare ratios from one run.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional
from bench.scratch import keep_or_remove, scratch_folder

REPO = Path(__file__).resolve().parent.parent
BUNDLED = REPO / "data" / "penguins"
PYTHON = sys.executable
SPAN = "span-20201231"
NUMERIC = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
NULLS = ["NA", ""]
_RUNNING = re.compile(r"Component (\S+) is running\.")
_FINISHED = re.compile(r"Component (\S+) is finished\.")
_OURS_DONE = re.compile(r"^\s+✓ (\S+) (\(from cache\) )?([\d.]+)s$")
_OURS_START = re.compile(r"^\s+> (\S+) \.\.\.$")
BEAM_STEPS = ("csvexamplegen", "statisticsgen", "transform", "evaluator")


class Result(NamedTuple):
    seconds: float
    cpu_seconds: float
    tree_rss_mib: float      # peak of the sum over the process tree
    single_rss_mib: float    # the largest single process (its VmHWM)
    components: Dict[str, float]
    component_rss_mib: Dict[str, float]  # the tree's peak while each component ran
    component_hwm_mib: Dict[str, float]  # the command process's VmHWM as each component ran


# ---------------------------------------------------------------- data

def generate(rows: int, seed: int, data_dir: Path) -> Path:
    """The span file; the same bytes for the same (rows, seed)."""
    import numpy as np
    import pandas as pd

    bundled = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False)
                         for p in sorted(BUNDLED.glob("span-*/*.csv"))], ignore_index=True)
    rng = np.random.default_rng(seed)
    picked = bundled.iloc[rng.integers(0, len(bundled), rows)].reset_index(drop=True)
    for column in NUMERIC:
        cells = picked[column]
        present = ~cells.isin(NULLS)
        decimals = max((len(c.split(".")[1]) for c in bundled[column] if "." in c), default=0)
        values = cells[present].astype(float) * (1 + rng.uniform(-0.02, 0.02, present.sum()))
        text = values.round(decimals).map(f"{{:.{decimals}f}}".format)
        picked[column] = cells.where(~present, text)
    path = data_dir / SPAN / "penguins.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    picked.to_csv(path, index=False, lineterminator="\n")
    return path


def example_processed_csv(source: Path, target: Path) -> int:
    """penguins_processed.csv as TFX's example expects it (see bench/pipeline_runtime.py)."""
    import pandas as pd

    from bench.pipeline_runtime import FEATURES, SPECIES

    frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    frame = frame[~frame.isin(NULLS).any(axis=1)]
    out = pd.DataFrame({"species": frame["species"].map(SPECIES)})
    for ours, theirs in FEATURES.items():
        values = frame[ours].astype(float)
        out[theirs] = (values - values.min()) / (values.max() - values.min())
    out = out.sort_values("species", kind="stable")
    target.parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(target, index=False, lineterminator="\n")
    return len(out)


# ---------------------------------------------------------------- the floor (child process)

def floor_child(csv_path: Path, config_path: Path, out_dir: Path) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import pandas as pd
    import yaml

    config = yaml.safe_load(config_path.read_text())
    features, training, model_config = config["features"], config["training"], config["model"]
    marks = [time.perf_counter()]
    frame = pd.read_csv(csv_path, na_values=config["data"]["null_markers"],
                        keep_default_na=False,
                        dtype={c: str for c in [features["label"], *features["categorical"]]})
    frame.describe(include="all")  # per-column statistics, as StatisticsGen
    eval_rows = pd.util.hash_pandas_object(frame, index=True).to_numpy() % 4 == 0
    train, evaluation = frame[~eval_rows], frame[eval_rows]
    marks.append(time.perf_counter())

    def encode(part):
        columns = {}
        for name in features["numeric"]:
            present = train[name]
            columns[name] = ((part[name] - present.mean()) / present.std()).fillna(0.0) \
                .to_numpy("float32")
        for name in features["categorical"]:
            vocab = pd.Index(train[name].fillna("__missing__").unique())
            ids = vocab.get_indexer(part[name].fillna("__missing__"))
            columns[name] = np.where(ids < 0, len(vocab), ids)  # one OOV bucket
        return columns

    labels = pd.Index(sorted(train[features["label"]].dropna().unique()))
    train_x, eval_x = encode(train), encode(evaluation)
    train_y = labels.get_indexer(train[features["label"]])
    eval_y = labels.get_indexer(evaluation[features["label"]])
    marks.append(time.perf_counter())

    import tensorflow as tf
    import tf_keras as keras

    class OneHot(keras.layers.Layer):
        def __init__(self, depth, **kwargs):
            super().__init__(**kwargs)
            self.depth = depth

        def call(self, ids):
            return tf.one_hot(tf.reshape(ids, [-1]), self.depth)

    sizes = {n: int(max(train_x[n].max(), eval_x[n].max())) + 2 for n in features["categorical"]}
    inputs = {n: keras.Input(shape=(1,), name=n) for n in features["numeric"]}
    encoded = list(inputs.values())
    for name in features["categorical"]:
        inputs[name] = keras.Input(shape=(1,), name=name, dtype="int64")
        encoded.append(OneHot(sizes[name])(inputs[name]))
    x = keras.layers.Concatenate()(encoded)
    for units in model_config["hidden_units"]:
        x = keras.layers.Dense(units, activation="relu")(x)
        x = keras.layers.Dropout(model_config["dropout"])(x)
    outputs = keras.layers.Dense(len(labels), activation="softmax")(x)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adam(model_config["learning_rate"]),
                  keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    batch = int(training["batch_size"])
    dataset = (tf.data.Dataset.from_tensor_slices((train_x, train_y))
               .shuffle(int(training["shuffle_buffer"]), seed=int(training["seed"]))
               .repeat().batch(batch))
    model.fit(dataset, steps_per_epoch=int(training["train_steps"]), epochs=1, verbose=0)
    marks.append(time.perf_counter())
    _, accuracy = model.evaluate(eval_x, eval_y, batch_size=4096, verbose=0)
    marks.append(time.perf_counter())
    model.save(str(out_dir / "export"), save_format="tf")
    marks.append(time.perf_counter())
    names = ["read+stats", "transform", "train", "evaluate", "export"]
    for name, start, end in zip(names, marks, marks[1:], strict=False):
        print(f"  ✓ {name} {end - start:.1f}s", flush=True)
    print(f"floor: {len(evaluation)} eval rows, accuracy {accuracy:.4f}", flush=True)


# ---------------------------------------------------------------- measuring

def _tree_memory_kib(root: int) -> tuple:
    """(resident KiB of root and all its descendants, root's high-water mark, the largest
    high-water mark among them), from /proc."""
    children: Dict[int, List[int]] = {}
    rss: Dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE") // 1024
        except (OSError, IndexError, ValueError):
            continue
    total, hwm, stack = 0, {}, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        hwm[pid] = _hwm_kib(pid)
        stack += children.get(pid, [])
    return total, hwm[root], max(hwm.values())


def _hwm_kib(pid: int) -> int:
    """A process's peak resident KiB so far (VmHWM); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return 0


def timed(command: List[str], cwd: Path, env: dict, log: Path) -> tuple:
    """(exit code, Result); the output goes to log, each line stamped as it arrives."""
    peak = [0]
    # The largest VmHWM of any process in the tree. Not the child's ru_maxrss: that counts the
    # pages of this process, forked before the exec, and this one holds the generated rows.
    largest = [0]
    # The process tree's peak while each component ran (the component the log names last).
    running: List[Optional[str]] = [None]
    component_peaks: Dict[str, float] = {}
    # The command's own process's high-water mark (VmHWM: every peak, even one shorter than a
    # sample) when each component ended: the component that raised it made the peak.
    component_hwm: Dict[str, float] = {}
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, text=True, errors="replace")
    done = threading.Event()

    def sample():
        while not done.wait(0.2):
            rss, root_hwm, hwm = _tree_memory_kib(process.pid)
            peak[0] = max(peak[0], rss)
            largest[0] = max(largest[0], hwm)
            if running[0] is not None:
                component_peaks[running[0]] = max(component_peaks.get(running[0], 0), rss / 1024)
                component_hwm[running[0]] = max(component_hwm.get(running[0], 0),
                                                root_hwm / 1024)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    components: Dict[str, float] = {}
    started: Dict[str, float] = {}
    with log.open("w") as out:
        for line in process.stdout:
            now = time.perf_counter()
            out.write(f"{now - start:8.2f} {line}")
            line = line.rstrip("\n")
            if match := _OURS_DONE.match(line):
                components[match.group(1)] = float(match.group(3))
            elif match := _OURS_START.match(line):
                running[0] = match.group(1)
            elif (match := _RUNNING.search(line)) and not match.group(1).endswith("_resolver"):
                started[match.group(1)] = now
                running[0] = match.group(1)
            elif (match := _FINISHED.search(line)) and match.group(1) in started:
                components.setdefault(match.group(1), now - started[match.group(1)])
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, Result(seconds, usage.ru_utime + usage.ru_stime, peak[0] / 1024,
                                      largest[0] / 1024, components, component_peaks,
                                      component_hwm)


def _cpu_s(pid: int, children: Dict[int, List[int]]) -> float:
    """CPU seconds of pid and its live descendants, with the children they already reaped."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        stack += children.get(current, [])
    return total


def _children() -> Dict[int, List[int]]:
    children: Dict[int, List[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(
                    int(entry))
        except (OSError, IndexError):
            continue
    return children


class ClusterWatch:
    """CPU seconds and peak resident MiB of each process of a `make flink-up` cluster (its
    state.json) from start() to stop(); pools with their SDK workers."""

    def __init__(self, state: dict):
        self.pids = {name: entry["pid"] for name, entry in state.items()}
        self.peak: Dict[str, float] = {name: 0.0 for name in self.pids}
        self.done = threading.Event()

    def start(self) -> None:
        children = _children()
        self.cpu0 = {n: _cpu_s(pid, children) for n, pid in self.pids.items()}
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(0.5):
            for name, pid in self.pids.items():
                rss, _, hwm = _tree_memory_kib(pid)
                self.peak[name] = max(self.peak[name], (rss if "pool" in name else hwm) / 1024)

    def stop(self) -> Dict[str, tuple]:
        self.done.set()
        self.thread.join()
        children = _children()
        return {n: (_cpu_s(pid, children) - self.cpu0[n], self.peak[n])
                for n, pid in self.pids.items()}


def run_on_flink(taskmanagers: int, command: List[str], scratch: Path, env: dict) -> tuple:
    """(Result, {process: (CPU s, peak MiB)}) of ours on a fresh cluster of N TaskManagers."""
    import json

    folder = scratch / f"flink-{taskmanagers}"
    up = subprocess.run([PYTHON, "-m", "devtools.flink_cluster", "up", "--folder", str(folder),
                         "--taskmanagers", str(taskmanagers)], cwd=REPO, capture_output=True,
                        text=True)
    if up.returncode != 0:
        print(up.stdout + up.stderr, file=sys.stderr)
        sys.exit(1)
    try:
        watch = ClusterWatch(json.loads((folder / "state.json").read_text()))
        watch.start()
        result = run_one(f"flink-{taskmanagers} (ours, --beam-args of make flink-up)",
                         [*command, "--beam-args", str(folder / "beam_args.json")], REPO, env,
                         folder / "run.log")
        return result, watch.stop()
    finally:
        subprocess.run([PYTHON, "-m", "devtools.flink_cluster", "down", "--folder", str(folder)],
                       cwd=REPO, capture_output=True)


def cluster_report(name: str, processes: Dict[str, tuple], ours: Result) -> str:
    lines = [f"{name} cluster processes (CPU s over the run, peak MiB):"]
    lines += [f"  {p:16}{cpu:8.0f}  {mib:8,.0f}" for p, (cpu, mib) in processes.items()]
    beam_cpu = sum(cpu for cpu, _ in processes.values())
    lines.append(f"  cluster CPU {beam_cpu:.0f} s + the run's own {ours.cpu_seconds:.0f} s")
    return "\n".join(lines)


def projection(results: Dict[str, Result], clusters: Dict[str, Dict[str, tuple]]) -> str:
    """N TaskManagers with a core each for their Beam work, from the measured runs. The Beam
    steps' cluster CPU is fitted as a + b*N from flink-1 and flink-2 (b: what each TaskManager
    adds whatever the rows, its pool's SDK workers starting and loading TensorFlow; a: the work
    that divides); each TaskManager's share (a + b*N)/N then runs in parallel, beside what does
    not (the rest of the night: Trainer, submitting)."""
    if "flink-1" not in results or "flink-2" not in results:
        return ""
    cpu = {n: sum(c for c, _ in clusters[f"flink-{n}"].values()) for n in (1, 2)}
    b = cpu[2] - cpu[1]
    a = cpu[1] - b
    one = results["flink-1"]
    rest = one.seconds - sum(s for c, s in one.components.items() if c.lower() in BEAM_STEPS)
    lines = [f"projection for N TaskManagers, a core each (basis: cluster CPU {cpu[1]:.0f} s at "
             f"N=1, {cpu[2]:.0f} s at N=2, so {a:.0f} s that divides and {b:.0f} s each "
             f"TaskManager adds; the rest of the night {rest:.0f} s):"]
    lines += [f"  N={n:<3} {rest + (a + b * n) / n:8.0f} s" for n in (1, 2, 4, 8, 16)]
    lines.append("  (2 cores here run every TaskManager, pool and the submitter: N > 2 is "
                 "arithmetic, not a measurement)")
    return "\n".join(lines)


def run_one(label: str, command: List[str], cwd: Path, env: dict, log: Path) -> Result:
    print(f"{label} ...", end="", flush=True)
    code, result = timed(command, cwd, env, log)
    if code != 0:
        print(f" FAILED (exit code {code}); log: {log}", flush=True)
        print("\n".join(log.read_text(errors="replace").splitlines()[-40:]), file=sys.stderr)
        sys.exit(1)
    print(f" {result.seconds:.1f} s (CPU {result.cpu_seconds:.0f} s), peak RSS tree "
          f"{result.tree_rss_mib:.0f} MiB, largest process {result.single_rss_mib:.0f} MiB",
          flush=True)
    return result


def report(rows: int, results: Dict[str, Result]) -> str:
    columns = f"{'':14}{'wall s':>9}{'CPU s':>8}{'RSS tree MiB':>14}{'largest MiB':>13}"
    lines = [f"{rows:,} rows", columns]
    for name, r in results.items():
        lines.append(f"{name:14}{r.seconds:9.1f}{r.cpu_seconds:8.0f}{r.tree_rss_mib:14.0f}"
                     f"{r.single_rss_mib:13.0f}")
    ours = results.get("ours")
    for name in (n for n in results if n.startswith("flink-")):
        if ours:
            ratio = results[name].seconds / ours.seconds
            lines.append(f"{name}/ours (in memory): wall {ratio:.2f}x")
    if "flink-1" in results and "flink-2" in results:
        beam = {n: sum(s for c, s in results[n].components.items() if c.lower() in BEAM_STEPS)
                for n in ("flink-1", "flink-2")}
        lines.append(f"flink-2/flink-1, the Beam steps: {beam['flink-2'] / beam['flink-1']:.2f}x "
                     f"({beam['flink-2']:.0f} s / {beam['flink-1']:.0f} s)")
    for other in ("baseline", "floor"):
        if ours and other in results:
            o = results[other]
            lines.append(f"ours/{other}: wall {ours.seconds / o.seconds:.2f}x, RSS tree "
                         f"{ours.tree_rss_mib / o.tree_rss_mib:.2f}x")
    for name, r in results.items():
        if r.components:
            # The floor's steps are timed inside its one process: no memory per step.
            memory = bool(r.component_rss_mib)
            lines.append(f"{name} per component (s, rows/s" + (
                ", MiB: peak RSS tree while it ran, the main process's high-water mark by its "
                "end):" if memory else "):"))
            lines += [f"  {c:22}{s:7.1f}  {rows / s if s else 0:>12,.0f}" + (
                f"  {r.component_rss_mib.get(c, 0):>8,.0f}  {r.component_hwm_mib.get(c, 0):>8,.0f}"
                if memory else "") for c, s in r.components.items()]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the span")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    parser.add_argument("--skip", default="", help="comma-separated: floor, ours, baseline")
    parser.add_argument("--config-change", action="append", default=[], metavar="KEY=YAML",
                        help="a change to ours' config, e.g. runner.beam_args=[...]")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--flink", default="", help="comma-separated TaskManager counts: ours "
                        "on a fresh local Flink cluster of each size (make flink-up)")
    parser.add_argument("--floor-child", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_child:
        floor_child(*args.floor_child)
        return 0
    skip = {s for s in args.skip.split(",") if s}
    sys.path.insert(0, str(REPO))
    import yaml

    from bench.pipeline_runtime import baseline_serving_dir, example_module_file
    from tests.helpers import write_config

    scratch = scratch_folder("scale-")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; folder {scratch}",
          flush=True)
    began = time.perf_counter()
    data_dir = scratch / "data"
    csv_path = generate(args.rows, args.seed, data_dir)
    print(f"data: {csv_path.stat().st_size / 1e6:.0f} MB, {args.rows:,} rows "
          f"({time.perf_counter() - began:.0f} s to generate)", flush=True)
    changes = {"data.input_base": str(data_dir)}
    changes.update({k: yaml.safe_load(v) for k, v in
                    (c.split("=", 1) for c in args.config_change)})
    config = write_config(scratch / "ours", changes)
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    results: Dict[str, Result] = {}
    if "floor" not in skip:
        (scratch / "floor").mkdir()
        results["floor"] = run_one(
            "floor (pandas + tf_keras)",
            [PYTHON, "-m", "bench.scale", "--floor-child", str(csv_path), str(config),
             str(scratch / "floor")], REPO, env, scratch / "floor" / "run.log")
    if "ours" not in skip:
        results["ours"] = run_one(
            "ours (python -m pipeline.run --runner local)",
            [PYTHON, "-m", "pipeline.run", "--runner", "local", "--config", str(config)],
            REPO, dict(os.environ), scratch / "ours" / "run.log")
    clusters: Dict[str, Dict[str, tuple]] = {}
    for count in (int(n) for n in args.flink.split(",") if n):
        results[f"flink-{count}"], clusters[f"flink-{count}"] = run_on_flink(
            count, [PYTHON, "-m", "pipeline.run", "--runner", "local", "--config",
                    str(write_config(scratch / f"ours-flink-{count}", changes))],
            scratch, dict(os.environ))
    if "baseline" not in skip:
        root = scratch / "baseline"
        (root / "penguin").mkdir(parents=True)
        shutil.copy2(example_module_file(), root / "penguin" / "penguin_utils_keras.py")
        kept = example_processed_csv(
            csv_path, root / "penguin" / "data" / "labelled" / "penguins_processed.csv")
        print(f"baseline data: {kept:,} rows (rows with a missing cell dropped)", flush=True)
        results["baseline"] = run_one(
            "baseline (TFX penguin example)",
            [PYTHON, "-m", "bench.pipeline_runtime", "--baseline-child", str(root)],
            root, {**env, "PYTHONPATH": str(REPO)}, root / "run.log")
        if not any(baseline_serving_dir(root).glob("*")):
            print("note: the baseline pushed no model (not blessed)", flush=True)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}\n")
    print(report(args.rows, results))
    for name, processes in clusters.items():
        print(cluster_report(name, processes, results[name]))
    print(projection(results, clusters))
    keep_or_remove(scratch, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
