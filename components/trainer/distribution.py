"""The tf.distribute strategy and precision policy named in the config, built with clear errors.

TF_CONFIG (the cluster, as Kubeflow's TFJob and Vertex set it) is read once, by the entry point
(`tf_config_from_env`), parsed into a `Cluster` and passed down; nothing here reads the
environment. Every check that can fail runs before training starts.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional

import tensorflow as tf
import tf_keras as keras

from core.config import TrainingConfig

MULTI_WORKER = ("multi_worker_mirrored", "parameter_server")


# The compute capability from which a mixed precision is faster than float32 on a GPU (Tensor
# Cores: float16 from Volta, bfloat16 from Ampere); pipeline.doctor reports against the same.
FAST_ON_CAPABILITY = {"mixed_float16": (7, 0), "mixed_bfloat16": (8, 0)}


class TrainingSetupError(ValueError):
    """A strategy or precision setting that cannot work on this machine or cluster."""


def tf_config_from_env() -> Optional[str]:
    """The one place that reads TF_CONFIG: entry points call it and pass the value down."""
    return os.environ.get("TF_CONFIG")


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The cluster and this task, from TF_CONFIG; the single-process default has no jobs."""
    jobs: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
    task_type: Optional[str] = None
    task_index: int = 0

    @property
    def is_chief(self) -> bool:
        """Writes the model: the 'chief' task, or worker 0 of a cluster without one."""
        if self.task_type is None:
            return True
        if "chief" in self.jobs:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def task(self) -> str:
        return f"{self.task_type or 'local'}:{self.task_index}"

    def resolver(self) -> tf.distribute.cluster_resolver.ClusterResolver:
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(self.jobs), task_type=self.task_type, task_id=self.task_index,
            rpc_layer="grpc")


def parse_tf_config(strategy: str, tf_config: Optional[str]) -> Cluster:
    """The Cluster for `strategy`; single-process strategies ignore TF_CONFIG."""
    if strategy not in MULTI_WORKER:
        return Cluster()
    example = ('{"cluster": {"worker": ["host0:2222", "host1:2222"]}, '
               '"task": {"type": "worker", "index": 0}}')
    if not tf_config:
        raise TrainingSetupError(
            f"distribution_strategy '{strategy}' needs the cluster in the TF_CONFIG environment "
            f"variable (set by Kubeflow's TFJob or Vertex); it is not set. Expected {example}")
    try:
        parsed = json.loads(tf_config)
        jobs, task = parsed["cluster"], parsed["task"]
        task_type, task_index = task["type"], int(task["index"])
        jobs = {job: list(addresses) for job, addresses in jobs.items()}
        if not all(isinstance(a, str) and ":" in a for addrs in jobs.values() for a in addrs):
            raise ValueError("every address must be 'host:port'")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise TrainingSetupError(
            f"TF_CONFIG is malformed for '{strategy}' ({e}); expected {example}") from None
    if task_index < 0 or task_index >= len(jobs.get(task_type, [])):
        raise TrainingSetupError(
            f"TF_CONFIG names task {task_type}:{task_index}, which is not in its cluster "
            f"{sorted(jobs)} with {[len(v) for v in jobs.values()]} task(s)")
    if strategy == "multi_worker_mirrored":
        if not set(jobs) & {"chief", "worker"} or set(jobs) - {"chief", "worker", "evaluator"}:
            raise TrainingSetupError(
                f"multi_worker_mirrored needs 'worker' (and optionally 'chief') jobs in "
                f"TF_CONFIG's cluster, found {sorted(jobs)}")
    else:
        missing = {"chief", "worker", "ps"} - set(jobs)
        if missing:
            raise TrainingSetupError(
                f"parameter_server needs 'chief', 'worker' and 'ps' jobs in TF_CONFIG's "
                f"cluster; missing {sorted(missing)}")
    return Cluster(jobs, task_type, task_index)


