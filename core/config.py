"""The typed pipeline config: YAML in configs/, validated on load, before any component starts."""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Optional

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo,
                      create_model, field_validator, model_validator)

from core import kfp_backends, storage, tasks, yaml_text
from core.resources import ResourcesConfig

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "pipeline.yaml"


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


def _renamed_key(raw, section: str, old: str, new: str, why: str):
    """A key renamed to what it is today still loads for one release, with a FutureWarning naming
    the new one; both at once are refused."""
    if not isinstance(raw, dict) or old not in raw:
        return raw
    if new in raw:
        raise ValueError(f"set '{new}' only: '{old}' is its old name, and both are set")
    warnings.warn(f"{section}.{old} is renamed {section}.{new} ({why}); the old key is read "
                  "until the next release", FutureWarning, stacklevel=2)
    return {(new if key == old else key): value for key, value in raw.items()}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Section):
    input_base: Path
    file_pattern: str = "*.csv"
    span_window: int = Field(1, ge=1)
    null_markers: List[str] = ["NA", ""]
    # What separates the values of a list column's cell (features.lists): "a|b|c".
    list_separator: str = Field("|", min_length=1)
    splits: Dict[str, int] = {"train": 3, "eval": 1}

    @field_validator("list_separator")
    @classmethod
    def _not_csv_syntax(cls, separator: str) -> str:
        if separator in (",", '"', "\n", "\r"):
            raise ValueError(f"{separator!r} is CSV syntax; choose another separator, e.g. '|'")
        return separator

    @field_validator("splits")
    @classmethod
    def _train_and_eval(cls, splits: Dict[str, int]) -> Dict[str, int]:
        if set(splits) != {"train", "eval"} or min(splits.values()) < 1:
            raise ValueError("needs exactly the splits 'train' and 'eval', each a positive ratio")
        return splits


class IdConfig(_Section):
    """An id column (or a list's own ids): many values, each an embedding row. Either a vocabulary
    of the top_k most frequent training values plus oov_buckets for the rest (unseen ids hash into
    those), or hash_buckets alone (no vocabulary; collisions instead of OOV)."""
    top_k: Optional[int] = Field(None, ge=1)
    oov_buckets: int = Field(1, ge=1)
    hash_buckets: Optional[int] = Field(None, ge=2)

    @model_validator(mode="after")
    def _vocabulary_or_hashing(self) -> "IdConfig":
        # Compared with the defaults, not with the keys written: a dumped config validates again.
        if self.hash_buckets is not None and (self.top_k is not None or self.oov_buckets != 1):
            raise ValueError("hash_buckets replaces the vocabulary: set either hash_buckets, or "
                             "top_k and oov_buckets")
        return self


class ListConfig(_Section):
    """A column whose cell holds several values separated by data.list_separator; an empty cell is
    an empty list."""
    element: Literal["categorical", "numeric"]
    # Fixed: a list is truncated to (keeping its `keep` values) or padded to this many; null:
    # ragged (each list its own length).
    length: Optional[int] = Field(..., ge=1)
    keep: Literal["last", "first"] = "last"
    # numeric only: the transformed value of a padded position (values are z-scored: 0.0 is the
    # mean). A categorical list pads with the reserved id 0, which the model masks.
    padding: Optional[float] = None
    # categorical only: the id column (features.ids) whose vocabulary this list shares (a click
    # history of the items a candidate column holds); unset: its own, as `ids` sets it.
    vocabulary: Optional[str] = None
    ids: IdConfig = IdConfig()

    @model_validator(mode="after")
    def _fits_the_element(self) -> "ListConfig":
        # Compared with the defaults, not with the keys written: a dumped config validates again.
        own_ids = self.ids != IdConfig()
        if self.element == "numeric":
            for key, given in (("vocabulary", self.vocabulary is not None), ("ids", own_ids)):
                if given:
                    raise ValueError(f"{key} applies to categorical lists only")
        elif self.padding is not None:
            raise ValueError("padding applies to numeric lists only (a categorical list pads "
                             "with the reserved id 0)")
        if self.vocabulary is not None and own_ids:
            raise ValueError(f"a list sharing the vocabulary of '{self.vocabulary}' takes its "
                             "ids settings from there; remove `ids`")
        return self

    @property
    def padding_value(self) -> float:
        return 0.0 if self.padding is None else self.padding


