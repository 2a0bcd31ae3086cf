"""The typed pipeline config: YAML in configs/, validated on load, before any component starts."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "pipeline.yaml"


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Section):
    input_base: Path
    file_pattern: str = "*.csv"
    span_window: int = Field(1, ge=1)
    null_markers: List[str] = ["NA", ""]
    splits: Dict[str, int] = {"train": 3, "eval": 1}

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: Dict[str, int]) -> Dict[str, int]:
        if set(splits) != {"train", "eval"} or min(splits.values()) < 1:
            raise ValueError("needs exactly the splits 'train' and 'eval', each a positive ratio")
        return splits


class FeaturesConfig(_Section):
    label: str
    numeric: List[str] = []
    categorical: List[str] = []
    ignored: List[str] = []

    @model_validator(mode="after")
    def _disjoint(self) -> "FeaturesConfig":
        seen: Dict[str, str] = {}
        for kind in ("numeric", "categorical", "ignored"):
            for name in getattr(self, kind):
                if name == self.label:
                    raise ValueError(f"the label '{name}' is also listed under '{kind}'; "
                                     "a label cannot be a feature")
                if name in seen:
                    raise ValueError(f"'{name}' is listed under both '{seen[name]}' and '{kind}'")
                seen[name] = kind
        if not self.numeric and not self.categorical:
            raise ValueError("declare at least one numeric or categorical feature")
        return self

    @property
    def model_inputs(self) -> List[str]:
        return [*self.numeric, *self.categorical]

    @property
    def columns(self) -> List[str]:
        """Every column a data file must have."""
        return [self.label, *self.numeric, *self.categorical, *self.ignored]


class PreprocessingConfig(_Section):
    num_oov_buckets: int = Field(1, ge=1)


class ModelConfig(_Section):
    hidden_units: List[int] = [32, 16]
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    learning_rate: float = Field(0.01, gt=0.0)

    @field_validator("hidden_units")
    @classmethod
    def _positive(cls, units: List[int]) -> List[int]:
        if not units or min(units) < 1:
            raise ValueError("needs at least one layer, each with a positive number of units")
        return units


class TrainingConfig(_Section):
    train_steps: int = Field(400, ge=1)
    eval_steps: int = Field(20, ge=1)
    batch_size: int = Field(32, ge=1)
    distribution_strategy: Literal[STRATEGIES] = "one_device"  # type: ignore[valid-type]
    precision: Literal[PRECISIONS] = "float32"  # type: ignore[valid-type]
    seed: int = 7


class ThresholdConfig(_Section):
    lower_bound: Optional[float] = None
    upper_bound: Optional[float] = None
    max_decrease: Optional[float] = Field(None, ge=0.0)
    max_increase: Optional[float] = Field(None, ge=0.0)

    @model_validator(mode="after")
    def _one_direction(self) -> "ThresholdConfig":
        if self.max_decrease is not None and self.max_increase is not None:
            raise ValueError("set max_decrease (higher is better) or max_increase (lower is "
                             "better), not both")
        if all(v is None for v in (self.lower_bound, self.upper_bound, self.max_decrease,
                                   self.max_increase)):
            raise ValueError("a threshold needs at least one bound")
        return self


class EvaluationConfig(_Section):
    # Keyed by TFMA / Keras metric class name, e.g. SparseCategoricalAccuracy.
    thresholds: Dict[str, ThresholdConfig]

    @field_validator("thresholds")
    @classmethod
    def _not_empty(cls, thresholds: Dict[str, ThresholdConfig]) -> Dict[str, ThresholdConfig]:
        if not thresholds:
            # TFX's Evaluator blesses nothing without thresholds (tfx#5148): fail loudly instead.
            raise ValueError("declare at least one threshold, or no model will ever be blessed")
        return thresholds


class ServingConfig(_Section):
    model_name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    serving_dir: Path


class RunnerConfig(_Section):
    output_dir: Path
    enable_cache: bool = True
    beam_args: List[str] = []


class PipelineConfig(_Section):
    pipeline_name: str = Field(pattern=r"^[a-z0-9][a-z0-9-_]*$")
    data: DataConfig
    features: FeaturesConfig
    schema_file: Optional[Path] = None
    preprocessing: PreprocessingConfig = PreprocessingConfig()
    model: ModelConfig = ModelConfig()
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig
    serving: ServingConfig
    runner: RunnerConfig

    # Outputs that follow from runner.output_dir, so one folder holds a run's every output.
    @property
    def pipeline_root(self) -> Path:
        return self.runner.output_dir / "pipeline"

    @property
    def metadata_path(self) -> Path:
        return self.runner.output_dir / "metadata.sqlite"

    @property
    def log_dir(self) -> Path:
        return self.runner.output_dir / "logs"

    @property
    def model_base_path(self) -> Path:
        """TF Serving's --model_base_path: versions are its numbered subfolders."""
        return self.serving.serving_dir / self.serving.model_name


def _resolve_paths(raw: dict, base: Path) -> None:
    """Makes the config's relative paths relative to the config file, not the shell's cwd."""
    for section, key in (("data", "input_base"), ("serving", "serving_dir"),
                         ("runner", "output_dir"), (None, "schema_file")):
        holder = raw.get(section) if section else raw
        if isinstance(holder, dict) and isinstance(holder.get(key), str):
            holder[key] = str((base / holder[key]).resolve())


def _describe(error: ValidationError, path: Path) -> str:
    lines = [f"invalid config {path}:"]
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key (misspelt, or not supported here)"
        elif item["type"] == "missing":
            message = "required key is missing"
        lines.append(f"  {key}: {message}")
    return "\n".join(lines)


def load_config(path: Path | str = DEFAULT_CONFIG, overrides: Optional[dict] = None
                ) -> PipelineConfig:
    """Reads, validates and returns the config; raises ConfigError naming the file and key."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    _resolve_paths(raw, path.parent)
    try:
        config = PipelineConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_describe(e, path)) from None
    _check_files(config, path)
    return config


def _set_dotted(raw: dict, dotted: str, value) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        raw = raw.setdefault(key, {})
    raw[leaf] = value


def _check_files(config: PipelineConfig, path: Path) -> None:
    if not config.data.input_base.is_dir():
        raise ConfigError(f"invalid config {path}:\n  data.input_base: folder "
                          f"{config.data.input_base} does not exist")
    if config.schema_file is not None and not config.schema_file.is_file():
        raise ConfigError(f"invalid config {path}:\n  schema_file: {config.schema_file} does not "
                          "exist (remove the key to infer a schema)")


def with_changes(config: PipelineConfig, **sections) -> PipelineConfig:
    """A copy of config with whole sections or fields replaced, validated again."""
    data = config.model_dump()
    for dotted, value in sections.items():
        _set_dotted(data, dotted.replace("__", "."), value)
    return PipelineConfig.model_validate(data)


__all__ = ["ConfigError", "PipelineConfig", "load_config", "with_changes", "STRATEGIES",
           "PRECISIONS", "DEFAULT_CONFIG"]