def _check_devices(devices: List[str]) -> None:
    known = {d.name for d in tf.config.list_logical_devices()}
    short = {n.replace("/job:localhost/replica:0/task:0", "") for n in known}
    normalized = {d.lower().replace("device:", "") for d in known | short}
    missing = [d for d in devices
               if d not in known | short and d.lower().replace("device:", "") not in normalized]
    if missing:
        raise TrainingSetupError(
            f"mirrored devices {missing} do not exist here; available: {sorted(short)}")


def _communication(implementation: str, timeout_s: int
                   ) -> tf.distribute.experimental.CommunicationOptions:
    kind = tf.distribute.experimental.CommunicationImplementation
    return tf.distribute.experimental.CommunicationOptions(
        implementation={"auto": kind.AUTO, "ring": kind.RING, "nccl": kind.NCCL}[implementation],
        timeout_seconds=timeout_s or None)


# Runs beside a task that waits for its cluster. TensorFlow waits for a missing peer inside a
# C++ call that holds the GIL; here it had not given up after 10 minutes and ignored SIGTERM
# (its coordination service's register timeout did not end it either), so neither a Python
# thread nor a signal handler can end the wait. A separate process can.
_WATCHDOG = """
import os, signal, sys, time
parent, deadline, message = int(sys.argv[1]), time.monotonic() + float(sys.argv[2]), sys.argv[3]
while time.monotonic() < deadline:
    time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
    if os.getppid() != parent:
        sys.exit(0)
print(message, file=sys.stderr, flush=True)
os.kill(parent, signal.SIGKILL)
"""


@contextlib.contextmanager
def startup_deadline(seconds: int, what: str) -> Iterator[None]:
    """Kills this process with a clear message if the block runs past `seconds`: a task
    whose cluster never comes up fails instead of hanging. For dedicated training tasks
    (the multi-worker strategies) only."""
    message = (f"error: {what} did not come up within {seconds}s (training.startup_timeout_s);"
               " check that every task in TF_CONFIG is running and reachable")
    watchdog = subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()),
                                 str(seconds), message], stdin=subprocess.DEVNULL)
    try:
        yield
    finally:
        watchdog.kill()
        watchdog.wait()


def _all_workers_ready(strategy: tf.distribute.Strategy) -> None:
    """An all-reduce over every replica: returns once the whole cluster takes part."""
    total = strategy.reduce(tf.distribute.ReduceOp.SUM,
                            strategy.run(lambda: tf.constant(1.0)), axis=None)
    if int(total) != strategy.num_replicas_in_sync:
        raise TrainingSetupError(f"cluster barrier counted {int(total)} replicas, expected "
                                 f"{strategy.num_replicas_in_sync}")


def make_strategy(training: TrainingConfig, cluster: Cluster) -> tf.distribute.Strategy:
    """Builds the configured strategy. Call it before any other TensorFlow work in the process:
    multi-worker collectives must be configured at start-up."""
    name, implementation = training.distribution_strategy, training.collective_implementation
    gpus = tf.config.list_physical_devices("GPU")
    if implementation == "nccl" and not gpus:
        raise TrainingSetupError("collective_implementation 'nccl' needs GPUs; this machine has "
                                 "none (use 'ring' or 'auto')")
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    if name == "mirrored":
        devices = list(training.devices)
        if devices:
            _check_devices(devices)
        cross_device_ops = tf.distribute.NcclAllReduce() if implementation == "nccl" else None
        return tf.distribute.MirroredStrategy(devices=devices or None,
                                              cross_device_ops=cross_device_ops)
    timeout_s = training.startup_timeout_s
    if name == "multi_worker_mirrored":
        with startup_deadline(timeout_s, f"the multi_worker_mirrored cluster {cluster.jobs}"):
            strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=cluster.resolver(),
                communication_options=_communication(
                    implementation, training.collective_timeout_s))
            _all_workers_ready(strategy)
        return strategy
    if name == "parameter_server":
        with startup_deadline(timeout_s, f"the parameter_server cluster {cluster.jobs}"):
            return tf.distribute.experimental.ParameterServerStrategy(cluster.resolver())
    if name == "tpu":
        return _tpu_strategy(training.tpu)
    raise TrainingSetupError(f"unknown distribution_strategy '{name}'; expected one of "
                             "one_device, mirrored, multi_worker_mirrored, parameter_server, tpu")


