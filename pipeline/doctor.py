"""What this machine can run, checked against what the config asks for.

    python -m pipeline.doctor [--runner local|kubeflow] [--config configs/pipeline.yaml]
    (or: make doctor)

Reports TensorFlow's build (the CUDA and cuDNN it was built for), the visible GPUs and their
compute capability, NCCL, XLA, threads, the Keras in use, which distribution strategies and
precisions this machine can run, and whether each path in the config can be reached from here.
Exit 0 when everything the config asks for is here, 1 (with the fix) when something is missing,
2 for a config that does not load.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import pipeline  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.filterwarnings("ignore", category=FutureWarning)

from core.config import (  # noqa: E402
    DEFAULT_CONFIG,
    PRECISIONS,
    STRATEGIES,
    ConfigError,
    PipelineConfig,
    load_config,
)
from core.storage import scheme  # noqa: E402

OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"
S3_TIMEOUT_S = 5


@dataclasses.dataclass
class Finding:
    area: str
    level: str
    text: str
    fix: Optional[str] = None


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
        found.append(Finding("precision", *_precision_here(precision, machine)))
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
            "needs a cluster in TF_CONFIG (a TFJob sets it on Kubeflow)")
        return (OK if machine.tf_config else INFO), f"{strategy}: {where}"
    return ((OK, f"tpu: {machine.tpus} TPU cores") if machine.tpus
            else (INFO, "tpu: no TPU here (needs a TPU VM or a TPU name in training.tpu)"))


def _precision_here(precision: str, machine: Machine):
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


def config_findings(config: PipelineConfig, machine: Machine, runner: str = "local"
                    ) -> List[Finding]:
    """What the config asks for, against this machine: a FAIL is something a run would need.
    runner: local (this machine runs every step) or kubeflow (it compiles; pods run the steps)."""
    training, found = config.training, []
    strategy, gpus = training.distribution_strategy, len(machine.gpus)
    if training.collective_implementation == "nccl" and not gpus:
        found.append(Finding("config", FAIL, "training.collective_implementation is 'nccl' and "
                             "no GPU is visible", "use 'auto' on CPU machines, or run where "
                             "GPUs are visible"))
    visible = {f"/gpu:{i}" for i in range(gpus)}
    missing = [d for d in training.devices if d.lower().replace("device:", "") not in visible]
    if missing:
        found.append(Finding("config", FAIL, f"training.devices lists {missing}, not visible "
                             f"here (visible: {sorted(visible) or 'none'})",
                             "list visible devices only, or leave 'devices' empty for all"))
    if strategy == "tpu" and not machine.tpus and training.tpu == "local":
        found.append(Finding("config", FAIL, "distribution_strategy 'tpu' with tpu 'local' and "
                             "no TPU here", "run on a TPU VM, or name a remote TPU in "
                             "training.tpu"))
    if (strategy in ("multi_worker_mirrored", "parameter_server") and not machine.tf_config
            and runner == "local"):
        found.append(Finding("config", FAIL, f"distribution_strategy '{strategy}' needs the "
                             "cluster in TF_CONFIG, which is not set here",
                             "use one_device or mirrored locally; multi-worker strategies run "
                             "as a TFJob on Kubeflow (deploy/training)"))
    if training.jit_compile and machine.xla_error:
        found.append(Finding("config", FAIL, f"training.jit_compile is on and XLA fails here: "
                             f"{machine.xla_error}", "set training.jit_compile: false"))
    level, text = _precision_here(training.precision, machine)
    if level == WARN:
        found.append(Finding("config", WARN, f"training.precision {text}",
                             "float32 is as fast on this machine"))
    return found + (storage_findings(config) if runner == "local"
                    else kubeflow_storage_findings(config))


def _writable(path: Path) -> Optional[str]:
    """Why a folder cannot be created or written at path, or None."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _s3_reachable(uri: str, endpoint: Optional[str]) -> Optional[str]:
    """Why an s3:// bucket cannot be listed from here (None: it can)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    bucket = uri[len("s3://"):].split("/", 1)[0]
    client = boto3.client("s3", endpoint_url=endpoint, config=Config(
        connect_timeout=S3_TIMEOUT_S, read_timeout=S3_TIMEOUT_S, retries={"max_attempts": 1}))
    try:
        client.head_bucket(Bucket=bucket)
    except (BotoCoreError, ClientError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def storage_findings(config: PipelineConfig) -> List[Finding]:
    found = []
    data = Path(config.data.input_base)
    spans = sorted(p.name for p in data.glob("span-*")) if data.is_dir() else []
    found.append(Finding("storage", OK if spans else FAIL,
                         f"data.input_base {data}: {len(spans)} span folder(s)",
                         None if spans else "put the CSV files in span-YYYYMMDD/ folders there"))
    for key, path in (("runner.output_dir", config.runner.output_dir),
                      ("serving.serving_dir", config.serving.serving_dir)):
        problem = _writable(Path(path))
        found.append(Finding("storage", FAIL if problem else OK,
                             f"{key} {path}: {problem or 'writable'}",
                             "point it at a folder this user can write" if problem else None))
    return found


def kubeflow_storage_findings(config: PipelineConfig) -> List[Finding]:
    found, kubeflow = [], config.kubeflow
    # On Kubeflow the steps, not this machine, read these; an in-cluster endpoint is often not
    # reachable from here, so what fails is a warning.
    endpoint = os.environ.get("S3_ENDPOINT") or kubeflow.object_store.endpoint
    for key in ("pipeline_root", "input_base", "serving_dir"):
        uri = getattr(kubeflow, key)
        if not uri:
            continue
        kind = scheme(uri)
        if kind == "s3":
            problem = _s3_reachable(uri, endpoint)
            state = f"not reachable from here: {problem}" if problem else "reachable"
            found.append(Finding("storage", WARN if problem else OK,
                                 f"kubeflow.{key} {uri} via {endpoint}: {state}",
                                 "fine if the endpoint is in-cluster only; to check from here, "
                                 "port-forward it and set S3_ENDPOINT" if problem else None))
        else:
            found.append(Finding("storage", INFO, f"kubeflow.{key} {uri}: {kind or 'a path'} "
                                 "in the steps' pods (not checked from here)"))
    return found


def report(findings: List[Finding]) -> str:
    lines, area = [], None
    for finding in findings:
        if finding.area != area:
            area = finding.area
            lines.append(f"{area}:")
        lines.append(f"  [{finding.level:>4}] {finding.text}")
        if finding.fix and finding.level in (WARN, FAIL):
            lines.append(f"         fix: {finding.fix}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.doctor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runner", choices=["local", "kubeflow"], default="local",
                        help="local: this machine runs the steps (default); kubeflow: it "
                        "compiles the spec and the cluster's pods run the steps")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="pipeline config YAML (default: configs/pipeline.yaml)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    machine = Machine.here()
    asked = config_findings(config, machine, args.runner)
    print(report(machine_findings(machine)))
    print(f"\nwhat {args.config} asks for ({args.runner} runner):")
    print(report(asked) if asked else "  nothing this machine lacks")
    failures = [f for f in [python_finding(), *asked] if f.level == FAIL]
    print(f"\n{len(failures)} problem(s)" if failures else "\nready to run this config here")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
