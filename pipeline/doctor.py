"""What this machine can run, checked against what the config asks for.

    python -m pipeline.doctor [--runner local|kubeflow] [--config configs/pipeline.yaml]
    (or: make doctor, make doctor RUNNER=kubeflow)

Reports TensorFlow's build (the CUDA and cuDNN it was built for), the visible GPUs and their
compute capability, NCCL, XLA, threads, the Keras in use, which distribution strategies and
precisions this machine can run, and whether each path in the config can be reached from here.
With --runner kubeflow, and kubectl reaching a cluster: the KFP backend's version, its object
store, and whether the run namespace's kfp-launcher ConfigMap lets the steps read and write the
pipeline root (one line, and nothing failed, when kubectl is absent or reaches no cluster).
Exit 0 when everything the config asks for is here, 1 (with the fix) when something is missing,
2 for a config that does not load.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pipeline  # (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

pipeline.quiet_cli()

from core.cli import add_config_argument, refuse  # noqa: E402
from core.config import (  # noqa: E402
    PRECISIONS,
    STRATEGIES,
    ConfigError,
    PipelineConfig,
    load_config,
)
from core import kfp_backends, rollout  # noqa: E402
from core.storage import scheme  # noqa: E402
from pipeline.kubeflow.client import cluster  # noqa: E402

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
            "needs a cluster in TF_CONFIG (on Kubeflow the TrainJob's or TFJob's pods have one)")
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
    return found + (storage_findings(config) + release_findings(config) if runner == "local"
                    else kubeflow_storage_findings(config))


def release_findings(config: PipelineConfig,
                     kubernetes: Optional[rollout.Cluster] = None) -> List[Finding]:
    """serving.release: canary on the local runner: ServingBaseline and the Release step read
    the Rollout through this machine's kube config (core/rollout.py Cluster.connect)."""
    ref = rollout.rollout_ref(config.serving)
    if not ref:
        return []
    namespace, _, name = ref.partition("/")
    try:
        state = rollout.read_rollout(kubernetes or rollout.Cluster.connect(), namespace, name)
    except rollout.ReleaseError as error:
        return [Finding("release", FAIL, f"serving.release canary: the Rollout {ref}: {error}",
                        "apply deploy/serving/k8s/rollout/<variant> and bind "
                        "common/release-rbac.yaml to your user, or set serving.release: direct")]
    stable = rollout.stable_version(state)
    return [Finding("release", OK, f"the Rollout {ref}: version "
                    f"{rollout.pod_version(state)}, stable {stable or 'none promoted yet'}")]


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


def cluster_findings(config: PipelineConfig) -> List[Finding]:
    """What kubectl shows of the KFP install, against the config's kubeflow section."""
    kf, found = config.kubeflow, []
    try:
        install = cluster.read_install()
    except cluster.Unreachable as why:
        return [Finding("cluster", INFO, f"not checked: {why}")]
    except cluster.Refused as why:
        install = None
        found.append(Finding("cluster", WARN, f"cannot read namespace {kfp_backends.NAMESPACE} "
                             f"({why}): the backend's version and object store are not checked",
                             "usual for a profile's user on multi-user KFP; an admin can run "
                             "this check, or `kubectl -n kubeflow get deployment ml-pipeline`"))
    else:
        if install is None:
            return [Finding("cluster", WARN, "no KFP API server (Deployment "
                            f"{kfp_backends.API_SERVER_DEPLOYMENT}) in namespace "
                            f"{kfp_backends.NAMESPACE}", "check kubectl's context "
                            "(kubectl config current-context)")]
        found += _install_findings(install, config)
    backend = _backend_or_none(install.version if install else kf.backend_version) or \
        kf.backend
    multi_user = install.multi_user if install else kf.multi_user
    namespace = kf.namespace if multi_user else kfp_backends.NAMESPACE
    if not namespace:
        return found  # _install_findings asked for kubeflow.namespace
    try:
        launcher = cluster.read_launcher_config(namespace)
    except (cluster.Refused, cluster.Unreachable) as why:
        return found + [Finding("cluster", WARN, f"cannot read {namespace}/"
                                f"{kfp_backends.LAUNCHER_CONFIG_MAP}: {why}")]
    found += launcher_findings(config, launcher, namespace, backend,
                               install.services if install else None)
    found += secret_findings(config, launcher, namespace)
    if multi_user and not kf.multi_user and backend.scoped_keys and (
            kf.object_store.secret == kfp_backends.SECRET):  # else the config refused them
        for key, uri in kf.s3_paths().items():
            why = kfp_backends.outside_key_prefixes(uri, namespace)
            if why:
                found.append(Finding("cluster", FAIL, f"kubeflow.{key} {uri}: the namespace's "
                                     f"key may use only {kfp_backends.allowed_uris(namespace)} "
                                     f"({why})", f"move it under s3://{kfp_backends.BUCKET}/"
                                     f"private/{namespace}/ (data, serving) or private-artifacts/"
                                     f"{namespace}/ (pipeline root)"))
    return found