class FeaturesConfig(_Section):
    label: str
    numeric: List[str] = []
    categorical: List[str] = []
    # Categorical columns with many values (item or user ids): embedded, not one-hot.
    ids: Dict[str, IdConfig] = {}
    lists: Dict[str, ListConfig] = {}
    ignored: List[str] = []

    @model_validator(mode="after")
    def _disjoint(self) -> "FeaturesConfig":
        seen: Dict[str, str] = {}
        for kind in ("numeric", "categorical", "ids", "lists", "ignored"):
            for name in getattr(self, kind):
                if name == self.label:
                    raise ValueError(f"the label '{name}' is also listed under '{kind}'; "
                                     "a label cannot be a feature")
                if name in seen:
                    raise ValueError(f"'{name}' is listed under both '{seen[name]}' and '{kind}'")
                seen[name] = kind
        if not self.model_inputs:
            raise ValueError("declare at least one numeric, categorical, id or list feature")
        for name, column in self.lists.items():
            if column.vocabulary is not None and column.vocabulary not in self.ids:
                raise ValueError(f"lists.{name}.vocabulary is '{column.vocabulary}', which is not "
                                 f"an id column (features.ids: {sorted(self.ids)})")
        return self

    @property
    def model_inputs(self) -> List[str]:
        return [*self.numeric, *self.categorical, *self.ids, *self.lists]

    @property
    def columns(self) -> List[str]:
        """Every column a data file must have."""
        return [self.label, *self.model_inputs, *self.ignored]


# The model names of the EvalConfig (components/evaluator/eval_config.py), under which TFMA writes
# each model's metrics: the run summary and the report read them back without loading TFMA.
CANDIDATE, BASELINE = "candidate", "baseline"


class _TaskSection(_Section):
    """TaskConfig's checks: a kind's required settings are set, no other kind's are."""

    @model_validator(mode="after")
    def _settings_of_the_kind(self) -> "_TaskSection":
        task = tasks.TASKS[self.kind]
        for key, what in task.required.items():
            if not getattr(self, key):
                raise ValueError(f"kind {self.kind} needs {key}: {what}")
        for key in tasks.SETTINGS:
            if key not in task.settings and getattr(self, key) is not None:
                takers = [t.kind for t in tasks.TASKS.values() if key in t.settings]
                raise ValueError(f"{key} applies to kind {' or '.join(takers)} only, not "
                                 f"'{self.kind}'; remove it")
        return self

    @property
    def settings(self) -> Dict[str, Any]:
        """The kind's settings, the defaults in force where unset."""
        return tasks.task_and_settings(self.model_dump())[1]


# `kind`, then every kind's settings as declared in core/tasks.py (each set only for the kinds
# that take it): a new kind's settings need no edit here.
TaskConfig = create_model(
    "TaskConfig", __base__=_TaskSection, __module__=__name__,
    __doc__='What the model predicts from the label (README "Tasks"; core/tasks.py has each kind).',
    kind=(Literal[tasks.KINDS], tasks.DEFAULT_KIND), **tasks.SETTINGS)


class PreprocessingConfig(_Section):
    num_oov_buckets: int = Field(1, ge=1)


