"""The command line: parse args, load the config, build the pipeline, hand it to a runner.

    python -m pipeline.run --runner local [--config configs/pipeline.yaml]
    python -m pipeline.run --runner kubeflow [--config FILE] [--endpoint URL] [--schedule]

Exit status: 0 done; 1 the run failed; 2 unusable config; 3 another local run is using the same
runner.output_dir (this one did nothing: core/run_lock.py).
"""
from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import List, Optional

import pipeline  # (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

pipeline.quiet_cli()

from core.cli import add_config_argument, refuse  # noqa: E402
from core.config import ConfigError, load_config  # noqa: E402
from core.run_lock import RunInProgress, exclusive_run, refuse_if_busy  # noqa: E402


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner", choices=["local", "kubeflow"], default="local",
                        help="local: TFX's LocalDagRunner on Beam's DirectRunner (default); "
                        "kubeflow: compile for Kubeflow Pipelines (see deploy/kubeflow)")
    add_config_argument(parser, help="pipeline config YAML (default: configs/pipeline.yaml)")
    parser.add_argument("--endpoint", help="kubeflow: the KFP API URL; upload the compiled "
                        "pipeline and start a run (default: kubeflow.endpoint in the config)")
    parser.add_argument("--schedule", action="store_true", help="kubeflow: create or update the "
                        "nightly recurring run instead of starting a run now")
    parser.add_argument("--beam-args", type=Path, metavar="JSON_FILE", help="runner.beam_args "
                        "from this file (a JSON list), e.g. outputs/flink/beam_args.json, which "
                        "`make flink-up` writes for its cluster")
    args = parser.parse_args(argv)
    if args.runner != "kubeflow" and (args.endpoint or args.schedule):
        parser.error("--endpoint and --schedule go with --runner kubeflow")
    return args


def run_local(config) -> int:
    try:
        with exclusive_run(config.runner.output_dir, config.pipeline_name):
            return _run_local(config)
    except RunInProgress as error:
        print(f"error: {error}", file=sys.stderr)
        return 3


def _run_local(config) -> int:
    from pipeline.run_bounds import StepTimedOut, step_bound, unprobed, unreachable

    # Before any step: an endpoint of runner.beam_args that does not answer stops the run here.
    problem = unreachable(config.runner.beam_args, config.runner.connect_timeout_s)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    if unprobed(config.runner.beam_args):
        print(f"note: {unprobed(config.runner.beam_args)}")
    from pipeline.lazy_tfx import defer_tfx_packages

    # Before the first TFX import: only the components this pipeline holds load (not every one
    # TFX has, InfraValidator's kubernetes and docker clients among them: ~2 s of each run).
    defer_tfx_packages()
    if config.runner.beam_args:  # a cluster's workers: no TFX sdist for them (beam_step.py)
        from pipeline.beam_step import prepare

        prepare(config.runner.beam_args)
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from pipeline.errors import readable_cause
    from pipeline.builder import build_pipeline
    from components.skew_gate.executor import spans_fingerprint
    from core.progress import configure_logging

    import tensorflow as tf  # noqa: F401  (its logger must exist before it is rerouted)

    progress, log_file = configure_logging(config.log_dir)
    report_dir = config.runner.output_dir / "reports" / log_file.stem
    print(f"Running pipeline '{config.pipeline_name}' locally (full log: {log_file})")
    try:
        with step_bound(progress, config.runner.step_timeout_s, config.runner.beam_args):
            LocalDagRunner().run(build_pipeline(config, serving_spans=spans_fingerprint(
                config.serving_base, config.data.file_pattern)))
    except StepTimedOut as timed_out:
        with open(log_file, "a") as log:
            traceback.print_exc(file=log)
        print(f"error: {timed_out}\n(log: {log_file})", file=sys.stderr)
        print(_summary_and_report(config, progress, report_dir, log_file, str(timed_out)))
        _exit_now(1)
    except Exception as error:  # noqa: BLE001 (any failure ends the run with one line)
        with open(log_file, "a") as log:
            traceback.print_exc(file=log)
        cause = readable_cause(error)
        print(f"error: {cause}\n(traceback in {log_file})", file=sys.stderr)
        # A stopped run is when people read the report most.
        print(_summary_and_report(config, progress, report_dir, log_file, cause))
        return 1
    print(_summary_and_report(config, progress, report_dir, log_file))
    return 0


def _exit_now(status: int) -> None:
    """Ends the process although threads of the timed-out step still wait (Beam's job service,
    its worker handlers: a plain exit would join them forever); exit handlers (Beam's stop of
    the job server it started) get 10 s."""
    sys.stdout.flush()
    sys.stderr.flush()
    handlers = threading.Thread(target=atexit._run_exitfuncs, daemon=True)  # noqa: SLF001
    handlers.start()
    handlers.join(10)
    os._exit(status)


def _summary_and_report(config, progress, report_dir: Path, log_file: Path,
                        error: Optional[str] = None) -> str:
    """What ends the run's output, from one reading of the run's facts: the summary (a run that
    ended) and where its report is, or why there is none."""
    from pipeline import report

    started = time.monotonic()
    lines = []
    try:
        facts = report.run_facts(config, progress.ran, progress.cached, error)
        if error is None:
            lines.append(report.summary(facts, report_dir))
        path = report.write_report(facts, report_dir, config)
        logging.info("run summary and report written in %.2fs: %s", time.monotonic() - started,
                     path)
        lines.append(f"  report:     {path}")
    except Exception as failure:  # noqa: BLE001 (a report never hides the run's own outcome)
        with open(log_file, "a") as log:
            traceback.print_exc(file=log)
        lines.append(f"  report:     not written ({type(failure).__name__}: {failure}; see "
                     f"{log_file})")
    return "\n".join(lines)


def _beam_args_override(path: Optional[Path]) -> Optional[dict]:
    if path is None:
        return None
    try:
        flags = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ConfigError(f"--beam-args {path}: not a readable JSON list ({error}); `make "
                          "flink-up` writes one to outputs/flink/beam_args.json") from None
    return {"runner.beam_args": flags}


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        # Loading imports no TensorFlow: a second local run on a busy output folder is refused at
        # once.
        config = load_config(args.config, _beam_args_override(args.beam_args))
        if args.runner == "local":
            refuse_if_busy(config.runner.output_dir, config.pipeline_name)
    except ConfigError as error:
        return refuse(error)
    except RunInProgress as error:
        return refuse(error, 3)
    if args.runner == "kubeflow":
        from pipeline.kubeflow.client.cli import run_kubeflow

        return run_kubeflow(config, args.endpoint, args.schedule)
    return run_local(config)


if __name__ == "__main__":
    sys.exit(main())
