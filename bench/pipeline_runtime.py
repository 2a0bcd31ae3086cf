"""Wall time and peak RSS of a whole local pipeline run: ours against TFX's own penguin example.

    .venv/bin/python -m bench.pipeline_runtime [--repeat N] [--keep]

Per repeat, each pipeline in a fresh temporary folder, each run a fresh process timed from start
to exit (imports, pipeline construction, every component, shutdown):
  1. baseline cold run          2. baseline unchanged re-run (same folders, cache on)
  3. ours cold run              4. ours unchanged re-run
Ours is the user's command, `python -m pipeline.run --runner local --config <tmp config>`, from
the repo root, with tests.helpers.write_config (outputs under the temporary folder).

The baseline is TFX's official penguin example as shipped in the installed wheel
(tfx/examples/penguin/penguin_pipeline_local.py), built by its own `create_pipeline(...)` and run
by LocalDagRunner in a child process (`--baseline-child`), as its __main__ does (absl INFO
logging, absl flags parsed), with its shipped settings: the DirectRunner args it sets
(--direct_running_mode=multi_processing --direct_num_workers=0), penguin_utils_keras.py as
module_file (copied alone into <tmp>/penguin/ as the example expects, so its ephemeral wheel holds
that one file), accuracy_threshold=0.6, enable_transform_input_cache=True, and what is hard-coded
in create_pipeline (Trainer 100 train / 5 eval steps, cache on, latest-blessed-model Resolver as
the Evaluator's baseline, Pusher under its blessing Cond). Reduced to our components:
enable_tuning=False (no Tuner), enable_bulk_inferrer=False, enable_example_diff=False, no
range configs. Deviations from the shipped example, all here:
- Data: the example reads data/labelled/penguins_processed.csv from the TFX source tree, which the
  wheel does not ship. An equivalent file is derived from our rows (data/penguins/span-*): rows
  with any missing cell dropped (333 of 344), species as 0/1/2 (Adelie, Chinstrap, Gentoo), the 4
  numeric features min-max scaled to [0, 1] and named as penguin_utils_base.FEATURE_KEYS expects
  (culmen_length_mm, culmen_depth_mm, flipper_length_mm, body_mass_g), rows ordered by species,
  as the upstream file is.
- ExampleValidator: create_pipeline wires one only with a user-provided schema (ImportSchemaGen).
  With SchemaGen, as its __main__ runs it, it has none; to match our component set the child adds
  ExampleValidator(statistics=StatisticsGen, schema=SchemaGen), wired as the example's other
  branch does, by wrapping tfx.dsl.Pipeline while create_pipeline builds the pipeline.
Not a deviation, but worth knowing: the example sets no TF_USE_LEGACY_KERAS (the child runs
without it even if the shell exports it), and its Trainer then trains a Keras 3 model (its log
shows Keras 3's "functional" model); ours sets it before TensorFlow loads and trains on Keras 2.
It also enables Transform's analyzer cache through a latest-artifact resolver: on a re-run that
resolver finds the first run's cache, a new input, so Transform, Trainer, Evaluator and Pusher
execute again; only ExampleGen, StatisticsGen, SchemaGen and ExampleValidator come from the cache.

Peak RSS is ru_maxrss from wait4 on the command: the largest single process of its tree (the
command itself or a reaped child such as a Beam worker), not the sum over processes. Each
progress line also gives the CPU time (user + system, same tree): wall time far above CPU time / the
number of cores means the run waited for a busy machine. Each progress line says which components
executed and which came from the cache (read from the command's output).
No assertions: it prints a table. Runs are noisy on a busy machine; use --repeat for medians.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple
from bench.scratch import keep_or_remove, scratch_folder

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data" / "penguins"
PYTHON = sys.executable

# The shipped example's values (penguin_pipeline_local.py, __main__ and module constants).
BASELINE_PIPELINE_NAME = "penguin_local_keras"
BASELINE_BEAM_ARGS = ["--direct_running_mode=multi_processing", "--direct_num_workers=0"]
BASELINE_ACCURACY_THRESHOLD = 0.6
SPECIES = {"Adelie": 0, "Chinstrap": 1, "Gentoo": 2}
# Our column -> the example's column (penguin_utils_base.FEATURE_KEYS).
FEATURES = {"bill_length_mm": "culmen_length_mm", "bill_depth_mm": "culmen_depth_mm",
            "flipper_length_mm": "flipper_length_mm", "body_mass_g": "body_mass_g"}
MISSING = ("NA", "")
TAIL_LINES = 40


class Run(NamedTuple):
    seconds: float
    peak_rss_mib: float
    cpu_seconds: float  # user + system, the command and its reaped children


# ---------------------------------------------------------------- baseline (child process side)

def baseline_child(root: Path) -> None:
    """What the example's __main__ does, with the example's paths rooted at `root`."""
    import absl
    from absl import flags
    from tfx import v1 as tfx
    from tfx.examples.penguin import penguin_pipeline_local as example

    real_pipeline = tfx.dsl.Pipeline

    def pipeline_with_validator(*args, components, **kwargs):
        by_id = {c.id: c for c in components}
        validator = tfx.components.ExampleValidator(
            statistics=by_id["StatisticsGen"].outputs["statistics"],
            schema=by_id["SchemaGen"].outputs["schema"])
        return real_pipeline(*args, components=[*components, validator], **kwargs)

    absl.logging.set_verbosity(absl.logging.INFO)
    flags.FLAGS([sys.argv[0]])
    penguin_root, tfx_root = root / "penguin", root / "tfx"
    tfx.dsl.Pipeline = pipeline_with_validator
    try:
        pipeline = example.create_pipeline(
            pipeline_name=BASELINE_PIPELINE_NAME,
            pipeline_root=str(tfx_root / "pipelines" / BASELINE_PIPELINE_NAME),
            data_root=str(penguin_root / "data"),
            module_file=str(penguin_root / "penguin_utils_keras.py"),
            accuracy_threshold=BASELINE_ACCURACY_THRESHOLD,
            serving_model_dir=str(baseline_serving_dir(root)),
            metadata_path=str(tfx_root / "metadata" / BASELINE_PIPELINE_NAME / "metadata.db"),
            user_provided_schema_path=None,
            enable_tuning=False,
            enable_bulk_inferrer=False,
            examplegen_input_config=None,
            examplegen_range_config_date=None,
            resolver_range_config=None,
            beam_pipeline_args=BASELINE_BEAM_ARGS,
            enable_transform_input_cache=True,
            enable_example_diff=False)
    finally:
        tfx.dsl.Pipeline = real_pipeline
    tfx.orchestration.LocalDagRunner().run(pipeline)


# ---------------------------------------------------------------- setup (bench side, stdlib only)

def baseline_serving_dir(root: Path) -> Path:
    return root / "penguin" / "serving_model" / BASELINE_PIPELINE_NAME


def derive_processed_csv(target: Path) -> int:
    """penguins_processed.csv as the example expects it, from our rows; returns the row count."""
    rows = []
    for path in sorted(DATA.glob("span-*/*.csv")):
        with path.open(newline="") as handle:
            rows += [row for row in csv.DictReader(handle)
                     if not any(value.strip() in MISSING for value in row.values())]
    bounds = {key: (min(float(r[key]) for r in rows), max(float(r[key]) for r in rows))
              for key in FEATURES}
    rows.sort(key=lambda r: SPECIES[r["species"]])
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["species", *FEATURES.values()])
        for row in rows:
            writer.writerow([SPECIES[row["species"]], *(
                repr((float(row[key]) - low) / (high - low))
                for key, (low, high) in bounds.items())])
    return len(rows)


def example_module_file() -> Path:
    """penguin_utils_keras.py of the installed tfx, found without importing tfx (slow)."""
    import importlib.util

    spec = importlib.util.find_spec("tfx")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("error: tfx is not installed in this Python; run with .venv/bin/python")
    path = Path(next(iter(spec.submodule_search_locations))) / "examples" / "penguin" / \
        "penguin_utils_keras.py"
    if not path.is_file():
        sys.exit(f"error: {path} is missing from the installed tfx")
    return path


def prepare_baseline_folder(root: Path) -> int:
    """The layout the example assumes under $HOME: penguin/{data/labelled/, module file}; its
    pipeline root and metadata go to tfx/ next to it. Returns the data's row count."""
    penguin_root = root / "penguin"
    penguin_root.mkdir(parents=True)
    shutil.copy2(example_module_file(), penguin_root / "penguin_utils_keras.py")
    return derive_processed_csv(penguin_root / "data" / "labelled" / "penguins_processed.csv")