class TrainingJobConfig(_Section):
    """`training.job`: the training job that runs a multi-worker Trainer on Kubeflow, a Trainer v2
    TrainJob or a Training Operator TFJob (`training.operator`; deploy/training/README.md); the
    image, namespace and service account are kubeflow's. `training.tfjob`, its old name, is read
    for one release, with a warning."""
    # Worker replicas (multi_worker_mirrored: worker 0 is the chief and writes the model).
    workers: int = Field(2, ge=1)
    # parameter_server only: PS replicas (a Chief replica coordinates, the Workers compute).
    parameter_servers: int = Field(1, ge=1)
    # Per replica: Kubernetes quantities, requested and limited alike.
    cpu: str = Field("4", pattern=r"^\d+(\.\d+)?m?$")
    memory: str = Field("8Gi", pattern=r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
    gpus_per_worker: int = Field(0, ge=0)
    # The Trainer step deletes the job and fails when it runs longer.
    timeout_s: int = Field(86400, ge=60)
    # TFJob: replica pods the Training Operator may replace after a retryable exit (128+, e.g.
    # 137), summed over all replicas (under restartPolicy ExitCode it ignores backoffLimit:
    # kubeflow/trainer#2045); TrainJob: JobSet restarts of the whole set. One more and the
    # Trainer step deletes the job and fails (deploy/training/README.md).
    max_restarts: int = Field(3, ge=0)
    # operator trainjob: the ClusterTrainingRuntime the TrainJob runs on
    # (deploy/training/clustertrainingruntime.yaml).
    runtime: str = Field("tfx-tensorflow", pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class TrainingConfig(_Section):
    """How the Trainer trains: steps, batch, distribution, precision, input pipeline."""
    train_steps: int = Field(400, ge=1)
    eval_steps: int = Field(20, ge=1)
    # Global batch size: each replica gets batch_size / replicas (must divide evenly).
    batch_size: int = Field(32, ge=1)
    # train_steps run as epochs of this many steps (validation and TensorBoard at each epoch's
    # end); None: one epoch of train_steps.
    steps_per_epoch: Optional[int] = Field(None, ge=1)
    # Training steps run inside one tf.function call; > 1 cuts per-step Python overhead.
    steps_per_execution: int = Field(1, ge=1)
    distribution_strategy: Literal[STRATEGIES] = "one_device"  # type: ignore[valid-type]
    # mirrored only: the local devices to use, e.g. ["/gpu:0", "/gpu:1"]; empty: all of them.
    devices: List[str] = []
    # multi_worker_mirrored / mirrored all-reduce: auto, ring (gRPC, CPU or GPU) or nccl (GPU).
    collective_implementation: Literal["auto", "ring", "nccl"] = "auto"
    # Multi-worker: a task that cannot reach the whole cluster within this many seconds is
    # ended with an error (exit 137) instead of waiting (TensorFlow's own wait is unbounded).
    startup_timeout_s: int = Field(300, ge=1)
    # Multi-worker: a collective that takes longer fails instead of hanging; 0 = no limit.
    collective_timeout_s: int = Field(0, ge=0)
    # tpu only: the TPU to use ("local" on a TPU VM, a TPU name, or grpc://host:8470).
    tpu: Optional[str] = None
    precision: Literal[PRECISIONS] = "float32"  # type: ignore[valid-type]
    # XLA-compile the train and eval steps.
    jit_compile: bool = False
    # Keep the transformed examples in memory after the first pass.
    cache_dataset: bool = True
    # Fixed element order in the input pipeline (reproducible); false lets tf.data reorder.
    deterministic: bool = True
    # Examples held by the shuffle buffer.
    shuffle_buffer: int = Field(1024, ge=1)
    seed: int = 7
    # Multi-worker strategies on Kubeflow: the job the Trainer step starts, a Kubeflow Trainer
    # v2 TrainJob (trainjob) or, the legacy path, a Training Operator v1 TFJob (tfjob).
    operator: Literal["trainjob", "tfjob"] = "trainjob"
    job: TrainingJobConfig = TrainingJobConfig()

    @model_validator(mode="before")
    @classmethod
    def _renamed_tfjob(cls, raw):
        return _renamed_key(raw, "training", "tfjob", "job", "it configures the TrainJob too")

    @model_validator(mode="after")
    def _consistent(self) -> "TrainingConfig":
        strategy = self.distribution_strategy
        if self.devices and strategy != "mirrored":
            raise ValueError(f"'devices' applies to the mirrored strategy only, not '{strategy}'")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"'devices' lists a device twice: {self.devices}")
        if self.collective_implementation != "auto" and strategy not in (
                "mirrored", "multi_worker_mirrored"):
            raise ValueError("'collective_implementation' applies to mirrored and "
                             f"multi_worker_mirrored only, not '{strategy}'")
        if self.collective_implementation == "ring" and strategy == "mirrored":
            raise ValueError("mirrored (one machine) all-reduces with NCCL or on the host: use "
                             "'auto' or 'nccl'; 'ring' is for multi_worker_mirrored")
        if strategy == "tpu" and not self.tpu:
            raise ValueError("distribution_strategy 'tpu' needs 'tpu': \"local\" on a TPU VM, "
                             "the TPU's name, or grpc://host:8470")
        if self.tpu and strategy != "tpu":
            raise ValueError(f"'tpu' applies to the tpu strategy only, not '{strategy}'")
        if strategy == "tpu" and self.precision == "mixed_float16":
            raise ValueError("TPUs compute in bfloat16: use precision 'mixed_bfloat16'")
        if strategy == "multi_worker_mirrored" and self.job.workers < 2:
            # The Training Operator sets no TF_CONFIG in a TFJob of one replica (isDistributed,
            # training-operator v1.8.1 pkg/controller.v1/tensorflow/util.go), so the only
            # worker would fail for want of a cluster.
            raise ValueError("multi_worker_mirrored needs job.workers >= 2: the Training "
                             "Operator gives a one-replica TFJob no TF_CONFIG. For one machine "
                             "use 'one_device' or 'mirrored'")
        if strategy == "parameter_server" and self.operator == "trainjob":
            # Trainer v2's TrainJob sets image, command and node count for one replicated job
            # only (pkg/runtime/framework/plugins/jobset/builder.go Trainer); a chief, workers
            # and ps tasks need the TFJob's replica types.
            raise ValueError("parameter_server runs as a TFJob (chief, workers, ps): set "
                             "training.operator: tfjob, or use multi_worker_mirrored")
        if self.steps_per_epoch and self.steps_per_epoch > self.train_steps:
            raise ValueError(f"steps_per_epoch ({self.steps_per_epoch}) is more than "
                             f"train_steps ({self.train_steps})")
        return self


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
    # overall: the thresholds judge the whole eval split; every_slice: also each feature slice
    # (island=Biscoe, sex=female, ...), however few examples it holds.
    threshold_slices: Literal["overall", "every_slice"] = "overall"

    @field_validator("thresholds")
    @classmethod
    def _known_metrics(cls, thresholds: Dict[str, ThresholdConfig], info: ValidationInfo
                       ) -> Dict[str, ThresholdConfig]:
        if not thresholds:
            # TFX's Evaluator blesses nothing without thresholds (tfx#5148): fail loudly instead.
            raise ValueError("declare at least one threshold, or no model will ever be blessed")
        # Checked here, on load, so both runners refuse it before anything is built; from the
        # table of the names each task evaluates (core/tasks.py), which a test keeps equal to
        # what TFMA instantiates (tests/components/test_eval_config.py), so loading a config
        # never imports TFMA or TensorFlow.
        known = {name for task in tasks.TASKS.values() for name in task.threshold_metrics}
        problems = [f"'{name}' is not a TFMA or Keras metric class name this template evaluates "
                    f"(known: {', '.join(sorted(known))})" for name in thresholds
                    if name not in known]
        if problems:
            raise ValueError("; ".join(problems))
        return thresholds


def _unit_thresholds(thresholds: Dict[str, float]) -> Dict[str, float]:
    """Drift's and skew's per-feature thresholds: a divergence or distance, in (0, 1]."""
    bad = {k: v for k, v in thresholds.items() if not 0.0 < v <= 1.0}
    if bad:
        raise ValueError(f"thresholds must be in (0, 1]: {bad}")
    return thresholds


class DriftConfig(_Section):
    """Drift between the newest span and the one before (components/drift_gate/component.py)."""
    # stop: the run fails and nothing is pushed; warn: the run goes on, the report shows it.
    on_drift: Literal["stop", "warn"] = "stop"
    # Defaults: Jensen-Shannon divergence for numeric features, L-infinity distance (the largest
    # change of one value's share) for categorical ones and the label; both between 0 and 1.
    numeric_threshold: float = Field(0.25, gt=0.0, le=1.0)
    categorical_threshold: float = Field(0.25, gt=0.0, le=1.0)
    # Per feature, overriding the default of its kind.
    thresholds: Dict[str, float] = {}

    _in_range = field_validator("thresholds")(classmethod(
        lambda cls, thresholds: _unit_thresholds(thresholds)))


class SkewConfig(_Section):
    """Training/serving skew: the newest serving span (the logged requests, core/serving_log.py)
    against the training window (components/skew_gate/component.py)."""
    # warn: the run goes on and the report shows the skew; stop: the run fails, nothing is pushed.
    on_skew: Literal["stop", "warn"] = "warn"
    # TFDV's skew comparator: Jensen-Shannon divergence for numeric features (and numeric
    # lists), L-infinity distance for categorical ones, ids and categorical lists; in (0, 1].
    numeric_threshold: float = Field(0.25, gt=0.0, le=1.0)
    categorical_threshold: float = Field(0.25, gt=0.0, le=1.0)
    # Per model input, overriding the default of its kind.
    thresholds: Dict[str, float] = {}
    # Where the request sink writes the serving spans (span-YYYYMMDD/ folders, the data's
    # file_pattern); unset: <runner.output_dir>/requests.
    serving_base: Optional[str] = None
    # A serving span with fewer rows (a day just begun) is skipped for the one before.
    min_rows: int = Field(100, ge=1)
    # A list whose mean length at serving is below this share of training's is skewed (histories
    # cut to one item).
    list_length_ratio: float = Field(0.5, gt=0.0, lt=1.0)
    # A feature present in fewer rows at serving than this share of training's presence is
    # missing (a list counts as present when it holds a value).
    presence_ratio: float = Field(0.5, gt=0.0, le=1.0)
    # A folder node_exporter's textfile collector reads: the run report also writes the skew
    # figures there (components/run_report/skew_textfile.py) for the ServingSkewHigh alert.
    prometheus_textfile_dir: Optional[str] = None

    _in_range = field_validator("thresholds")(classmethod(
        lambda cls, thresholds: _unit_thresholds(thresholds)))


# The TF Serving releases the serving path is checked against (devtools/tf_serving/rest_stub.py
# follows each tag's source); the first is the default, the one the deploy has run on a cluster.
TF_SERVING_VERSIONS = ("2.16.1", "2.20.0")


class CanaryConfig(_Section):
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


class ServingConfig(_Section):
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


class RunnerConfig(_Section):
    output_dir: Path
    enable_cache: bool = True
    beam_args: BeamArgs = []
    # The most seconds one step may run before the run stops with an error naming it (a Beam
    # stage whose workers never start waits forever: a worker pool whose Python lacks Beam).
    step_timeout_s: int = Field(1800, ge=10)
    # How long each endpoint runner.beam_args names (worker pool, Flink master, job service)
    # has to accept a connection before the run starts; none that answers: the run stops there.
    connect_timeout_s: float = Field(10.0, gt=0, le=300)


# Kubernetes object names (DNS-1123 subdomain) and Secret / ConfigMap keys.
_K8S_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
_K8S_KEY = r"^[-._a-zA-Z0-9]{1,253}$"


class ConfigMapKeyConfig(_Section):
    name: str = Field(pattern=_K8S_NAME)
    key: str = Field(pattern=_K8S_KEY)


class ObjectStoreConfig(_Section):
    """What the steps' pods get when a kubeflow path is s3:// (SeaweedFS, MinIO or any S3 API).

    The credentials come from a Kubernetes Secret in the run's namespace and the compiled
    spec names only the Secret and its keys (pipeline/kubeflow/client/kubernetes_platform.py);
    core/storage.py lists the variables the steps read.
    """
    # The Secret and its keys: by default the one KFP's manifests give the object store
    # (core/kfp_backends.py); on multi-user KFP the profile controller writes it per namespace.
    secret: str = Field(kfp_backends.SECRET, pattern=_K8S_NAME)
    access_key_key: str = Field(kfp_backends.ACCESS_KEY_KEY, pattern=_K8S_KEY)
    secret_key_key: str = Field(kfp_backends.SECRET_KEY_KEY, pattern=_K8S_KEY)
    # The S3 API as the pods reach it (S3_ENDPOINT); null for AWS S3. Unset: the store of
    # kubeflow.backend_version's manifests (KubeflowConfig fills it in; this default is that of
    # the default backend).
    endpoint: Optional[str] = kfp_backends.backend(kfp_backends.DEFAULT_VERSION).endpoint
    # Or a ConfigMap key that holds it (needs KFP >= 2.3.0's driver), so that one spec serves
    # several clusters; then `endpoint` must be null.
    endpoint_config_map: Optional[ConfigMapKeyConfig] = None
    region: str = Field("us-east-1", pattern=r"^[a-z0-9-]+$")

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, endpoint: Optional[str]) -> Optional[str]:
        if endpoint is not None and not re.fullmatch(r"https?://[^/\s:]+(:\d+)?/?", endpoint):
            raise ValueError(f"'{endpoint}' is not an S3 endpoint URL: http(s)://host[:port], "
                             "e.g. http://seaweedfs.kubeflow:9000")
        return endpoint.rstrip("/") if endpoint else endpoint

    @model_validator(mode="before")
    @classmethod
    def _one_endpoint(cls, raw):
        if isinstance(raw, dict) and raw.get("endpoint_config_map"):
            if raw.get("endpoint"):
                raise ValueError("set 'endpoint' or 'endpoint_config_map', not both")
            raw = {**raw, "endpoint": None}  # the ConfigMap replaces the default endpoint
        return raw