def _backend_or_none(version: Optional[str]) -> Optional[kfp_backends.Backend]:
    try:
        return kfp_backends.backend(version or "")
    except ValueError:
        return None


def _install_findings(install: cluster.Install, config: PipelineConfig) -> List[Finding]:
    kf, found = config.kubeflow, []
    mode = "multi-user" if install.multi_user else "single-user"
    backend = _backend_or_none(install.version)
    if backend is None and not re.fullmatch(r"\d+\.\d+\.\d+", install.version or ""):
        found.append(Finding("cluster", WARN, f"cannot tell the KFP release from the API "
                             f"server's image {install.image}", "set kubeflow.backend_version "
                             "to the release it was built from"))
    elif backend is None:
        found.append(Finding("cluster", FAIL, f"KFP {install.version} (image {install.image}) "
                             f"is not a release this template supports: "
                             f"{kfp_backends.SUPPORTED}", "upgrade the backend"))
    else:
        found.append(Finding("cluster", OK, f"KFP {install.version}, {mode} (Deployment "
                             f"{kfp_backends.API_SERVER_DEPLOYMENT}: {install.image})"))
        if install.version != kf.backend_version:
            found.append(Finding("cluster", WARN, f"kubeflow.backend_version is "
                                 f"{kf.backend_version}; the cluster runs {install.version}",
                                 f"set kubeflow.backend_version: \"{install.version}\" (the "
                                 "object store's default endpoint follows it)"))
    if install.multi_user and not (kf.multi_user and kf.namespace):
        found.append(Finding("cluster", WARN, f"the cluster is multi-user (Deployment "
                             f"{kfp_backends.PROFILE_CONTROLLER}); the config is not",
                             "set kubeflow.multi_user: true and kubeflow.namespace: your "
                             "profile's namespace"))
    elif kf.multi_user and not install.multi_user:
        found.append(Finding("cluster", WARN, "kubeflow.multi_user is true; the cluster is "
                             "single-user (no profile controller)", "set it to false"))
    stores = [name for name in ("seaweedfs", "minio-service") if name in install.services]
    found.append(Finding("cluster", INFO if stores else WARN, "object store: " + (", ".join(
        f"Service {name} (S3: {_ports(_s3_ports(install.services[name]))})" for name in stores)
        or f"no seaweedfs or minio-service Service in {kfp_backends.NAMESPACE}")))
    endpoint = kf.object_store.endpoint
    if kf.s3_paths() and endpoint:
        problem = _service_problem(endpoint, install.services)
        if problem:
            default = backend.endpoint if backend else None
            found.append(Finding("cluster", FAIL, f"kubeflow.object_store.endpoint {endpoint}: "
                                 f"{problem}", (f"remove object_store.endpoint (the default for "
                                                f"KFP {install.version} is {default})")
                                 if default else "name the object store's Service"))
        else:
            found.append(Finding("cluster", OK, f"kubeflow.object_store.endpoint {endpoint}: "
                                 "a Service of this install"))
    return found


def _s3_ports(ports: List[dict]) -> List[dict]:
    # SeaweedFS's Service also serves IAM, master and filer ports (seaweedfs-service.yaml).
    return [p for p in ports if "s3" in p.get("name", "") or p.get("port") == 9000] or ports


def _ports(ports: List[dict]) -> str:
    return ", ".join(f"{p.get('port')} -> {p.get('targetPort', p.get('port'))}" for p in ports)


