"""The exit step of a Kubeflow run (exit_handler.py): it runs whatever the other steps' outcome.

    python -m pipeline.kubeflow.step.run_exit --executor_input '{{$}}'

It reads the steps' records of this run (step_records.py) and, on 2.14.0+, the guarded DAG's
final state (PipelineTaskFinalStatus), and says how the night ended:
- completed: every step that ran succeeded; the RunReport step wrote the report (blessed or
  not blessed), so this step's outputs only point at it and nothing is posted;
- failed at <step>: a step failed (its error's last line); or failed before <steps> started,
  when the DAG failed without any step failing (a driver or a pod that never started);
- stopped during <step>: a step's pod was killed while it ran (the run was terminated, or the pod
  died: out of memory, a node lost).
For a failed or stopped night it writes the run report (HTML and Markdown outputs, which the KFP
UI shows: components/run_report/render.py) from what the steps that ran recorded (their output
artifacts, read by the run report's reader) and posts a short message to the webhook
(pipeline/notify.py's message and post; the URL from the variable notify.webhook_env, which the
PlatformSpec fills from the Secret notify.kubeflow_secret). Without that Secret it posts nothing.

Exit status: 0 done; 1 the webhook did not take the message; 2 unusable input or no URL.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Dict, List, Optional

from core import storage
from pipeline.kubeflow.step import step_records


COMPLETED, FAILED, STOPPED = "completed", "failed", "stopped"
TFX_PROPERTIES = {"span": int, "version": int, "split_names": str}


@dataclasses.dataclass
class Outcome:
    state: str  # COMPLETED, FAILED or STOPPED
    step: Optional[str] = None  # the step that failed or was running
    error: Optional[str] = None
    ran: List[str] = dataclasses.field(default_factory=list)  # the steps that succeeded

    @property
    def words(self) -> str:
        """'failed at Trainer', 'stopped during Transform', 'completed'."""
        if self.state == FAILED:
            return f"failed at {self.step}" if self.step else "failed"
        if self.state == STOPPED:
            return f"stopped during {self.step}"
        return COMPLETED


def judge(records: Dict[str, dict], guarded: List[str],
          final_status: Optional[dict] = None) -> Outcome:
    """How the night ended, from the steps' records and, when given, the guarded DAG's state."""
    ran = [t for t in guarded if records.get(t, {}).get("state") == step_records.SUCCEEDED]
    for task in guarded:
        if records.get(task, {}).get("state") == step_records.FAILED:
            return Outcome(FAILED, task, records[task].get("error"), ran)
    for task in guarded:
        if records.get(task, {}).get("state") == step_records.RUNNING:
            return Outcome(STOPPED, task, f"{task}'s pod was killed while it ran (the run was "
                           "stopped, or the pod died)", ran)
    if final_status and final_status.get("state") not in (None, "COMPLETE"):
        missing = [t for t in guarded if t not in records]
        return Outcome(FAILED, None, f"the steps ended {final_status['state']} with no step "
                       f"failing: {', '.join(missing) or 'a step'} never started (a driver or a "
                       "pod failed; see the run in the KFP UI)", ran)
    return Outcome(COMPLETED, ran=ran)


def as_mlmd(recorded: dict):
    """A recorded output (step_records: uri, metadata) as the ML Metadata artifact the run
    report's reader takes: each metadata value a custom property, as KFP's launcher records it
    (converter.go StructValueToMLMDValue: numbers double, bools int, lists and dicts wrapped)."""
    from google.protobuf import json_format
    from ml_metadata.proto import metadata_store_pb2

    artifact = metadata_store_pb2.Artifact(uri=recorded.get("uri") or "")
    metadata = recorded.get("metadata") or {}
    # The properties TFX's standard types declare (Examples, ExampleStatistics,
    # ExampleAnomalies: tfx/types/standard_artifacts.py), which a step's artifact holds as such.
    for key, kind in TFX_PROPERTIES.items():
        if isinstance(metadata.get(key), (int, float, str)):
            if kind is int:
                artifact.properties[key].int_value = int(metadata[key])
            else:
                artifact.properties[key].string_value = str(metadata[key])
    for key, value in metadata.items():
        target = artifact.custom_properties[key]
        if isinstance(value, bool):
            target.int_value = int(value)
        elif isinstance(value, (int, float)):
            target.double_value = float(value)
        elif isinstance(value, str):
            target.string_value = value
        elif value is not None:
            json_format.ParseDict({"list" if isinstance(value, list) else "struct": value},
                                  target.struct_value)
    return artifact


def report_facts(settings, run_id: str, outcome: Outcome, records: Dict[str, dict],
                 input_base: Optional[str] = None):
    """RunFacts of a failed or stopped night: what ran, where it ended, why, and what the
    artifacts of the steps that ran say (the RunReport's reader, on what they recorded). An
    artifact the reader cannot read leaves them out: the night's outcome is still reported.
    input_base: the data as the config's JSON names it (the RunReport step gets it the same way:
    the config's Path folds an s3:// URL to s3:/, where no span is found)."""
    from components.run_report import reader

    outputs = {(task, key): as_mlmd(recorded) for task, record in records.items()
               for key, recorded in (record.get("outputs") or {}).items()}
    try:
        facts = reader.from_outputs(outputs, settings, run_id, error=outcome.error,
                                    input_base=input_base)
    except Exception as error:  # noqa: BLE001
        print(f"warning: the steps' artifacts were left out of the report: {error!r}")
        facts = reader.from_outputs({}, settings, run_id, error=outcome.error)
    facts.ran = list(outcome.ran)
    facts.failed_steps = [outcome.step] if outcome.step else []
    return facts


def _write(gfile, uri: str, text: str) -> None:
    storage.makedirs(uri.rsplit("/", 1)[0], gfile.makedirs)  # none on an object store
    with gfile.GFile(uri, "w") as f:
        f.write(text)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.step.run_exit",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--executor_input", required=True, help="KFP's ExecutorInput ({{$}})")
    from pipeline.kubeflow.step import run_lease_step


    try:
        lease, argv = run_lease_step.split_flag(list(sys.argv[1:] if argv is None else argv))
    except run_lease_step.LeaseFlagError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        executor_input = json.loads(args.executor_input)
    except ValueError as error:
        print(f"error: the exit step's --executor_input is not JSON: {error}", file=sys.stderr)
        return 2
    try:
        return _exit_step(executor_input)
    finally:
        # Whatever the outcome, the run is over: its lease goes (a no-op once the RunReport gave
        # it back; only this run's own lease is ever released).
        run_lease_step.after(lease, executor_input, 0)