class RunLeaseConfig(_Section):
    """One Kubeflow run of the pipeline at a time may push (core/run_lease.py): a run's first
    step takes a lease object beside the runs (<pipeline_root>/<pipeline>/.night-lease.json), a
    second run started meanwhile stops there, the Pusher pushes only for the holder, and the last
    step (or a failing one) releases it."""
    enabled: bool = True
    # How long a run holds the lease at most: a run killed before it could release it blocks the
    # next ones until then. Longer than the longest night (training.timeout_s bounds the TFJob
    # alone); a run still going at the expiry pushes nothing. 26 h by default: a nightly run
    # after a killed one is refused once, with the holder named, rather than risking two pushes.
    expiry_s: int = Field(26 * 3600, ge=600)


class KubeflowConfig(_Section):
    """Kubeflow Pipelines (open-source KFP v2): the image, where steps read and write, the schedule.

    Paths here are as the cluster's pods see them (gs:// or s3:// URIs); unset ones fall back to
    the local paths above, which only a local run of the compiled spec
    (devtools.kfp_backend) can use.
    """
    image: str = "tfx-pipeline-template:0.1.0"
    output_dir: Optional[Path] = None
    pipeline_root: Optional[str] = None
    input_base: Optional[str] = None
    serving_dir: Optional[str] = None
    schema_file: Optional[str] = None
    endpoint: Optional[str] = None
    # The KFP backend release the cluster runs (the ml-pipeline deployment's image tag, which
    # `python -m pipeline.doctor --runner kubeflow` reads): the object store's defaults follow it.
    backend_version: str = kfp_backends.DEFAULT_VERSION
    # Full Kubeflow (the profile controller owns each namespace's kfp-launcher and, from KFP
    # 2.15.0, gives it a key that may use only a few prefixes of the bucket): needs `namespace`.
    multi_user: bool = False
    namespace: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    service_account: Optional[str] = None
    experiment: str = Field("nightly", min_length=1)
    schedule: str = "0 2 * * *"
    beam_args: BeamArgs = []
    # For s3:// paths: the Secret with the credentials, the endpoint and region.
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    # KFP's max_concurrency holds within one recurring run only: the lease keeps a manual or
    # second run from pushing against the same baseline.
    run_lease: RunLeaseConfig = RunLeaseConfig()
    # CPU and memory of each step's pod (Kubernetes quantities; core/resources.py).
    resources: ResourcesConfig = ResourcesConfig()

    @model_validator(mode="before")
    @classmethod
    def _renamed_night_lease(cls, raw):
        return _renamed_key(raw, "kubeflow", "night_lease", "run_lease",
                            "it guards any run, manual ones too")

    @model_validator(mode="before")
    @classmethod
    def _store_of_the_backend(cls, raw):
        """An object_store.endpoint left unset is the store kubeflow.backend_version installs
        (SeaweedFS's service from 2.16.0, MinIO's before: core/kfp_backends.py)."""
        if not isinstance(raw, dict):
            return raw
        try:
            backend = kfp_backends.backend(raw.get("backend_version",
                                                   kfp_backends.DEFAULT_VERSION))
        except ValueError:
            return raw  # reported by _supported_backend
        store = raw.get("object_store") or {}
        if isinstance(store, dict) and "endpoint" not in store and not store.get(
                "endpoint_config_map"):
            raw = {**raw, "object_store": {**store, "endpoint": backend.endpoint}}
        return raw

    @field_validator("backend_version", mode="before")
    @classmethod
    def _supported_backend(cls, version) -> str:
        if not isinstance(version, str):  # YAML reads 2.17 unquoted as a number
            raise ValueError(f"{version!r} is not text: quote the release, e.g. "
                             "backend_version: \"2.17.0\"")
        kfp_backends.parse(version)
        return version

    @property
    def backend(self) -> kfp_backends.Backend:
        return kfp_backends.backend(self.backend_version)

    @model_validator(mode="after")
    def _multi_user_paths(self) -> "KubeflowConfig":
        """On multi-user KFP 2.15+ the namespace's own key (the profile controller's Secret) may
        use only a few prefixes of the bucket: a path outside them fails in a pod with Access
        Denied, after the upload, so it is refused here, where the config says so."""
        if not self.multi_user:
            return self
        if not self.namespace:
            raise ValueError("multi_user needs namespace: your profile's namespace, where the "
                             "runs, their kfp-launcher ConfigMap and their object-store key are")
        if not self.backend.scoped_keys or self.object_store.secret != kfp_backends.SECRET:
            return self
        ns = self.namespace
        outside = [f"{key} {uri} ({why})" for key, uri in self.s3_paths().items()
                   if (why := kfp_backends.outside_key_prefixes(uri, ns))]
        if outside:
            raise ValueError(
                f"on multi-user KFP {self.backend_version} the namespace's key (Secret "
                f"{kfp_backends.SECRET} in {ns}, written by the profile controller) may use only "
                f"{kfp_backends.allowed_uris(ns)}: {'; '.join(outside)} would be refused. Put "
                f"them there (e.g. pipeline_root s3://{kfp_backends.BUCKET}/private-artifacts/"
                f"{ns}/tfx/..., data and serving under s3://{kfp_backends.BUCKET}/private/{ns}/), "
                "or name a Secret of your own in object_store.secret")
        return self

    def s3_paths(self) -> Dict[str, str]:
        """The kubeflow paths on s3://, by key."""
        return {key: getattr(self, key) for key in ("pipeline_root", "input_base", "serving_dir",
                                                    "schema_file")
                if (getattr(self, key) or "").startswith("s3://")}

    @field_validator("pipeline_root", "input_base", "serving_dir", "schema_file")
    @classmethod
    def _openable(cls, uri: Optional[str]) -> Optional[str]:
        # A URI the steps' TensorFlow cannot open (minio://, ...) fails here, not in a pod.
        problem = storage.problem(uri) if uri and "://" in uri else None
        if problem:
            raise ValueError(problem)
        return uri

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, image: str) -> str:
        # A run must use the code its spec was compiled from: an explicit tag or digest.
        name, _, digest = image.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        if not re.fullmatch(r"[a-z0-9][a-z0-9._/:-]*", name) or not (
                re.fullmatch(r"sha256:[0-9a-f]{64}", digest) if digest
                else re.fullmatch(r"[\w][\w.-]{0,127}", tag) and tag != "latest"):
            raise ValueError(f"'{image}' is not name:tag (or name@sha256:...) with a pinned tag; "
                             "':latest' or no tag would let a run use other code than it was "
                             "compiled from")
        return image

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, endpoint: Optional[str]) -> Optional[str]:
        if endpoint is not None and not re.fullmatch(r"https?://[^/\s]+(/\S*)?", endpoint):
            raise ValueError(f"'{endpoint}' is not an http(s) URL of the KFP API")
        return endpoint

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str) -> str:
        if len(schedule.split()) not in (5, 6):
            raise ValueError(f"'{schedule}' is not a cron expression: 5 fields (minute hour "
                             "day month weekday) or 6 with seconds first")
        return schedule

    @property
    def kfp_cron(self) -> str:
        """KFP's scheduler takes 6 fields, seconds first."""
        fields = self.schedule.split()
        return " ".join(["0", *fields] if len(fields) == 5 else fields)