def _service_problem(endpoint: str, services: Optional[Dict[str, List[dict]]]) -> Optional[str]:
    """Why endpoint names no Service port of KFP's namespace (None: it does, or it is not
    in that namespace, which is not checked)."""
    host, _, port = cluster.host_port(endpoint).partition(":")
    name, _, namespace = host.partition(".")
    if services is None or namespace != kfp_backends.NAMESPACE:
        return None
    if name not in services:
        return (f"no Service {name} in namespace {namespace} (there: "
                f"{', '.join(n for n in ('seaweedfs', 'minio-service') if n in services)})")
    port = int(port or (443 if endpoint.startswith("https") else 80))
    if port not in {p.get("port") for p in services[name]}:
        return f"Service {name} has no port {port} ({_ports(services[name])})"
    return None


def launcher_findings(config: PipelineConfig, launcher: Optional[dict], namespace: str,
                      backend: kfp_backends.Backend,
                      services: Optional[Dict[str, List[dict]]]) -> List[Finding]:
    """Whether the launcher, with namespace's kfp-launcher, reads and writes the steps' root."""
    kf, where = config.kubeflow, f"{namespace}/{kfp_backends.LAUNCHER_CONFIG_MAP}"
    data = (launcher or {}).get("data") or {}
    owner = ((launcher or {}).get("metadata", {}).get("annotations") or {}).get(
        "metacontroller.k8s.io/decorator-controller")
    found = [Finding("cluster", INFO, f"{where}: " + (
        "none (the launcher's defaults)" if launcher is None
        else f"written by {owner}" if owner else "present"))]
    if data.get("defaultPipelineRoot") and kf.pipeline_root:
        found.append(Finding("cluster", INFO, f"{where} defaultPipelineRoot "
                             f"{data['defaultPipelineRoot']}: not used, every run of this "
                             "pipeline sends kubeflow.pipeline_root"))
    root = kf.pipeline_root or ""
    if root.startswith("gs://"):
        found.append(Finding("cluster", INFO, f"kubeflow.pipeline_root {root}: the launcher "
                             "uses providers.gs or the pod's Google credentials (not checked)"))
    if not root.startswith("s3://"):
        return found
    store = kf.object_store
    fix = cluster.providers_patch(namespace, store.endpoint or "https://s3.amazonaws.com",
                                  store.secret, store.access_key_key, store.secret_key_key,
                                  store.region)
    fix += " (the setup step: deploy/kubeflow/README.md, SeaweedFS / MinIO / S3)"
    if owner:
        fix += (f" (the profile controller never updates {where} once written, so the patch "
                "stays; if the ConfigMap is deleted it writes it again without providers: "
                "patch again)")
    params, error = cluster.s3_session(data, root)
    if error:
        return found + [Finding("cluster", FAIL, f"{where}: the driver would stop: {error}",
                                fix)]
    if params == {"fromEnv": "true"}:
        if store.endpoint is None:
            return found + [Finding("cluster", OK, f"{where}: no providers.s3: the launcher "
                                    "opens the root on AWS S3 with the pod's AWS_* env (the "
                                    f"spec sets them from Secret {store.secret})")]
        return found + [Finding(
            "cluster", FAIL, f"{where} has no providers.s3: the launcher would open {root} on "
            f"AWS's endpoint, not {store.endpoint}, and fail to download the steps' inputs and "
            "upload their outputs (backend/src/v2/config/s3.go, objectstore/object_store.go)",
            fix)]
    problems = []
    endpoint = params.get("endpoint", "")
    if params.get("fromEnv") == "true" and not backend.env_credentials_with_endpoint:
        problems.append(f"credentials.fromEnv: true makes KFP {backend.releases} drop the "
                        "provider's endpoint (objectstore/object_store.go createS3BucketSession; "
                        "kept from 2.17.0): use secretRef")
    elif params.get("fromEnv") == "false" and not params.get("secretName"):
        problems.append("credentials.secretRef names no Secret")
    if store.endpoint and cluster.host_port(endpoint) != cluster.host_port(store.endpoint):
        problems.append(f"its endpoint {endpoint or '(none: AWS)'} is not the steps' "
                        f"{store.endpoint}")
    elif endpoint and (problem := _service_problem(endpoint, services)):
        problems.append(f"its endpoint {endpoint}: {problem}")
    if ("://" not in endpoint and params.get("disableSSL") != "true"
            and (store.endpoint or "").startswith("http://")):
        problems.append(f"disableSSL is not true: the launcher would use https://{endpoint}")
    if params.get("forcePathStyle") == "false" and store.endpoint:
        problems.append("forcePathStyle: false: the launcher would address BUCKET.host, which "
                        "in-cluster DNS does not resolve")
    if problems:
        return found + [Finding("cluster", FAIL, f"{where} providers.s3: " + "; ".join(problems),
                                fix)]
    secret = (f"Secret {params['secretName']}" if params.get("fromEnv") == "false"
              else "the pod's AWS_* env")
    found.append(Finding("cluster", OK, f"{where} providers.s3: the launcher reads and writes "
                         f"{root} at {endpoint} with {secret}"))
    if params.get("fromEnv") == "false" and params["secretName"] != store.secret:
        found.append(Finding("cluster", WARN, f"the launcher uses Secret {params['secretName']}, "
                             f"the steps {store.secret}", "both keys must be allowed on the "
                             "pipeline root; simplest: the same Secret in both"))
    return found


