"""What every section of the config shares: its base model, its error, renamed keys."""
from __future__ import annotations

import warnings

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the key."""


def renamed_key(raw, section: str, old: str, new: str, why: str):
    """A key renamed to what it is today still loads for one release, with a FutureWarning naming
    the new one; both at once are refused."""
    if not isinstance(raw, dict) or old not in raw:
        return raw
    if new in raw:
        raise ValueError(f"set '{new}' only: '{old}' is its old name, and both are set")
    warnings.warn(f"{section}.{old} is renamed {section}.{new} ({why}); the old key is read "
                  "until the next release", FutureWarning, stacklevel=2)
    return {(new if key == old else key): value for key, value in raw.items()}


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Kubernetes object names (DNS-1123 subdomain) and Secret / ConfigMap keys.
K8S_NAME = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
K8S_KEY = r"^[-._a-zA-Z0-9]{1,253}$"