def prepare_ours_folder(root: Path) -> Path:
    sys.path.insert(0, str(REPO))
    from tests.helpers import write_config

    return write_config(root)


def ours_serving_dir(config: Path) -> Path:
    import yaml

    raw = yaml.safe_load(config.read_text())
    return Path(raw["serving"]["serving_dir"]) / raw["serving"]["model_name"]


# ---------------------------------------------------------------- running and measuring

def timed(command: list[str], cwd: Path, log: Path, env: dict) -> tuple:
    """Runs command (output to log); returns (exit code, Run). wait4 gives the rusage."""
    with log.open("w") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return process.returncode, Run(seconds, usage.ru_maxrss / 1024,
                                   usage.ru_utime + usage.ru_stime)


def pushed_versions(serving_dir: Path) -> int:
    return sum(1 for p in serving_dir.glob("*") if p.name.isdigit()) if serving_dir.is_dir() \
        else 0


def executions(log: Path) -> tuple:
    """(components that executed, components in the run) from the command's output: our CLI's
    summary lines, or the example's absl INFO lines (resolvers are not components)."""
    ran, seen, current = [], [], None
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(("  ran:        ", "  from cache: ")):
            names = [n for n in line.split(":", 1)[1].strip().split(", ") if n != "-"]
            seen += names
            ran += names if line.startswith("  ran:") else []
        elif line.startswith("INFO:absl:Component ") and line.endswith(" is running."):
            current = line[len("INFO:absl:Component "):-len(" is running.")]
            if current.endswith("_resolver"):
                current = None
            else:
                seen.append(current)
                ran.append(current)
        elif current and line.startswith("INFO:absl:A cached execution "):
            ran.remove(current)
            current = None
    return ran, seen