class NotifyConfig(_Section):
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
    kubeflow_secret: Optional[str] = Field(None, pattern=_K8S_NAME)
    kubeflow_secret_key: str = Field("url", pattern=_K8S_KEY)


class RetrievalConfig(_Section):
    """Top-k retrieval (a two-tower model: models/two_tower.py): the export's `retrieve`
    signature scores every item of the candidate id column's vocabulary against a query (the
    other model inputs) and answers the k best; the Trainer measures recall at k on the eval
    split."""
    candidate: str
    k: int = Field(10, ge=1)


def reader_features(features: FeaturesConfig, list_separator: str, label_kind: str
                    ) -> Dict[str, Any]:
    """The features as the CSV reader reads them: every kind (empty ones too), the list
    separator, the label's kind ("number" or "text")."""
    return {**features.model_dump(mode="json"), "list_separator": list_separator,
            "label_kind": label_kind}


class ReaderSettings(_Section):
    """What the CSV reader reads, in the one shape ExampleGen's, DriftCheck's and SkewCheck's
    executors get it (SkewCheck reads a serving span with a copy whose features have no label:
    components/skew_gate/executor.py serving_reader): this model's JSON, rebuilt there with
    model_validate_json (PipelineConfig.reader_settings fills every field: no default here, none
    in the executors)."""
    features: Dict[str, Any]  # PipelineConfig.reader_features
    null_markers: List[str]
    file_pattern: str
    span_window: int = Field(ge=1)


