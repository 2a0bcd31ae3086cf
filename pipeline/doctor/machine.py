"""What TensorFlow sees on this machine (GPUs, NCCL, XLA, Keras, CPUs) and which
distribution strategies and precisions it can run."""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

from core.config import PRECISIONS, STRATEGIES
from pipeline.doctor.findings import FAIL, INFO, OK, WARN, Finding


@dataclasses.dataclass
class Machine:
    """What TensorFlow sees here; taken apart from the checks so tests can describe a machine."""
    tf_version: str
    build: Dict[str, object]
    keras: str
    gpus: List[Dict[str, object]]  # name, compute_capability (tuple) per visible GPU
    tpus: int
    nccl: Optional[str]
    xla_error: Optional[str]
    cpus: int
    cpu_bf16: bool
    tf_config: Optional[str]

    @classmethod
    def here(cls) -> "Machine":
        import tensorflow as tf

        gpus = []
        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            gpus.append({"name": details.get("device_name", device.name),
                         "compute_capability": details.get("compute_capability")})
        return cls(tf_version=tf.__version__, build=dict(tf.sysconfig.get_build_info()),
                   keras=_keras_in_use(), gpus=gpus,
                   tpus=len(tf.config.list_logical_devices("TPU")), nccl=_nccl(),
                   xla_error=_xla_error(), cpus=len(os.sched_getaffinity(0)),
                   cpu_bf16=_cpu_has_bf16(), tf_config=os.environ.get("TF_CONFIG"))


def _keras_in_use() -> str:
    import tensorflow as tf

    module = tf.keras.__name__.split(".")[0]
    if module == "tf_keras":
        import tf_keras

        return f"tf_keras {tf_keras.__version__} (Keras 2)"
    import keras

    return f"keras {keras.__version__}"


def _nccl() -> Optional[str]:
    """Where NCCL comes from: the nvidia-nccl wheel TF's CUDA extras install, or the system."""
    import ctypes.util
    from importlib import metadata

    for name in ("nvidia-nccl-cu12", "nvidia-nccl-cu11"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    found = ctypes.util.find_library("nccl")
    return f"system {found}" if found else None


def _xla_error() -> Optional[str]:
    """None when XLA compiles and runs a function on this machine, else why not."""
    import tensorflow as tf

    try:
        tf.function(lambda x: x * 2.0 + 1.0, jit_compile=True)(tf.constant([1.0])).numpy()
    except Exception as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return None


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _capability(gpu: Dict[str, object]):
    return tuple(gpu["compute_capability"] or (0, 0))


def python_finding() -> Finding:
    """This interpreter against the one supported range (pyproject.toml's requires-python)."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    supported = metadata.metadata("tfx-pipeline-template")["Requires-Python"]
    version = ".".join(map(str, sys.version_info[:3]))
    if version in SpecifierSet(supported):
        return Finding("python", OK, f"Python {version} (supported: {supported})")
    return Finding("python", FAIL, f"Python {version}, outside the supported {supported}",
                   "rebuild .venv with a supported Python: rm -rf .venv && make venv")


def machine_findings(machine: Machine) -> List[Finding]:
    build = machine.build
    cuda = (f"built for CUDA {build.get('cuda_version')} / cuDNN {build.get('cudnn_version')}"
            if build.get("is_cuda_build") else "CPU-only build")
    found = [python_finding(), Finding("tensorflow", OK,
                                       f"TensorFlow {machine.tf_version}, {cuda}")]
    if machine.keras.startswith("tf_keras"):
        found.append(Finding("keras", OK, machine.keras))
    else:
        found.append(Finding("keras", FAIL, f"{machine.keras} is in use; TFT 1.16 needs Keras 2",
                             "install tf_keras (requirements.lock) and set TF_USE_LEGACY_KERAS=1 "
                             "before TensorFlow is imported (the pipeline's entry points do)"))
    if machine.gpus:
        for gpu in machine.gpus:
            capability = ".".join(map(str, gpu["compute_capability"] or ("?",)))
            found.append(Finding("gpu", OK, f"{gpu['name']}, compute capability {capability}"))
    else:
        why = ("no driver or no device visible (nvidia-smi; CUDA_VISIBLE_DEVICES)"
               if build.get("is_cuda_build") else "TensorFlow was built without CUDA")
        found.append(Finding("gpu", INFO, f"no GPU visible: {why}"))
    found.append(Finding("nccl", INFO if not machine.gpus else (OK if machine.nccl else WARN),
                         machine.nccl or "not found (needed only by all-reduce across GPUs)"))
    found.append(Finding("xla", OK if machine.xla_error is None else WARN,
                         "jit_compile works" if machine.xla_error is None
                         else f"jit_compile fails here: {machine.xla_error}"))
    found.append(Finding("threads", INFO, f"{machine.cpus} CPU cores usable by this process "
                         f"(os.sched_getaffinity); TensorFlow's thread pools size to them"))
    for strategy in STRATEGIES:
        found.append(Finding("strategy", *_strategy_here(strategy, machine)))
    for precision in PRECISIONS:
        found.append(Finding("precision", *precision_here(precision, machine)))
    return found


def _strategy_here(strategy: str, machine: Machine):
    gpus = len(machine.gpus)
    if strategy == "one_device":
        return OK, f"one_device: on {'GPU 0' if gpus else 'the CPU'}"
    if strategy == "mirrored":
        return OK, (f"mirrored: {gpus} replicas (one per GPU)" if gpus
                    else "mirrored: 1 replica on the CPU (no GPU: no speed-up)")
    if strategy in ("multi_worker_mirrored", "parameter_server"):
        where = "TF_CONFIG is set here" if machine.tf_config else (
            "needs a cluster in TF_CONFIG (on Kubeflow the TrainJob's or TFJob's pods have one)")
        return (OK if machine.tf_config else INFO), f"{strategy}: {where}"
    return ((OK, f"tpu: {machine.tpus} TPU cores") if machine.tpus
            else (INFO, "tpu: no TPU here (needs a TPU VM or a TPU name in training.tpu)"))


def precision_here(precision: str, machine: Machine):
    if precision == "float32":
        return OK, "float32: everywhere"
    from components.trainer.distribution import FAST_ON_CAPABILITY

    needed = FAST_ON_CAPABILITY[precision]
    fast = [g for g in machine.gpus if _capability(g) >= needed]
    if fast:
        return OK, f"{precision}: fast on {len(fast)} GPU(s)"
    if precision == "mixed_bfloat16" and not machine.gpus and machine.cpu_bf16:
        return OK, "mixed_bfloat16: the CPU has bf16 instructions"
    return WARN, (f"{precision}: runs, but slower than float32 here (needs GPUs of compute "
                  f"capability {'.'.join(map(str, needed))}+)")
