"""Drift between the newest span and the one before: TFDV's drift comparator, as a gate.

The two spans' statistics are computed here from their own files (read with the pipeline's CSV
reader), not looked up in ML Metadata: the previous span is in the input folder on every runner
and on a first run, whatever ran before. Jensen-Shannon divergence for numeric features,
L-infinity distance for categorical ones; each feature's threshold comes from the config.

The newest span is also measured against the rest of the training window (the older spans it is
trained with, `data.span_window`), for the report: a slow drift that no single night shows. Only
the comparison with the span before is a gate.

Two steps, like ExampleValidator and the anomaly gate: DriftCheck measures and publishes the result
(a failed step publishes nothing, and the report needs it most then); DriftGate stops the run on
drift (DriftError) or, with on_drift "warn", lets it go on, and the report shows it.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.drift_gate.executor import (  # noqa: F401  (where callers find them)
    JSD, L_INF, RESULT_FILE, CheckExecutor, DriftError, GateExecutor, compare_spans, drift_check,
    drift_gate, drift_message, enforce, measure, read_result, span_label, span_statistics)


@component
def DriftCheck(  # noqa: N802 (a TFX component is named like a class)
        examples: InputArtifact[standard_artifacts.Examples],
        schema: InputArtifact[standard_artifacts.Schema],
        drift: OutputArtifact[standard_artifacts.ExampleAnomalies],
        input_base: Parameter[str],
        settings: Parameter[str]) -> None:
    """Measures drift between ExampleGen's span and the span before; `settings` is JSON:
    features, null_markers, file_pattern, thresholds (per feature), code_fingerprint."""
    drift_check(examples, schema, drift, input_base, settings)


@component
def DriftGate(  # noqa: N802
        drift: InputArtifact[standard_artifacts.ExampleAnomalies],
        on_drift: Parameter[str]) -> None:
    """Fails the run, naming each drifted feature, when on_drift is "stop"."""
    drift_gate(drift, on_drift)


# The steps run these: the same calls without TFX's @component machinery (Beam).
DriftCheck.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(CheckExecutor)
DriftGate.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(GateExecutor)
