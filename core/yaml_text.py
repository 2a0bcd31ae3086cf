"""YAML text through libyaml where PyYAML was built with it (PyPI's wheels are): the same safe
types as yaml.safe_load / safe_dump, about ten times faster than the pure-Python parser, which
config loads and the local backend's spec reads feel. The one place that choice is made."""
from __future__ import annotations

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def load(text: str):
    """yaml.safe_load, through libyaml."""
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> list:
    """yaml.safe_load_all's documents, as a list, through libyaml."""
    return list(yaml.load_all(text, Loader=LOADER))


def dump(data, **options) -> str:
    """yaml.safe_dump, through libyaml."""
    return yaml.dump(data, Dumper=DUMPER, **options)