def _exit_step(executor_input: dict) -> int:
    from core.config import PipelineConfig
    from pipeline import notify
    from pipeline.kubeflow.step import file_systems


    try:
        values = executor_input["inputs"]["parameterValues"]
        raw = json.loads(values["config"])
        settings = PipelineConfig.model_validate(raw)
        input_base = str(raw["data"]["input_base"])
        guarded = list(values["guarded_tasks"])
        outputs = {k: v["artifacts"][0]["uri"]
                   for k, v in executor_input["outputs"]["artifacts"].items()}
        run_root, _ = step_records.place(executor_input)
    except (ValueError, KeyError, TypeError) as error:
        print(f"error: the exit step's ExecutorInput is not one exit_handler.py compiles: "
              f"{error!r}", file=sys.stderr)
        return 2
    run_id = run_root.rsplit("/", 1)[-1]
    file_systems.enable([run_root, input_base, *outputs.values()])
    from tensorflow.io import gfile

    records = step_records.read(gfile, run_root, guarded)
    outcome = judge(records, guarded, values.get("final_status"))
    print(f"the night {outcome.words}" + (f": {outcome.error}" if outcome.error else ""))
    if outcome.state == COMPLETED:
        note = ("The night completed: the RunReport step's outputs are its report "
                f"(steps run here: {', '.join(outcome.ran) or 'none, all from the cache'}).\n")
        _write(gfile, outputs["markdown"], note)
        _write(gfile, outputs["html"], f"<html><body><p>{note}</p></body></html>")
        return 0
    from components.run_report import render

    facts = report_facts(settings, run_id, outcome, records, input_base)
    _write(gfile, outputs["html"], render.html(facts))
    _write(gfile, outputs["markdown"], render.markdown(facts, outputs["html"]))
    if settings.notify.kubeflow_secret is None:
        print("no webhook: notify.kubeflow_secret is null, nothing posted")
        return 0
    try:
        url = notify.webhook_url(settings.notify)
        notify.post(url, notify.message(settings.pipeline_name, f"Kubeflow run {run_id}",
                                        outcome.words, outputs["html"], outcome.error,
                                        host="Kubeflow"), settings.notify.timeout_s)
    except notify.NotifyError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_status
    print(f"posted to the webhook: the night {outcome.words}")
    return 0


if __name__ == "__main__":
    from core import storage

    storage.exit_now(main())  # a step that opened s3:// must not run the interpreter's exit
