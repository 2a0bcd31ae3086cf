"""What a Beam step is spared when it runs where the work is done anyway: in a Kubeflow step
(kubeflow/step/run_executor.py) and in a local run whose runner.beam_args name a cluster (run.py).

Two costs TFX 1.16 and Beam 2.59 add to every data step on a cluster, for nothing there:

- TFX builds an sdist of itself for Beam's workers whenever a step gets Beam args
  (tfx/dsl/components/base/base_beam_executor.py, `BaseBeamExecutor.__init__`, calling
  tfx/utils/dependency_utils.py `make_beam_dependency_flags`: a copy of the tfx package and a
  `setup.py sdist`, 1.5-2 s of each step on 2 cores). Our steps always have Beam args on s3://
  (the endpoint and region, core/storage.py `beam_s3_args`), yet the package is only installed
  by workers that install staged packages (Dataflow; Beam's PROCESS and DOCKER environments).
  The in-pod DirectRunner runs in the step's own interpreter, and an EXTERNAL worker pool
  (worker_pool_main, what our Flink TaskManagers run beside them: deploy/flink) or a LOOPBACK
  environment installs nothing staged (tfx#4948, tfx#3761): its Python must hold the project
  already, which the image's does.
- Beam's S3 file system opens a new boto3 session and client for every operation
  (apache_beam/io/aws/s3filesystem.py: `s3io.S3IO(options=...)` per call; clients/s3/
  boto3_client.py `Client.__init__`: `boto3.session.Session().client(...)`), 0.1-0.2 s of CPU
  each: 86 times in a cold night's steps, 33 in the Evaluator alone (measured in the s3://
  nights, tests/kubeflow/test_s3_night.py). One botocore client per set of arguments per
  process serves them all (botocore clients are thread-safe; sessions are not shared).

The local run on Flink (README: Beam stages on Flink) paid the first too, and left each step's
sdist in the machine's temporary folder (49 MB a step, 14 GB here after the suite's nights).

`prepare(beam_args)` applies both for the process (a step runs one executor, a local run each
step in turn) and returns the args unchanged: in a step only for Beam executors, in a local run
only with Beam args (without them TFX builds nothing). Both were read
against READ_AGAINST's TFX and Beam; with others the step logs it and pays both costs, as TFX
and Beam as they are would: the same outputs, slower.
"""
from __future__ import annotations

import functools
import logging
import threading
from typing import List, Optional

# The TFX and Beam versions whose dependency_utils.py and boto3_client.py were read for this.
READ_AGAINST = {"tfx": ("1.16.0",), "apache_beam": ("2.59.0",)}

# Runners that stage nothing: Beam's direct runners run in the submitting interpreter
# (apache_beam/runners/direct/direct_runner.py; multi_processing mode forks the same Python).
# Prism is left out: it runs its workers in the environment the options name, DOCKER among them.
IN_PROCESS_RUNNERS = {None, "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner"}
# Portable environments whose workers install no staged package
# (apache_beam/options/pipeline_options.py, PortableOptions.environment_type).
PREINSTALLED_ENVIRONMENTS = {"EXTERNAL", "LOOPBACK"}


def stages_packages(beam_args: List[str]) -> bool:
    """Whether the runner these args name installs staged packages on its workers."""
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(flags=beam_args).get_all_options(retain_unknown_options=True)
    runner = options.get("runner")
    if runner is not None:
        runner = runner.rsplit(".", 1)[-1]  # a full class path names the same runner
    if runner in IN_PROCESS_RUNNERS:
        return False
    environment = (options.get("environment_type") or "").upper()
    return environment not in PREINSTALLED_ENVIRONMENTS


def _keep_args(beam_pipeline_args: List[str]) -> List[str]:
    return beam_pipeline_args


def read_against() -> bool:
    """Whether this process's TFX and Beam are the versions this module was read against (a log
    line when not)."""
    import apache_beam
    import tfx

    found = {"tfx": tfx.__version__, "apache_beam": apache_beam.__version__}
    if all(found[name] in versions for name, versions in READ_AGAINST.items()):
        return True
    logging.warning("TFX %s and Beam %s: the step builds TFX's sdist and a boto3 client per S3 "
                    "call, slower, same outputs (pipeline/beam_step.py was read "
                    "against TFX %s and Beam %s)", found["tfx"], found["apache_beam"],
                    ", ".join(READ_AGAINST["tfx"]), ", ".join(READ_AGAINST["apache_beam"]))
    return False


def prepare(beam_args: List[str]) -> List[str]:
    """Spares this process TFX's unused sdist and Beam's client per S3 call (module docstring)."""
    if not read_against():
        return beam_args
    if not stages_packages(beam_args):
        from tfx.utils import dependency_utils

        dependency_utils.make_beam_dependency_flags = _keep_args
    share_s3_clients()
    return beam_args


class _SharedSession:
    """Stands in for `boto3.session.Session()` inside Beam's boto3_client: its clients are made
    once per set of arguments in this process."""

    _lock = threading.Lock()

    def client(self, **arguments):
        key = tuple(sorted(arguments.items()))
        with self._lock:
            return _client(key)


@functools.lru_cache(maxsize=None)
def _client(key: tuple):
    import boto3

    return boto3.session.Session().client(**dict(key))


class _Boto3:
    """The `boto3` name in Beam's boto3_client, whose `session.Session` is _SharedSession."""

    class session:  # noqa: N801  (boto3.session, as Beam spells it)
        Session = _SharedSession


def share_s3_clients() -> Optional[bool]:
    """Beam's S3 operations in this process share one botocore client per set of arguments.
    None when Beam's AWS client or boto3 is not installed (no s3:// for Beam then anyway)."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return None
    if boto3_client.boto3 is None:
        return None
    boto3_client.boto3 = _Boto3
    return True


__all__ = ["prepare", "stages_packages", "share_s3_clients", "read_against"]
