"""`python -m devtools.kfp_backend SPEC.yaml ...`: runs a compiled spec here as an open-source KFP
release's backend runs it (devtools/kfp_backend/__init__.py says what is emulated). Exit
status: 0 the run succeeded, 1 a step failed, 2 refused."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from devtools import kfp_backend
from devtools.kfp_backend.driver import pipeline_root
from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.scheduler import Runner
from devtools.kfp_backend.spec import (load_spec, read_config_maps, read_launcher_config,
                                       read_secrets)
from devtools.kfp_backend.versions import NEWEST, TAGS

STATE_DIR = ".kfp_local"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m devtools.kfp_backend",
                                     description=kfp_backend.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path, help="compiled PipelineSpec YAML")
    parser.add_argument("--backend-version", choices=TAGS, default=NEWEST,
                        help=f"the open-source KFP release to emulate (default {NEWEST})")
    parser.add_argument("--pipeline-root", help="the run's pipeline root (runtime config)")
    parser.add_argument("--launcher-config", type=Path,
                        help="the namespace's kfp-launcher ConfigMap (YAML): its "
                             "defaultPipelineRoot and the providers the launcher opens the "
                             "bucket with (an s3:// root without providers.s3 gets AWS's S3)")
    parser.add_argument("--secrets", type=Path, help="YAML of Kubernetes Secret objects")
    parser.add_argument("--config-maps", type=Path,
                        help="YAML of Kubernetes ConfigMap objects (configMapAsEnv)")
    parser.add_argument("--image", type=Path,
                        help="the image emulated by `python -m devtools.local_image`")
    parser.add_argument("--state", type=Path,
                        help="ML Metadata, cache and pod folders (default: <root>/.kfp_local "
                             "for a local root; required otherwise)")
    parser.add_argument("--namespace", default="kubeflow", help="the cache's namespace")
    parser.add_argument("--until", help="run only this task and the tasks it needs")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment for every step")
    parser.add_argument("--no-cache", action="store_true", help="run every task")
    parser.add_argument("--prefork", action="store_true",
                        help="start each `python -m` step as a fork of a server that imported "
                             "the image's libraries once (devtools/prefork.py), not as a fresh "
                             "interpreter: ~11 s less CPU per step; for test suites")
    parser.add_argument("--prefork-socket", metavar="PATH",
                        help="as --prefork, with a server already running (started with "
                             "devtools.kfp_backend.step_server for the same image), shared "
                             "by runs")
    parser.add_argument("--parallelism", type=int, default=0, metavar="N",
                        help="at most N tasks at once (default 0: no limit, as the backend's "
                             "Argo Workflow)")
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    # The runner reads protos only (kfp.pipeline_spec); without this, kfp's __init__ imports
    # kfp.dsl and kfp.Client with the kubernetes client: ~4 s of CPU per run (kfp 2.5.0
    # kfp/__init__.py; KFP's own components run with it, kfp/dsl/component_factory.py). The
    # steps' environment is built from the image and the spec, not from this process's.
    os.environ.setdefault("_KFP_RUNTIME", "true")
    env = dict(item.split("=", 1) for item in args.env)
    try:
        spec, platform = load_spec(args.spec)
        config = read_launcher_config(args.launcher_config) if args.launcher_config else None
        root = pipeline_root(args.pipeline_root, config)
        if "://" not in root:
            root = str(Path(root).resolve())
        state = args.state or (Path(root) / STATE_DIR if "://" not in root else None)
        if state is None:
            raise SpecError(f"pipeline root {root} is remote: give --state DIR for this "
                            "runner's ML Metadata and cache")
        print(f"Running {args.spec} as open-source KFP {args.backend_version} would (pipeline "
              f"root {root})")
        runner = Runner(spec, root, state, platform,
                        read_secrets(args.secrets) if args.secrets else None,
                        read_config_maps(args.config_maps) if args.config_maps else None,
                        args.image, env, launcher_config=config, namespace=args.namespace,
                        cache=not args.no_cache, prefork=args.prefork_socket or args.prefork,
                        version=args.backend_version)
    except SpecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        result = runner.run(args.until, parallelism=args.parallelism)
    except SpecError as error:
        print(f"error: {error}\n  details:    {runner.record}", file=sys.stderr)
        return 2
    except (TaskFailed, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        print(f"Run failed\n  details:    {runner.record}")
        return 1
    print(f"Run {result.run_id} succeeded\n  ran:        {', '.join(result.names('ran')) or '-'}"
          f"\n  from cache: {', '.join(result.names('cached')) or '-'}\n  details:    "
          f"{runner.record}")
    return 0
