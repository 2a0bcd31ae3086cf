"""PipelineConfig: every section, and the checks that cross sections."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from pydantic import Field, ValidationInfo, field_validator, model_validator

from core import tasks
from core.config.base import Section
from core.config.data import DataConfig, FeaturesConfig, reader_features, ReaderSettings
from core.config.training import TaskConfig, PreprocessingConfig, TrainingConfig, RetrievalConfig
from core.config.checks import EvaluationConfig, DriftConfig, SkewConfig
from core.config.serving import ServingConfig
from core.config.runs import RunnerConfig, NotifyConfig
from core.config.kubeflow import KubeflowConfig


class PipelineConfig(Section):
    pipeline_name: str = Field(pattern=r"^[a-z0-9][a-z0-9-_]*$")
    data: DataConfig
    features: FeaturesConfig
    task: TaskConfig = TaskConfig()
    schema_file: Optional[Path] = None
    preprocessing: PreprocessingConfig = PreprocessingConfig()
    # The module of models/ whose build_model the Trainer calls: "model" (an MLP over every
    # feature kind) or "two_tower" (the recommender), or a user's own.
    model_module: str = Field("model", pattern=r"^[a-z_][a-z0-9_]*$")
    # build_model's hyper-parameters (models/<model_module>.py), as keyword arguments: its
    # keyword-only parameters say which there are and their types (core/hyperparameters.py).
    model: Dict[str, Any] = {}
    retrieval: Optional[RetrievalConfig] = None
    training: TrainingConfig = TrainingConfig()
    evaluation: EvaluationConfig
    drift: DriftConfig = DriftConfig()
    skew: SkewConfig = SkewConfig()
    serving: ServingConfig
    runner: RunnerConfig
    kubeflow: KubeflowConfig = KubeflowConfig()
    notify: NotifyConfig = NotifyConfig()

    @field_validator("model")
    @classmethod
    def _hyperparameters(cls, values: Dict[str, Any], info: ValidationInfo) -> Dict[str, Any]:
        from core import hyperparameters

        module = info.data.get("model_module")
        if module is None:  # reported on its own
            return values
        typed, problems = hyperparameters.check(values, hyperparameters.model_source(module))
        if problems:
            raise ValueError("; ".join(problems))
        return typed

    @field_validator("retrieval")
    @classmethod
    def _candidate_ids(cls, retrieval: Optional[RetrievalConfig], info: ValidationInfo
                       ) -> Optional[RetrievalConfig]:
        features, task = info.data.get("features"), info.data.get("task")
        if retrieval is None or features is None or task is None:
            return retrieval
        ids = features.ids.get(retrieval.candidate)
        if ids is None:
            raise ValueError(f"candidate '{retrieval.candidate}' is not an id column "
                             f"(features.ids: {sorted(features.ids)})")
        if ids.hash_buckets is not None:
            raise ValueError(f"candidate '{retrieval.candidate}' is hashed (hash_buckets): "
                             "retrieval answers ids from a vocabulary; give it top_k instead")
        if task.kind != "binary":
            raise ValueError(f"retrieval ranks items by a click probability: task.kind must be "
                             f"binary, not '{task.kind}'")
        return retrieval

    @field_validator("kubeflow")
    @classmethod
    def _lease_outlasts_training(cls, kubeflow: KubeflowConfig, info: ValidationInfo
                                 ) -> KubeflowConfig:
        training, lease = info.data.get("training"), kubeflow.run_lease
        if training is not None and lease.enabled and lease.expiry_s <= training.job.timeout_s:
            raise ValueError(f"run_lease.expiry_s {lease.expiry_s} is not longer than "
                             f"training.job.timeout_s {training.job.timeout_s}: a night "
                             "that trains that long would lose its lease and push nothing. "
                             "Raise expiry_s above the longest night")
        return kubeflow

    @field_validator("evaluation")
    @classmethod
    def _metrics_fit_the_task(cls, evaluation: EvaluationConfig, info: ValidationInfo
                              ) -> EvaluationConfig:
        task = info.data.get("task")
        # The task section is invalid (reported on its own), or a name is no metric at all
        # (reported by EvaluationConfig): nothing to say here.
        if task is None:
            return evaluation
        fitting = tasks.TASKS[task.kind].threshold_metrics
        misfits = [name for name in evaluation.thresholds if name not in fitting]
        if misfits:
            raise ValueError("; ".join(
                f"thresholds.{name} does not fit task.kind '{task.kind}'" for name in misfits)
                + f". The metrics that fit: {', '.join(fitting)}")
        return evaluation

    @property
    def reader_features(self) -> Dict[str, Any]:
        """The features as the CSV reader types them: every kind (empty ones too), the list
        separator, and the label's kind: a number in a regression, text otherwise (binary and
        multiclass labels are class names, "0" and "1" included)."""
        return reader_features(self.features, self.data.list_separator,
                               tasks.TASKS[self.task.kind].label)

    @property
    def reader_settings(self) -> ReaderSettings:
        return ReaderSettings(features=self.reader_features, null_markers=self.data.null_markers,
                              file_pattern=self.data.file_pattern,
                              span_window=self.data.span_window)

    @model_validator(mode="after")
    def _drift_features(self) -> "PipelineConfig":
        known = [self.features.label, *self.features.model_inputs]
        unknown = sorted(set(self.drift.thresholds) - set(known))
        if unknown:
            raise ValueError(f"drift.thresholds names {unknown}, which are not the label or a "
                             f"model input ({known})")
        return self

    @model_validator(mode="after")
    def _skew_features(self) -> "PipelineConfig":
        known = self.features.model_inputs
        unknown = sorted(set(self.skew.thresholds) - set(known))
        if unknown:
            raise ValueError(f"skew.thresholds names {unknown}, which are not model inputs "
                             f"({known}; the label is never served)")
        return self

    def _numeric_inputs(self) -> set:
        return set(self.features.numeric) | {
            name for name, column in self.features.lists.items() if column.element == "numeric"}

    def skew_thresholds(self) -> Dict[str, float]:
        """Every model input's skew threshold: its own, else its kind's default."""
        numeric = self._numeric_inputs()
        return {name: self.skew.thresholds.get(
            name, self.skew.numeric_threshold if name in numeric
            else self.skew.categorical_threshold) for name in self.features.model_inputs}

    @property
    def serving_base(self) -> str:
        """Where the serving spans are: skew.serving_base, else <runner.output_dir>/requests."""
        return self.skew.serving_base or str(self.runner.output_dir / "requests")

    def drift_thresholds(self) -> Dict[str, float]:
        """Every compared feature's threshold: its own, else its kind's default."""
        numeric = self._numeric_inputs()
        if tasks.TASKS[self.task.kind].label == "number":
            numeric.add(self.features.label)
        return {name: self.drift.thresholds.get(
            name, self.drift.numeric_threshold if name in numeric
            else self.drift.categorical_threshold)
            for name in [self.features.label, *self.features.model_inputs]}

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
