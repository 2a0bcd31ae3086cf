"""Test helpers: configs in temporary folders, and running the real CLI.

Template tests take the example's names (columns, label, pipeline and model names, data folder)
from the bundled config through `example_config()`, never as literals: a fork that replaces
configs/ and data/ keeps them passing (tests/README.md)."""
from __future__ import annotations

import functools
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from core import yaml_text

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "pipeline.yaml"
# The suite reads and writes thousands of YAML documents (configs, manifests, CRDs): through
# libyaml, as the product does (core/yaml_text.py).
load_yaml, load_yaml_all, dump_yaml = yaml_text.load, yaml_text.load_all, yaml_text.dump


@functools.lru_cache(maxsize=None)
def example_config():
    """The bundled config (configs/pipeline.yaml), loaded and validated."""
    from core.config import load_config

    return load_config(DEFAULT_CONFIG)


class LazyModules:
    """A package's modules, each imported at its first read as an attribute: a test module
    names a slow package's modules at its top without importing it at collection (pytest
    inspects every global it collects, so a LazyLoader module would load there)."""

    def __init__(self, package: str, *names: str):
        self._package, self._names = package, frozenset(names)

    def __getattr__(self, name: str):
        if name not in self._names:  # pytest's probes (__test__, ...) must not import
            raise AttributeError(name)
        module = importlib.import_module(f"{self._package}.{name}")
        setattr(self, name, module)
        return module


def read_as(features, label_kind: str = "text") -> dict:
    """A features declaration (a dict or FeaturesConfig) as the pipeline's CSV reader gets it
    (PipelineConfig.reader_features), the data section's list separator."""
    from core.config import DataConfig, FeaturesConfig, reader_features

    return reader_features(FeaturesConfig.model_validate(features),
                           DataConfig.model_fields["list_separator"].default, label_kind)


def example_data() -> Path:
    """The bundled config's folder of dated spans."""
    return example_config().data.input_base


def span_files(span: Path) -> list:
    """A span folder's data files, in name order."""
    return sorted(span.glob("*.csv"))


def span_day(span: str) -> str:
    """The date of a span folder named span-YYYYMMDD (the bundled file_pattern), as ISO."""
    digits = span[-8:]
    return f"{digits[:4]}-{digits[4:6]}-{digits[6:]}"


def newest_span(data: Path) -> Path:
    """The newest dated span folder under data (span folders sort by date)."""
    return sorted(p for p in data.iterdir() if p.is_dir())[-1]


def write_config(folder: Path, changes: Optional[dict] = None, name: str = "pipeline.yaml",
                 data_dir: Optional[Path] = None, source: Path = DEFAULT_CONFIG) -> Path:
    """A copy of the bundled config (or of `source`, another of configs/) whose outputs land in
    `folder`; `changes` maps dotted keys to values (None deletes the key)."""
    from core.config import load_config

    raw = load_yaml(source.read_text())
    original = example_config() if source == DEFAULT_CONFIG else load_config(source)
    raw["data"]["input_base"] = str(data_dir or original.data.input_base)
    if original.schema_file is not None:
        raw["schema_file"] = str(original.schema_file)
    raw["runner"]["output_dir"] = str(folder / "outputs")
    raw["serving"]["serving_dir"] = str(folder / "serving")
    for dotted, value in (changes or {}).items():
        *parents, leaf = dotted.split(".")
        holder = raw
        for key in parents:
            holder = holder.setdefault(key, {})
        if value is None:
            holder.pop(leaf, None)
        else:
            holder[leaf] = value
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(dump_yaml(raw, sort_keys=False))
    return path


# Entry points that import no TensorFlow: a fresh interpreter starts them in ~1 s, less than
# the prefork server's own start.
LIGHT_MODULES = ("pipeline.predict", "pipeline.report", "devtools.kfp_backend")


