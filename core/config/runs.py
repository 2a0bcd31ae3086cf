"""How a run runs here and who hears of a failed one: the runner (Beam flags checked), notify."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, List, Optional

from pydantic import AfterValidator, Field

from core.config.base import Section, K8S_NAME, K8S_KEY


# Beam flags that carry a credential: refused in beam_args, which end up in the compiled spec
# and on every step's command line. Credentials come from the environment (core/storage.py).
_CREDENTIAL_FLAG = re.compile(r"^--?[^=]*(secret|token|password|passwd|access_key|credential)",
                              re.I)


def _no_credentials(args: List[str]) -> List[str]:
    for arg in args:
        if isinstance(arg, str) and _CREDENTIAL_FLAG.match(arg):
            flag = arg.split("=", 1)[0]
            raise ValueError(
                f"{flag} carries a credential, and beam_args end up in the compiled spec and on "
                "command lines: remove it; give S3 credentials through the environment "
                "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, on Kubeflow from the Secret of "
                "kubeflow.object_store: core/storage.py)")
    return args


def beam_flag(args: List[str], name: str) -> Optional[str]:
    """The value of Beam flag --name in args (`--name=value` or `--name value`), or None."""
    for index, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and index + 1 < len(args):
            return args[index + 1]
    return None


def _job_server_pinned(args: List[str]) -> List[str]:
    # Beam's Python FlinkRunner downloads its job server jar from Maven Central at run time
    # unless --flink_job_server_jar names one (apache_beam/runners/portability/flink_runner.py).
    if (beam_flag(args, "runner") or "").lower() in ("flinkrunner", "flink") \
            and not beam_flag(args, "flink_job_server_jar"):
        raise ValueError(
            "--runner=FlinkRunner without --flink_job_server_jar: Beam would download its Flink "
            "job server at run time; name a job server jar fetched once at set-up, or submit "
            "to a running job server (--runner=PortableRunner --job_endpoint=HOST:PORT, as "
            "`make flink-up` prints; README: Beam stages on Flink)")
    return args


BeamArgs = Annotated[List[str], AfterValidator(_no_credentials),
                     AfterValidator(_job_server_pinned)]


class RunnerConfig(Section):
    output_dir: Path
    enable_cache: bool = True
    beam_args: BeamArgs = []
    # The most seconds one step may run before the run stops with an error naming it (a Beam
    # stage whose workers never start waits forever: a worker pool whose Python lacks Beam).
    step_timeout_s: int = Field(1800, ge=10)
    # How long each endpoint runner.beam_args names (worker pool, Flink master, job service)
    # has to accept a connection before the run starts; none that answers: the run stops there.
    connect_timeout_s: float = Field(10.0, gt=0, le=300)


class NotifyConfig(Section):
    """Where `python -m pipeline.notify` posts a failed night (deploy/systemd/): a Slack-compatible
    incoming webhook. The URL is a secret, so the config names where to find it, never the URL:
    an environment variable (webhook_env), or a file of its own (webhook_file, relative to this
    config; it wins when set)."""
    webhook_env: str = Field("PIPELINE_WEBHOOK_URL", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    webhook_file: Optional[Path] = None
    timeout_s: float = Field(10.0, gt=0, le=120)
    # On Kubeflow: the Kubernetes Secret (and its key) holding the URL, which the compiled
    # PlatformSpec hands the exit step as the variable webhook_env
    # (pipeline/kubeflow/client/exit_handler.py); null: the exit step writes its report, posts
    # nothing.
    kubeflow_secret: Optional[str] = Field(None, pattern=K8S_NAME)
    kubeflow_secret_key: str = Field("url", pattern=K8S_KEY)
