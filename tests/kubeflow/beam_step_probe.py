"""A fresh step process's view of pipeline/beam_step.py (run by test_beam_step.py, so
the patches never touch the test worker): argv[1] is an s3:// folder, the rest the Beam args a
step gets there. Prints one JSON line, for TFX and Beam as they are, then after prepare() for a
runner that installs staged packages, then after prepare() for the step's own args: the args the
Beam executor ended with, and how many boto3 sessions Beam's S3 calls opened."""
from __future__ import annotations

import json
import sys

import boto3.session
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from tfx.components.statistics_gen import executor as statistics_gen

from pipeline import beam_step


STAGED = ["--runner=PortableRunner", "--environment_type=PROCESS"]
folder, step_args = sys.argv[1], sys.argv[2:]
sessions = []
original = boto3.session.Session.__init__


def counted(self, *args, **kwargs):
    sessions.append(1)
    original(self, *args, **kwargs)


def phase(name: str, beam_args: list) -> dict:
    """A Beam executor made with beam_args, then the calls a data step makes on its artifacts
    through Beam's file systems, as its sinks do."""
    executor = statistics_gen.Executor(statistics_gen.Executor.Context(
        beam_pipeline_args=beam_args, unique_id="probe", tmp_dir="/tmp"))
    FileSystems.set_options(PipelineOptions(beam_args))
    before = len(sessions)
    path = f"{folder}/{name}/part-0.txt"
    for round_ in range(3):
        with FileSystems.create(path) as out:
            out.write(b"row %d\n" % round_)
        assert FileSystems.exists(path)
        with FileSystems.open(path) as opened:
            read = opened.read().decode()
        listed = [m.path for match in FileSystems.match([f"{folder}/{name}/*"])
                  for m in match.metadata_list]
    return {"packaged": any(a.startswith("--extra_package=") for a in executor._beam_pipeline_args),
            "sessions": len(sessions) - before, "read": read, "listed": listed}


boto3.session.Session.__init__ = counted
record = {"tfx": phase("tfx", list(step_args))}
record["staged"] = phase("staged", beam_step.prepare(step_args + STAGED))
record["step"] = phase("step", beam_step.prepare(list(step_args)))
print(json.dumps(record))
