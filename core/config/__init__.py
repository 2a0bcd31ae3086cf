"""The typed pipeline config: YAML in configs/, validated on load, before any component starts.

One pydantic model per section, in the module of its kind: `data.py` (data, features, the
reader's settings), `training.py` (task, preprocessing, retrieval, training), `checks.py`
(evaluation, drift, skew), `serving.py` (serving, canary), `runs.py` (runner, notify),
`kubeflow.py`; `pipeline.py` joins them in PipelineConfig with the checks that cross sections;
`loader.py` reads a file into it. Code outside imports from `core.config`, not the modules.
"""
from core.config.base import ConfigError
from core.config.checks import (BASELINE, CANDIDATE, DriftConfig, EvaluationConfig, SkewConfig,
                                ThresholdConfig)
from core.config.data import (DataConfig, FeaturesConfig, IdConfig, ListConfig, ReaderSettings,
                              reader_features)
from core.config.kubeflow import (ConfigMapKeyConfig, KubeflowConfig, ObjectStoreConfig,
                                  RunLeaseConfig)
from core.config.loader import DEFAULT_CONFIG, load_config, read_mapping, with_changes
from core.config.pipeline import PipelineConfig
from core.config.runs import NotifyConfig, RunnerConfig, beam_flag
from core.config.serving import TF_SERVING_VERSIONS, CanaryConfig, ServingConfig
from core.config.training import (PRECISIONS, STRATEGIES, PreprocessingConfig, RetrievalConfig,
                                  TaskConfig, TrainingConfig, TrainingJobConfig)

__all__ = ["BASELINE", "CANDIDATE", "DEFAULT_CONFIG", "PRECISIONS", "STRATEGIES",
           "TF_SERVING_VERSIONS", "CanaryConfig", "ConfigError", "ConfigMapKeyConfig",
           "DataConfig", "DriftConfig", "EvaluationConfig", "FeaturesConfig", "IdConfig",
           "KubeflowConfig", "ListConfig", "NotifyConfig", "ObjectStoreConfig", "PipelineConfig",
           "PreprocessingConfig", "ReaderSettings", "RetrievalConfig", "RunLeaseConfig",
           "RunnerConfig", "ServingConfig", "SkewConfig", "TaskConfig", "ThresholdConfig",
           "TrainingConfig", "TrainingJobConfig", "beam_flag", "load_config", "read_mapping",
           "reader_features", "with_changes"]