def secret_findings(config: PipelineConfig, launcher: Optional[dict],
                    namespace: str) -> List[Finding]:
    """Whether the Secrets the launcher (kfp-launcher's secretRef) and the steps (the spec's
    secretAsEnv) are given exist in namespace with their keys. Without the launcher's, it stops
    at OpenBucket ("failed to retrieve credentials", objectstore/object_store.go); without the
    steps', no step's container starts (CreateContainerConfigError)."""
    kf, wanted = config.kubeflow, {}
    root = kf.pipeline_root or ""
    if root.startswith("s3://"):
        params, error = cluster.s3_session(((launcher or {}).get("data") or {}), root)
        if not error and params.get("fromEnv") == "false" and params.get("secretName"):
            wanted.setdefault(params["secretName"], []).append(
                ("the launcher's (kfp-launcher providers.s3 secretRef)",
                 [params.get("accessKeyKey", ""), params.get("secretKeyKey", "")]))
    if kf.s3_paths():
        store = kf.object_store
        wanted.setdefault(store.secret, []).append(
            ("the steps' (kubeflow.object_store.secret)",
             [store.access_key_key, store.secret_key_key]))
    found = []
    for name, users in wanted.items():
        try:
            keys = cluster.read_secret_keys(namespace, name)
        except (cluster.Refused, cluster.Unreachable) as why:
            found.append(Finding("cluster", WARN, f"cannot read Secret {namespace}/{name}: "
                                 f"{why}"))
            continue
        who = " and ".join(user for user, _ in users)
        missing = sorted({k for _, needed in users for k in needed} - set(keys or []))
        if keys is None or missing:
            what = "does not exist" if keys is None else f"has no key {', '.join(missing)}"
            found.append(Finding(
                "cluster", FAIL, f"Secret {namespace}/{name}, {who}, {what}",
                f"create it: kubectl -n {namespace} create secret generic {name} "
                f"--from-literal=KEY=... for each key (deploy/kubeflow/README.md, SeaweedFS / "
                "MinIO / S3)"))
        else:
            found.append(Finding("cluster", OK, f"Secret {namespace}/{name}, {who}: present "
                                 f"with {', '.join(sorted({k for _, n in users for k in n}))}"))
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
    add_config_argument(parser, help="pipeline config YAML (default: configs/pipeline.yaml)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return refuse(error)
    machine = Machine.here()
    asked = config_findings(config, machine, args.runner)
    print(report(machine_findings(machine)))
    print(f"\nwhat {args.config} asks for ({args.runner} runner):")
    print(report(asked) if asked else "  nothing this machine lacks")
    if args.runner == "kubeflow":
        found = cluster_findings(config)
        print("\nthe cluster kubectl reaches (KFP):")
        print(report(found))
        asked += found
    failures = [f for f in [python_finding(), *asked] if f.level == FAIL]
    print(f"\n{len(failures)} problem(s)" if failures else "\nready to run this config here")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