class PipelineConfig(_Section):
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


def _resolve_paths(raw: dict, base: Path) -> None:
    """Makes the config's relative paths relative to the config file, not the shell's cwd."""
    for section, key in (("data", "input_base"), ("serving", "serving_dir"),
                         ("runner", "output_dir"), (None, "schema_file"),
                         ("kubeflow", "output_dir"), ("kubeflow", "pipeline_root"),
                         ("kubeflow", "input_base"), ("kubeflow", "serving_dir"),
                         ("kubeflow", "schema_file"), ("notify", "webhook_file"),
                         ("skew", "serving_base"), ("skew", "prometheus_textfile_dir")):
        holder = raw.get(section) if section else raw
        # URIs (gs://...) are the cluster's, not relative paths.
        if isinstance(holder, dict) and isinstance(holder.get(key), str) and (
                "://" not in holder[key]):
            holder[key] = str((base / holder[key]).resolve())


def _refuse_uris_for_local_runs(raw: dict, path: Path) -> None:
    """Local runs use this machine's paths (ML Metadata is a SQLite file beside the outputs, and
    TFX's local cache reuses an output only if its folder exists, which an empty one on s3://
    never does); buckets go under kubeflow.*."""
    for section, key, where in (("data", "input_base", "kubeflow.input_base"),
                                ("serving", "serving_dir", "kubeflow.serving_dir"),
                                ("runner", "output_dir", "kubeflow.pipeline_root")):
        value = (raw.get(section) or {}).get(key) if isinstance(raw.get(section), dict) else None
        if isinstance(value, str) and "://" in value:
            raise ConfigError(f"invalid config {path}:\n  {section}.{key}: {value} is a URI; "
                              "local runs read and write local paths. Put the bucket in "
                              f"{where} and run the compiled spec (Kubeflow, or "
                              "python -m devtools.kfp_backend)")


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


