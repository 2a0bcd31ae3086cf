"""`python -m pipeline.report [--config FILE] [--open]`: the newest run report's path."""
from __future__ import annotations

import argparse
import sys
import webbrowser

from core.cli import add_config_argument, refuse
from core.config import ConfigError, load_config
from pipeline.report import latest_report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.report", description=__doc__)
    add_config_argument(parser, help="pipeline config YAML")
    parser.add_argument("--open", action="store_true", help="open it in the default browser")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        return refuse(error)
    report = latest_report(config.runner.output_dir)
    if report is None:
        print(f"error: no run report under {config.runner.output_dir / 'reports'}; run the "
              "pipeline first (make run)", file=sys.stderr)
        return 1
    print(report)
    if args.open:
        webbrowser.open(report.as_uri())
    return 0


if __name__ == "__main__":
    sys.exit(main())
