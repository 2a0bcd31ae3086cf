"""The AnomalyGate component: stops the run when ExampleValidator found anomalies (it only records
them, never fails). Declared here; run by executor.py (components/function_executor.py)."""

from tfx.dsl.component.experimental.annotations import InputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.anomaly_gate.executor import (  # noqa: F401  (where callers find them)
    ANOMALIES_FILE, AnomaliesFoundError, Executor, anomaly_gate, describe_anomalies,
    read_anomalies)


@component
def AnomalyGate(  # noqa: N802 (a TFX component is named like a class)
        anomalies: InputArtifact[
            standard_artifacts.ExampleAnomalies],
        schema_hint: Parameter[str],
        code_fingerprint: Parameter[str]) -> None:
    """Fails the run, listing each anomaly, unless every split matches the schema.
    code_fingerprint: this package's code, so that editing it re-runs the gate (cache key)."""
    anomaly_gate(anomalies, schema_hint, code_fingerprint)


AnomalyGate.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