def read_mapping(path: Path, what: str = "config file") -> dict:
    """A YAML file of sections, as a dict; raises ConfigError naming the file."""
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    try:
        raw = yaml_text.load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {path} is not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{what} {path} must hold a mapping of sections")
    return raw


def load_config(path: Path | str = DEFAULT_CONFIG, overrides: Optional[dict] = None
                ) -> PipelineConfig:
    """Reads, validates and returns the config; raises ConfigError naming the file and key.
    Imports no TensorFlow: the predict client and the CLI's first check load it too."""
    path = Path(path).resolve()
    raw = read_mapping(path)
    for dotted, value in (overrides or {}).items():
        _set_dotted(raw, dotted, value)
    _refuse_uris_for_local_runs(raw, path)
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
    jar = beam_flag(config.runner.beam_args, "flink_job_server_jar")
    if jar is not None and "://" not in jar and not (path.parent / jar).is_file():
        raise ConfigError(f"invalid config {path}:\n  runner.beam_args: "
                          f"--flink_job_server_jar={jar}: no such file (fetch the job server "
                          "jar at set-up: README, Flink)")
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


__all__ = ["ConfigError", "PipelineConfig", "TaskConfig", "load_config", "with_changes",
           "STRATEGIES", "PRECISIONS", "DEFAULT_CONFIG"]