def user_env() -> dict:
    """A user's shell: PATH, HOME and LANG only, none of what tests/conftest.py sets for every
    other child (TF_USE_LEGACY_KERAS, TF_CPP_MIN_LOG_LEVEL) and no PYTHONPATH."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(Path.home())),
            "LANG": os.environ.get("LANG", "C.UTF-8")}


def run_cli(*args: str, timeout: int = 900, env: Optional[dict] = None, cwd: Optional[Path] = None,
            fresh: bool = False) -> subprocess.CompletedProcess:
    """Runs `python -m <args>` (from the repo root, or cwd), as a user would, capturing its
    output; an env value of None removes that variable. By default as a fork of this worker's
    prefork server (devtools/prefork.py: the same command, environment, folder, output and exit
    status, without paying ~11 s of CPU to import TensorFlow, TFX, Beam and TFMA again);
    fresh=True starts a new interpreter, for what depends on the environment at import time
    (which Keras loads) and for the README's own first run."""
    command_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    folder = cwd or REPO
    if fresh or args[0] in LIGHT_MODULES:
        return subprocess.run([sys.executable, "-m", *args], cwd=folder, capture_output=True,
                              text=True, timeout=timeout, env=command_env)
    from devtools.prefork import run_captured

    return run_captured(prefork_server(), args[0], args[1:], env=command_env, cwd=str(folder),
                        timeout=timeout)


