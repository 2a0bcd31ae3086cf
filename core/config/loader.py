"""Reading a config file: paths relative to it, URIs refused for local runs, errors naming the
file and the key."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from core import yaml_text
from core.config.base import ConfigError
from core.config.runs import beam_flag
from core.config.pipeline import PipelineConfig


DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "pipeline.yaml"


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