def phase(label: str, command: list[str], cwd: Path, env: dict, log: Path, serving_dir: Path,
          keep_root: Path) -> Run:
    print(f"{label} ...", end="", flush=True)
    code, run = timed(command, cwd, log, env)
    if code != 0:
        print(f" FAILED (exit code {code}, {run.seconds:.1f} s)", flush=True)
        lines = log.read_text(errors="replace").splitlines()
        print(f"--- last {TAIL_LINES} lines of {log} ---", file=sys.stderr)
        print("\n".join(lines[-TAIL_LINES:]), file=sys.stderr)
        print(f"--- temporary folders kept: {keep_root} ---", file=sys.stderr)
        sys.exit(1)
    ran, seen = executions(log)
    if len(ran) == len(seen):
        work = f"all {len(seen)} components executed"
    elif not ran:
        work = f"all {len(seen)} components from cache"
    else:
        work = f"executed {len(ran)}/{len(seen)} ({', '.join(ran)}), the rest from cache"
    print(f" {run.seconds:.1f} s (CPU {run.cpu_seconds:.0f} s), peak RSS "
          f"{run.peak_rss_mib:.0f} MiB; {work}; "
          f"{pushed_versions(serving_dir)} model version(s) pushed so far", flush=True)
    return run


def one_repeat(index: int, total: int, scratch: Path) -> dict[str, Run]:
    tag = f"[{index}/{total}] " if total > 1 else ""
    baseline_root, ours_root = scratch / f"baseline-{index}", scratch / f"ours-{index}"
    rows = prepare_baseline_folder(baseline_root)
    if index == 1:
        print(f"baseline data: {rows} rows derived from {DATA.relative_to(REPO)} "
              f"(the example's penguins_processed.csv is not in the wheel)", flush=True)
    config = prepare_ours_folder(ours_root)
    baseline = [PYTHON, str(Path(__file__).resolve()), "--baseline-child", str(baseline_root)]
    ours = [PYTHON, "-m", "pipeline.run", "--runner", "local", "--config", str(config)]
    # The example sets no TF_USE_LEGACY_KERAS (a shell's export must not change what it runs).
    baseline_env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    runs = {}
    for key, label, command, cwd, env, root, serving in (
            ("baseline cold", "1. baseline cold run", baseline, baseline_root, baseline_env,
             baseline_root, baseline_serving_dir(baseline_root)),
            ("baseline rerun", "2. baseline unchanged re-run", baseline, baseline_root,
             baseline_env, baseline_root, baseline_serving_dir(baseline_root)),
            ("ours cold", "3. ours cold run", ours, REPO, dict(os.environ), ours_root,
             ours_serving_dir(config)),
            ("ours rerun", "4. ours unchanged re-run", ours, REPO, dict(os.environ), ours_root,
             ours_serving_dir(config))):
        log = root / f"{key.replace(' ', '-')}.log"
        runs[key] = phase(tag + label, command, cwd, env, log, serving, scratch)
    return runs


METRICS = (("wall s", "seconds", "{:.1f}"), ("CPU s", "cpu_seconds", "{:.0f}"),
           ("peak RSS MiB", "peak_rss_mib", "{:.0f}"))


def table(results: list[dict[str, Run]]) -> str:
    """Medians over the repeats, with the range when there is more than one."""
    def cell(key: str, field: str, fmt: str) -> tuple:
        values = sorted(getattr(r[key], field) for r in results)
        middle = statistics.median(values)
        text = fmt.format(middle)
        if len(values) > 1:
            text += f" ({fmt.format(values[0])}-{fmt.format(values[-1])})"
        return middle, text

    label = f"median (min-max) of {len(results)} runs" if len(results) > 1 else "1 run"
    lines = [f"Whole command, process start to exit ({label})",
             f"{'':22} {'baseline':>20} {'ours':>20} {'ours/baseline':>14}"]
    for name, suffix in (("cold", "cold"), ("re-run", "rerun")):
        for metric, field, fmt in METRICS:
            base, base_text = cell(f"baseline {suffix}", field, fmt)
            ours, ours_text = cell(f"ours {suffix}", field, fmt)
            ratio = f"{ours / base:.2f}" if base else "-"
            lines.append(f"{name:7}{metric:15} {base_text:>20} {ours_text:>20} {ratio:>14}")
            name = ""
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline_runtime", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="cold + re-run pairs per pipeline, "
                        "each repeat in fresh folders; the table shows medians (default 1)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders "
                        "(logs of every run, pipeline roots, metadata, pushed models)")
    parser.add_argument("--baseline-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.baseline_child:
        baseline_child(args.baseline_child)
        return 0
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    scratch = scratch_folder("pipeline-runtime-")
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"folders under {scratch}", flush=True)
    results = [one_repeat(i, args.repeat, scratch) for i in range(1, args.repeat + 1)]
    print()
    print(table(results))
    keep_or_remove(scratch, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
