"""The recommender service's settings (configs/recommender_service.yaml), TF-free.

Kept apart from the pipeline config (core/config.py): nothing online changes what the pipeline
trains or caches, and the pipeline config stays the one source of the history's definition, which
this file only points at (`pipeline_config`).

    service = load_service_config("configs/recommender_service.yaml")
    service.history_spec()            # HistorySpec(length=10, keep='last', separator='|')
    service.history.ttl_s             # 2592000
"""
from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.click_history import HistorySpec
from core.config import ConfigError, load_config, read_mapping


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HistorySettings(_Section):
    ttl_s: int = Field(30 * 86400, ge=1)
    key_prefix: str = Field("history:", min_length=1)


class RedisSettings(_Section):
    url: str = Field("redis://127.0.0.1:6379/0", pattern=r"^rediss?://")


class ServiceConfig(_Section):
    pipeline_config: Path
    history: HistorySettings = HistorySettings()
    redis: RedisSettings = RedisSettings()

    def history_spec(self) -> HistorySpec:
        return HistorySpec.from_config(load_config(self.pipeline_config))


def load_service_config(path: Path | str) -> ServiceConfig:
    """Reads and validates the file; raises ConfigError naming the file and the key."""
    path = Path(path).resolve()
    raw = read_mapping(path, "service config")
    if isinstance(raw.get("pipeline_config"), str):
        raw["pipeline_config"] = str((path.parent / raw["pipeline_config"]).resolve())
    try:
        return ServiceConfig.model_validate(raw)
    except ValidationError as e:
        lines = [f"invalid service config {path}:"]
        for item in e.errors():
            key = ".".join(str(p) for p in item["loc"]) or "(top level)"
            message = ("unknown key (misspelt, or not supported here)"
                       if item["type"] == "extra_forbidden" else item["msg"])
            lines.append(f"  {key}: {message}")
        raise ConfigError("\n".join(lines)) from None
