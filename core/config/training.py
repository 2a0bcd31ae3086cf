"""What the model predicts and how it trains: task, preprocessing, retrieval, training (and the
training job on Kubeflow)."""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import Field, create_model, model_validator

from core import tasks
from core.config.base import renamed_key, Section


STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "parameter_server", "tpu")
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")


class _TaskSection(Section):
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


class PreprocessingConfig(Section):
    num_oov_buckets: int = Field(1, ge=1)


class TrainingJobConfig(Section):
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


class TrainingConfig(Section):
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
        return renamed_key(raw, "training", "tfjob", "job", "it configures the TrainJob too")

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


class RetrievalConfig(Section):
    """Top-k retrieval (a two-tower model: models/two_tower.py): the export's `retrieve`
    signature scores every item of the candidate id column's vocabulary against a query (the
    other model inputs) and answers the k best; the Trainer measures recall at k on the eval
    split."""
    candidate: str
    k: int = Field(10, ge=1)
