"""Training/serving skew: the newest serving span (the requests the served model was asked,
logged by core/serving_log.py's writers and written as span-YYYYMMDD/ CSV folders by the request
sink) against the training window ending at ExampleGen's span (what that model was trained on).

Measured with TFDV, worst first: its skew comparator per feature (Jensen-Shannon divergence for
numeric features, L-infinity distance for categorical ones, ids and lists; each threshold from the
config), the mean length of lists (a history cut to one item), features present in training and
missing at serving (a list that is always empty counts as missing), and values of categorical
features training never had (TFDV's SERVING environment against a schema inferred from the
training statistics). The serving span has no label: the pipeline's reader reads it without one.

Two steps, like DriftCheck and DriftGate: SkewCheck measures and publishes `skew.json` (a gate
that fails still leaves it for the report); SkewGate stops the run on skew (SkewError) or, with
on_skew "warn" (the default), lets it go on.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from components.skew_gate.executor import (  # noqa: F401  (where callers find them)
    RESULT_FILE, CheckExecutor, GateExecutor, SkewError, compare, enforce, read_result,
    serving_reader, serving_span, skew_check, skew_gate, skew_message, skew_settings,
    spans_fingerprint)


@component
def SkewCheck(  # noqa: N802 (a TFX component is named like a class)
        examples: InputArtifact[standard_artifacts.Examples],
        schema: InputArtifact[standard_artifacts.Schema],
        skew: OutputArtifact[standard_artifacts.ExampleAnomalies],
        input_base: Parameter[str],
        serving_base: Parameter[str],
        settings: Parameter[str]) -> None:
    """Measures skew between the newest serving span under serving_base and the training window
    ending at ExampleGen's span; `settings` is JSON: reader, thresholds (per model input),
    min_rows, list_length_ratio, presence_ratio, not_served, code_fingerprint."""
    skew_check(examples, schema, skew, input_base, serving_base, settings)


@component
def SkewGate(  # noqa: N802
        skew: InputArtifact[standard_artifacts.ExampleAnomalies],
        on_skew: Parameter[str]) -> None:
    """Fails the run, naming each skewed feature, when on_skew is "stop"."""
    skew_gate(skew, on_skew)


# The steps run these: the same calls without TFX's @component machinery (Beam).
SkewCheck.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(CheckExecutor)
SkewGate.EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(GateExecutor)
