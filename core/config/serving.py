"""Where a pushed model goes and how it is released: the serving folder, TF Serving's version,
the canary's steps and analysis."""
from __future__ import annotations

from pathlib import Path
from typing import List, Literal

from pydantic import Field, field_validator

from core.config.base import Section


# The TF Serving releases the serving path is checked against (devtools/tf_serving/rest_stub.py
# follows each tag's source); the first is the default, the one the deploy has run on a cluster.
TF_SERVING_VERSIONS = ("2.16.1", "2.20.0")


class CanaryConfig(Section):
    """The canary release's steps and analysis (serving.release: canary), which `make
    deploy-names` writes into deploy/serving/k8s/rollout (the Rollout's steps, the
    AnalysisTemplate's arguments)."""
    # The share of traffic (percent) the canary takes in turn, each followed by an analysis;
    # after the last one it takes all of it and becomes the stable revision.
    weights: List[int] = Field([5, 25], min_length=1)
    # Each analysis looks at this much of the canary's and the stable revision's traffic.
    analysis_window: str = Field("5m", pattern=r"^[1-9][0-9]*[smh]$")
    # No verdict on fewer inference requests than this in the window (the rollout pauses).
    min_requests: int = Field(200, ge=1)
    # The canary fails on more errors than this share of its requests...
    max_error_ratio: float = Field(0.01, gt=0.0, lt=1.0)
    # ...or a P99 latency over the service objective, or over this many times the stable one's.
    p99_slo_ms: float = Field(100.0, gt=0.0)
    max_p99_ratio: float = Field(1.5, ge=1.0)

    @field_validator("weights")
    @classmethod
    def _rising_shares(cls, weights: List[int]) -> List[int]:
        if any(not 0 < w < 100 for w in weights) or weights != sorted(set(weights)):
            raise ValueError(f"{weights}: shares of traffic between 1 and 99, rising (the last "
                             "step, 100, follows them)")
        return weights


class ServingConfig(Section):
    # A folder under serving_dir and TF Serving's model name: starting with a letter or digit,
    # so never `.` or `..` (which pushed into serving_dir's parent) or a hidden folder.
    model_name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    serving_dir: Path
    # How a pushed version reaches the clients. direct: TF Serving loads the newest pushed
    # version by itself (deploy/serving/k8s/deployment.yaml). canary: `python -m pipeline.release`
    # makes it the canary of the Argo Rollout (deploy/serving/k8s/rollout), whose analysis
    # promotes it or takes it back.
    release: Literal["direct", "canary"] = "direct"
    # canary: the Rollout's namespace; its name is tf-serving-<model_name in DNS form>.
    namespace: str = Field("default", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    # The server image's tag, tensorflow/serving:<tf_serving_version>.
    tf_serving_version: Literal[TF_SERVING_VERSIONS] = "2.16.1"  # type: ignore[valid-type]
    canary: CanaryConfig = CanaryConfig()