def _tpu_strategy(tpu: Optional[str]) -> tf.distribute.Strategy:
    if not tpu:
        raise TrainingSetupError("distribution_strategy 'tpu' needs training.tpu")
    if tpu == "local" and not tf.config.list_physical_devices("TPU"):
        raise TrainingSetupError("distribution_strategy 'tpu' with tpu 'local' found no TPU on "
                                 "this machine")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as e:
        raise TrainingSetupError(f"distribution_strategy 'tpu' could not reach TPU '{tpu}': "
                                 f"{e}") from None
    return tf.distribute.TPUStrategy(resolver)


def serve_parameter_server_task(cluster: Cluster) -> None:
    """Runs this worker or ps task's server until the job ends (TensorFlow's pattern for
    ParameterServerStrategy: only the chief runs the training program)."""
    config = tf.compat.v1.ConfigProto()
    # Workers run several scheduled functions at once; too few threads can deadlock them.
    config.inter_op_parallelism_threads = max(4, os.cpu_count() or 1)
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster.jobs), job_name=cluster.task_type,
                                  task_index=cluster.task_index, protocol="grpc", config=config,
                                  start=True)
    logging.info("parameter_server task %s serving at %s", cluster.task, server.target)
    server.join()


def check_batch(global_batch: int, strategy: tf.distribute.Strategy) -> int:
    """The per-replica batch; the global batch must split evenly over the replicas."""
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise TrainingSetupError(
            f"batch_size {global_batch} (the global batch) does not split evenly over "
            f"{replicas} replicas; use a multiple of {replicas}")
    return global_batch // replicas


def check_precision(policy: str, strategy: tf.distribute.Strategy) -> None:
    """Warns (before training) about a policy that cannot pay off on this hardware."""
    gpus = tf.config.list_physical_devices("GPU")
    if policy == "mixed_float16" and not gpus:
        logging.warning("precision 'mixed_float16' on a machine without a GPU runs slower than "
                        "float32 and gains nothing; use float32 or mixed_bfloat16 here")
    elif policy == "mixed_float16" and (
            old := _older_than(gpus, FAST_ON_CAPABILITY["mixed_float16"])):
        logging.warning("precision 'mixed_float16' speeds up GPUs of compute capability 7.0+ "
                        "only; %s are older", old)
    if policy == "mixed_bfloat16" and (
            old := _older_than(gpus, FAST_ON_CAPABILITY["mixed_bfloat16"])):
        logging.warning("precision 'mixed_bfloat16' needs GPUs of compute capability 8.0+ "
                        "to pay off; %s are older", old)


@contextlib.contextmanager
def precision_policy(policy: str) -> Iterator[None]:
    """The Keras dtype policy while the model is built (layers read it when created); the
    process-wide policy is restored afterwards. The model keeps its output layer float32."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def write_dir(target: str, cluster: Cluster) -> str:
    """Where this task writes a model or logs: the target on the chief, a local scratch folder
    elsewhere (TensorFlow's pattern: every worker saves, since saving runs collectives, but only
    the chief's copy is kept). Remove a scratch folder with `discard`."""
    if cluster.is_chief:
        return target
    return tempfile.mkdtemp(prefix=f"{cluster.task_type}{cluster.task_index}-scratch-")


def discard(path: str, target: str) -> None:
    """Removes a non-chief task's scratch folder (never the target)."""
    if path != target and tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
        logging.info("removed scratch %s", path)


def _older_than(gpus, capability) -> list:
    """Names of the GPUs below a compute capability (unknown counts as new enough)."""
    return [d.name for d in gpus
            if tf.config.experimental.get_device_details(d).get("compute_capability", capability)
            < capability]
