"""The fit loop and its input pipeline: one code path for the Trainer and for every worker.

`train_and_export(fn_args, tf_config)` is what `run_fn` (the TFX Trainer) and
`python -m pipeline.kubeflow.training_job.worker` (a TrainJob or TFJob replica, the tests) both
call. It validates
every setting before training, builds the strategy first (multi-worker collectives must be set up
before other TensorFlow work), trains, and has the chief alone keep the exported model.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx_bsl.public import tfxio

from components import heads
from core.config import TrainingConfig
from components.trainer import distribution, export, retrieval_quality
from models.features import FeatureSpec, as_model_inputs, transformed_name

# Written in the Trainer's model_run: loss and metrics per epoch (pipeline/report reads it).
HISTORY_FILE = "history.json"
# Training examples a head that needs the labels (a regression's: their mean and std) reads.
LABEL_SAMPLE = 8192


@dataclasses.dataclass
class TrainingResult:
    """What one task did; tests and the benchmark read it, the Trainer ignores it."""
    task: str
    is_chief: bool
    strategy: str
    replicas: int
    precision: str
    global_batch: int
    steps: int
    examples_per_second: float
    loss: List[float]
    val_loss: List[float]
    first_loss: Optional[float]
    weights_sha256: str
    exported_to: Optional[str]
    model: Optional[keras.Model] = dataclasses.field(default=None, repr=False)

    def summary(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "model"}


def _files(patterns: List[str]) -> List[str]:
    return sorted(f for pattern in patterns for f in tf.io.gfile.glob(pattern))


def _has_records(path: str) -> bool:
    compression = "GZIP" if path.endswith(".gz") else ""
    return any(True for _ in tf.data.TFRecordDataset(path, compression).take(1))


def make_dataset(file_patterns: List[str], data_accessor,
                 tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec,
                 training: TrainingConfig, global_batch: int, train: bool, endless: bool = True,
                 input_pipelines: int = 1
                 ) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """A dataset function for `distribute_datasets_from_function`: raw examples -> Transform's
    graph -> (features, label) batches of the per-replica size, endless (or one pass).

    Parallel reads and parsing (TFXIO), a parallel map of the transform graph, optional cache of
    the transformed examples, a seeded shuffle, prefetch (AUTOTUNE). Each input pipeline (one per
    worker) takes its own files when there are at least as many files as pipelines, else every
    N-th example of an identically ordered stream: never a shard without data, which would leave
    its worker out of the others' collectives (a hang). `input_pipelines`: how many there will be
    (the workers), to drop empty files up front.
    """
    deterministic, seed = training.deterministic, training.seed
    files = _files(file_patterns)
    if not files:
        raise distribution.TrainingSetupError(f"no files match {file_patterns}")
    if 1 < input_pipelines <= len(files):
        # Sharded by file, an empty file could leave a worker without data.
        files = [f for f in files if _has_records(f)] or files
    schema = tf_transform_output.raw_metadata.schema

    def dataset_fn(context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
        context = context or tf.distribute.InputContext()
        per_replica = context.get_per_replica_batch_size(global_batch)
        pipelines, index = context.num_input_pipelines, context.input_pipeline_id
        by_file = pipelines > 1 and len(files) >= pipelines
        by_example = pipelines > 1 and not by_file
        # Sharding by example needs the same order in every pipeline up to the shard.
        ordered = deterministic or by_example
        raw = data_accessor.tf_dataset_factory(
            files[index::pipelines] if by_file else files,
            tfxio.TensorFlowDatasetOptions(batch_size=per_replica, num_epochs=1, shuffle=False,
                                           sloppy_ordering=not ordered),
            schema)
        transform = tf_transform_output.transform_features_layer()

        wanted = [*(transformed_name(f) for f in spec.inputs), spec.label_xf]

        def transformed(raw_batch):
            outputs = transform(raw_batch)
            return {name: outputs[name] for name in wanted}

        def to_model(batch):
            return as_model_inputs(batch, spec), batch[spec.label_xf]

        # Unbatched and batched again as transformed (a ragged list's SparseTensor batches with
        # the batch's longest), made the network's inputs a batch at a time.
        dataset = raw.map(transformed, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=ordered).unbatch()
        if by_example:
            dataset = dataset.shard(pipelines, index)
        if training.cache_dataset:
            dataset = dataset.cache()
        if train:
            dataset = dataset.shuffle(training.shuffle_buffer,
                                      seed=seed + index, reshuffle_each_iteration=True)
        if endless:
            dataset = dataset.repeat()
        dataset = dataset.batch(per_replica, drop_remainder=train).map(
            to_model, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)
        options = tf.data.Options()
        options.deterministic = deterministic
        # Sharding is done above; tf.distribute must not shard again.
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.OFF)
        return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)

    return dataset_fn


# The input pipeline of a single ordered pass (the label sample, the benchmark's floor).
ONE_PASS = TrainingConfig(seed=0, cache_dataset=False, deterministic=True)


def transformed_arrays(file_patterns: List[str], data_accessor,
                       tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec
                       ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
    """Every transformed example of the files, in memory (the benchmark's floor, the tests)."""
    dataset = make_dataset(file_patterns, data_accessor, tf_transform_output, spec, ONE_PASS,
                           global_batch=256, train=False, endless=False)()
    features, labels = {}, []
    for x, y in dataset:
        for k, v in x.items():
            features.setdefault(k, []).append(v.numpy())
        labels.append(y.numpy())
    return {k: np.concatenate(v) for k, v in features.items()}, np.concatenate(labels)


def label_sample(file_patterns: List[str], data_accessor,
                 tf_transform_output: tft.TFTransformOutput, spec: FeatureSpec,
                 sample: int = LABEL_SAMPLE) -> np.ndarray:
    """The transformed labels of the first `sample` training examples, in file order: every
    worker of a cluster reads the same ones and builds the same output layer."""
    batch = 256
    dataset = make_dataset(file_patterns, data_accessor, tf_transform_output, spec, ONE_PASS,
                           global_batch=batch, train=False, endless=False)()
    return np.concatenate([y.numpy() for _, y in dataset.take(-(-sample // batch))])


class Throughput(keras.callbacks.Callback):
    """Examples/s of the training steps (validation and the first, tracing call excluded), and
    the loss of the first call."""

    def __init__(self, global_batch: int, steps_per_epoch: int, warmup_steps: int = 1):
        super().__init__()
        self._supports_tf_logs = True  # else Keras copies every batch's logs to numpy (a sync)
        self.global_batch, self.steps_per_epoch = global_batch, steps_per_epoch
        self.warmup_steps = warmup_steps
        self.seconds, self.steps, self._first_loss = 0.0, 0, None
        self._epoch, self._done, self._mark = 0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._mark = time.perf_counter() if self._done >= self.warmup_steps else None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        step = self._epoch * self.steps_per_epoch + batch + 1
        if self._mark is not None:
            self.seconds += now - self._mark
            self.steps += step - self._done
        self._done = step
        self._mark = now if step >= self.warmup_steps else None
        if self._first_loss is None and isinstance(logs, dict) and "loss" in logs:
            self._first_loss = logs["loss"]  # read after training: reading now would wait for it

    @property
    def first_loss(self) -> Optional[float]:
        try:
            return None if self._first_loss is None else float(self._first_loss)
        except (TypeError, ValueError):  # a RemoteValue under parameter_server
            return None

    @property
    def examples_per_second(self) -> float:
        return self.steps * self.global_batch / self.seconds if self.seconds else 0.0


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """TensorBoard logs per epoch (update_freq="epoch"), without per-batch work.

    Once any callback has batch hooks (Throughput does), Keras calls every callback's hooks;
    TensorBoard's then issue a no-op summary per metric per step, ~12% of a small model's
    step time here. The train graph it writes at the first batch is written at the first
    epoch's end instead.
    """

    def _implements_train_batch_hooks(self):
        return False

    def on_train_batch_begin(self, batch, logs=None):
        pass

    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        super().on_train_batch_end(0, None)  # the graph, once; logs=None writes no scalars
        super().on_epoch_end(epoch, logs)


def weights_digest(model: keras.Model) -> str:
    digest = hashlib.sha256()
    for w in model.get_weights():
        digest.update(np.ascontiguousarray(w).tobytes())
    return digest.hexdigest()


def _epochs(train_steps: int, steps_per_epoch: Optional[int]) -> Tuple[int, int]:
    """(epochs, steps per epoch) covering train_steps; the last epoch may run a few more."""
    per_epoch = steps_per_epoch or train_steps
    return -(-train_steps // per_epoch), per_epoch


def task_head(cfg: Mapping, fn_args, tf_transform_output: tft.TFTransformOutput,
              spec: FeatureSpec) -> heads.Head:
    """The config's task head for this training data (components/heads.py); checks the labels
    against the task (a binary label's values against positive_class)."""
    return heads.fitted(cfg["task"], tf_transform_output, spec, lambda: label_sample(
        fn_args.train_files, fn_args.data_accessor, tf_transform_output, spec))


def build_model_fn(model_module: str) -> Callable[..., keras.Model]:
    """build_model of models/<model_module>.py (the config's model_module)."""
    return importlib.import_module(f"models.{model_module}").build_model


def new_model(spec: FeatureSpec, head: heads.Head, tf_transform_output: tft.TFTransformOutput,
              model_cfg: Mapping, training: TrainingConfig, model_module: str) -> keras.Model:
    """The compiled network for this data and config with the task's head, under the
    configured precision policy (call inside the strategy's scope)."""
    with distribution.precision_policy(training.precision):
        return build_model_fn(model_module)(
            spec, spec.categorical_sizes(
                {name: tf_transform_output.vocabulary_size_by_name(name)
                 for name in spec.vocabularies}),
            head, **model_cfg, jit_compile=training.jit_compile,
            steps_per_execution=training.steps_per_execution)


def _measure_retrieval(model: keras.Model, spec: FeatureSpec, fn_args,
                       tf_transform_output: tft.TFTransformOutput, training: TrainingConfig,
                       log_dir: str) -> None:
    """Hit rate at k of the clicked eval items among those `retrieve` answers, beside the k most
    popular items' (components/trainer/retrieval_quality.py), into the model_run."""
    started = time.monotonic()
    dataset = make_dataset(fn_args.eval_files, fn_args.data_accessor, tf_transform_output, spec,
                           training.model_copy(update={"cache_dataset": False}), 1024, train=False,
                           endless=False)()
    # The exported retrieve's own module (components/trainer/export.py): candidates embedded once.
    result = retrieval_quality.measure(model, dataset, spec, model.top_k)
    retrieval_quality.write(result, log_dir)
    logging.info("retrieval: hit rate at %d %.3f over %d clicked eval examples (the %d most "
                 "popular items: %.3f), in %.1fs", result["k"], result["hit_rate"],
                 result["clicked_examples"], result["k"], result["popular_hit_rate"],
                 time.monotonic() - started)


def run_fn(fn_args) -> Optional[TrainingResult]:
    """The TFX Trainer entry point (referenced by module path from pipeline/builder.py).

    The Trainer process's entry: TF_CONFIG is read here, once, and passed down.
    """
    return train_and_export(fn_args, distribution.tf_config_from_env())


def train_and_export(fn_args, tf_config: Optional[str]) -> Optional[TrainingResult]:
    """Trains as the config says and exports the serving model (the chief's copy is kept).

    Returns None on a parameter-server worker or ps task: those serve until the job ends.
    """
    cfg = fn_args.custom_config
    # The section as the config validated it, its defaults core/config/'s (none written here).
    training, model_cfg = TrainingConfig.model_validate(cfg["training"]), cfg["model"]
    strategy_name = training.distribution_strategy
    cluster = distribution.parse_tf_config(strategy_name, tf_config)
    if strategy_name == "parameter_server" and cluster.task_type in ("worker", "ps"):
        distribution.serve_parameter_server_task(cluster)
        return None
    strategy = distribution.make_strategy(training, cluster)
    global_batch = training.batch_size
    distribution.check_batch(global_batch, strategy)
    distribution.check_precision(training.precision, strategy)
    keras.utils.set_random_seed(training.seed)

    spec = FeatureSpec.from_custom_config(cfg)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    workers = max(1, len(cluster.jobs.get("worker", [])) + len(cluster.jobs.get("chief", []))
                  if strategy_name == "multi_worker_mirrored" else
                  len(cluster.jobs.get("worker", [])))
    train = make_dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, spec,
                         training, global_batch, train=True, input_pipelines=workers)
    evaluation = make_dataset(fn_args.eval_files, fn_args.data_accessor, tf_transform_output,
                              spec, training, global_batch, train=False,
                              input_pipelines=workers)
    steps_per_execution = training.steps_per_execution
    head = task_head(cfg, fn_args, tf_transform_output, spec)  # before any training
    with strategy.scope():
        model = new_model(spec, head, tf_transform_output, model_cfg, training,
                          cfg["model_module"])
    logging.info("training on %s (%s) with %d replica(s), global batch %d, precision %s",
                 type(strategy).__name__, cluster.task, strategy.num_replicas_in_sync,
                 global_batch, training.precision)

    epochs, steps_per_epoch = _epochs(fn_args.train_steps, training.steps_per_epoch)
    throughput = Throughput(global_batch, steps_per_epoch, warmup_steps=steps_per_execution)
    log_dir = distribution.write_dir(fn_args.model_run_dir, cluster)
    callbacks = [throughput, EpochTensorBoard(log_dir)]
    started = time.monotonic()
    history = model.fit(
        keras.utils.experimental.DatasetCreator(train), epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        validation_data=keras.utils.experimental.DatasetCreator(evaluation),
        validation_steps=fn_args.eval_steps, verbose=0, callbacks=callbacks)
    logging.info("trained %d steps in %.1fs, %.0f examples/s", epochs * steps_per_epoch,
                 time.monotonic() - started, throughput.examples_per_second)

    # Loss and metrics per epoch, for the run report (pipeline/report); a non-chief's copy is
    # discarded with its log_dir.
    with tf.io.gfile.GFile(os.path.join(log_dir, HISTORY_FILE), "w") as f:
        json.dump({k: [float(v) for v in vs] for k, vs in history.history.items()}, f)

    started = time.monotonic()
    export_dir = distribution.write_dir(fn_args.serving_model_dir, cluster)
    export.export_serving_model(model, head, tf_transform_output, spec, export_dir,
                                model_name=cfg["model_name"], warmup_files=fn_args.eval_files)
    distribution.discard(export_dir, fn_args.serving_model_dir)
    if spec.retrieval and cluster.is_chief:
        _measure_retrieval(model, spec, fn_args, tf_transform_output, training, log_dir)
    distribution.discard(log_dir, fn_args.model_run_dir)
    logging.info("%s the serving model in %.1fs", "exported" if cluster.is_chief else
                 "exported (then discarded, not the chief)", time.monotonic() - started)
    return TrainingResult(
        task=cluster.task, is_chief=cluster.is_chief, strategy=strategy_name,
        replicas=strategy.num_replicas_in_sync, precision=training.precision,
        global_batch=global_batch, steps=epochs * steps_per_epoch,
        examples_per_second=throughput.examples_per_second,
        loss=[float(v) for v in history.history.get("loss", [])],
        val_loss=[float(v) for v in history.history.get("val_loss", [])],
        first_loss=throughput.first_loss, weights_sha256=weights_digest(model),
        exported_to=fn_args.serving_model_dir if cluster.is_chief else None, model=model)
