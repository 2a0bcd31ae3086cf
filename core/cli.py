"""What the command lines share: the `--config` option and how a config that does not load ends.

A config that does not load (core.config.ConfigError: no such file, an unknown key, a value out
of range) ends the command before any work with its message on stderr and exit status 2, the
status argparse gives a bad command line: a script tells "fix the input" (2) from a failed run (1).
The pipeline's CLIs (pipeline/) and the service's (service/) both read this, so it lives in core/;
TF-free like the rest of core/.

    parser = argparse.ArgumentParser(...)
    add_config_argument(parser, help="pipeline config YAML")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return refuse(error)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.config import DEFAULT_CONFIG

# Exit status of a command whose config (or other input) is refused before it starts.
REFUSED = 2


def add_config_argument(parser: argparse.ArgumentParser, *, required: bool = False,
                        help: str | None = None) -> None:
    """`--config PATH`: the template's pipeline config (configs/pipeline.yaml) unless required,
    as for the service's CLIs, whose config is another file."""
    if required:
        parser.add_argument("--config", type=Path, required=True, help=help)
    else:
        parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help=help)


def refuse(error: BaseException, status: int = REFUSED, prefix: str = "error: ") -> int:
    """Writes `error` on stderr and returns the exit status for main to return."""
    print(f"{prefix}{error}", file=sys.stderr)
    return status