def run_script(path: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """`python PATH ARGS` from the repo root, captured, as a fork of this worker's prefork
    server (run_cli says what that keeps)."""
    from devtools.prefork import run_captured

    return run_captured(prefork_server(), str(path), args, env=dict(os.environ), cwd=str(REPO),
                        timeout=timeout, script=True)


@functools.lru_cache(maxsize=None)
def prefork_server():
    """This process's prefork server: started on first use, with this process's environment
    (tests/conftest.py sets TF_USE_LEGACY_KERAS first, as the CLI does); closed at exit."""
    import atexit

    from devtools.prefork import PreforkServer

    server = PreforkServer(cwd=str(REPO))
    atexit.register(server.close)
    return server


def report_path(stdout: str) -> Path:
    """The run report's path, from the CLI's output, whose last line it is."""
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("  report:     "), stdout
    return Path(last.split("report:", 1)[1].strip())


def versions(model_base_path: Path) -> list:
    if not model_base_path.is_dir():
        return []
    return sorted(p.name for p in model_base_path.iterdir() if p.name.isdigit())


def tree_digest(folder: Path) -> dict:
    """Every file under folder with its bytes: equal digests mean byte-identical trees."""
    import hashlib

    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_spans(folder: Path) -> Path:
    """A copy of the bundled dated spans in folder/data, to add spans to."""
    import shutil

    data = folder / "data"
    shutil.copytree(example_data(), data)
    return data


def add_span(data: Path, span: str, source: Optional[str] = None) -> Path:
    """A new dated span folder (e.g. span-20101231) holding a copy of another span's rows
    (default: the newest span's); returns its data file."""
    import shutil

    [file] = span_files(newest_span(data) if source is None else data / source)
    (data / span).mkdir()
    return Path(shutil.copy(file, data / span / file.name))


def kubeflow_local_changes(folder: Path, data: Path) -> dict:
    """write_config changes for a compiled spec that the conformance runner can run here: local
    paths as the pods' paths; the schema stays the image's copy (/opt/pipeline/configs/...),
    which the runner's emulated image provides."""
    return {"kubeflow.output_dir": str(folder / "spec"), "kubeflow.input_base": str(data),
            "kubeflow.serving_dir": str(folder / "serving"), "kubeflow.pipeline_root": None,
            "kubeflow.schema_file": None,
            "kubeflow.image": "tfx-pipeline-template:test", "kubeflow.endpoint": None}


UNSEEN_VALUE = "never-seen-value"


def add_changed_span(data: Path, span: str, column: str, change,
                     source: Optional[Path] = None) -> Path:
    """A new dated span folder under data holding source's rows (default: the newest span's
    file) with change(cells) applied to column's cells; returns its data file."""
    import csv
    import io

    if source is None:
        [source] = span_files(newest_span(data))
    rows = list(csv.reader(io.StringIO(source.read_text())))
    at = rows[0].index(column)
    new = change([row[at] for row in rows[1:]])
    for row, cell in zip(rows[1:], new, strict=True):
        row[at] = cell
    (data / span).mkdir(parents=True)
    path = data / span / source.name
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    path.write_text(out.getvalue())
    return path


def anomalous_feature() -> str:
    """The categorical feature add_anomalous_span spoils: the config's first."""
    return example_config().features.categorical[0]


def add_anomalous_span(data: Path, span: str, source: Optional[Path] = None) -> Path:
    """A new dated span (source's rows, default the newest span's) whose first categorical
    feature holds a value the schema does not know: ExampleValidator reports
    ENUM_TYPE_UNEXPECTED_STRING_VALUES and the anomaly gate stops the run."""
    return add_changed_span(data, span, anomalous_feature(),
                            lambda cells: [UNSEEN_VALUE] * len(cells), source)


def drifted_feature() -> str:
    """The numeric feature add_drifted_span moves: the config's last."""
    return example_config().features.numeric[-1]


def add_drifted_span(data: Path, span: str) -> Path:
    """A new dated span (the newest span's rows) whose drifted_feature() moves up: each present
    value becomes one from the top quarter of the span's own values, so it stays inside the
    schema's range (the validation gate passes) while its distribution drifts; every other
    feature stays as it was."""
    markers = set(example_config().data.null_markers)

    def heavier(cells):
        present = sorted(float(c) for c in cells if c not in markers)
        top = present[len(present) * 3 // 4:]
        return [c if c in markers else f"{top[i % len(top)]:g}" for i, c in enumerate(cells)]

    return add_changed_span(data, span, drifted_feature(), heavier)


def without_entrypoint(spec: dict) -> dict:
    """The adapted spec with TFX's own entrypoints back (the fix undone): the negative control
    for pipeline/kubeflow/step/entrypoint.py."""
    import copy

    spec = copy.deepcopy(spec)
    for executor in spec["deploymentSpec"]["executors"].values():
        command = executor.get("container", {}).get("command", [])
        if command[:3] == ["python", "-m", "pipeline.kubeflow.step.entrypoint"]:
            executor["container"]["command"] = ["python", "-m", command[-1]]
    return spec


def without_output_handling(spec: dict, executor: str) -> dict:
    """The adapted spec with one executor's command compiled without
    --declared_output_artifacts: our entrypoint then hands TFX every output the backend gives
    the step, as TFX's own does (the negative control for the set-aside of executor-logs)."""
    import copy

    from pipeline.kubeflow.step.entrypoint import DECLARED_OUTPUTS_FLAG

    spec = copy.deepcopy(spec)
    container = spec["deploymentSpec"]["executors"][executor]["container"]
    at = container["command"].index(DECLARED_OUTPUTS_FLAG)
    del container["command"][at:at + 2]
    return spec


def kubernetes_validate_objects(objects: list, folder: Path) -> subprocess.CompletedProcess:
    """kubernetes_validate on objects, each written as its own YAML file under folder."""
    paths = []
    for i, obj in enumerate(objects):
        path = folder / f"{i}-{obj['kind'].lower()}.yaml"
        path.write_text(dump_yaml(obj))
        paths.append(path)
    return kubernetes_validate(paths)


def compile_for_local_backend(folder: Path, changes: Optional[dict] = None) -> tuple:
    """(the config file, the data folder, the spec path): the bundled night (with changes)
    compiled for the local KFP backend (kubeflow_local_changes) by a real `pipeline.run --runner
    kubeflow`."""
    from core.config import load_config

    data = copy_spans(folder)
    config = write_config(folder, {**kubeflow_local_changes(folder, data), **(changes or {})},
                          data_dir=data)
    result = run_cli("pipeline.run", "--runner", "kubeflow", "--config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    return config, data, folder / "spec" / f"{load_config(config).pipeline_name}.yaml"


# Oldest Kubernetes the manifests must work on; schemas ship with kubernetes-validate.
KUBERNETES_VERSION = "1.30.0"


def kubernetes_validate(paths: list, version: str = KUBERNETES_VERSION
                        ) -> subprocess.CompletedProcess:
    """`kubernetes-validate --strict --kubernetes-version <version> <paths>`, run in this process:
    the command's own `main` (kubernetes_validate/__main__.py) with that command line, its output
    and exit status, without paying its ~2 s import (jsonschema's format checkers) at every call.
    A missing package fails the test with where it comes from."""
    import contextlib
    import io
    from unittest import mock

    try:
        from kubernetes_validate.__main__ import main
    except ImportError as error:
        import pytest

        pytest.fail(f"kubernetes-validate is not installed ({error}): run scripts/setup_env.sh "
                    "(the venv brings it)")
    argv = ["kubernetes-validate", "--strict", "--kubernetes-version", version, *map(str, paths)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), mock.patch.object(sys, "argv", argv):
        try:
            returncode = main()
        except SystemExit as stop:  # an unreadable or unparsable file: the command exits 1
            print(stop.code)
            returncode = 1
    return subprocess.CompletedProcess(argv, returncode, out.getvalue(), "")
