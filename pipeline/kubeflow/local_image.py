"""The step image, emulated here from deploy/kubeflow/Dockerfile, for the conformance runner.

    python -m pipeline.kubeflow.local_image OUT [--dockerfile deploy/kubeflow/Dockerfile]

There is no Docker engine here, so the image is rebuilt from what its Dockerfile says:
- the project is installed from a wheel built from the checkout (as `uv pip install --no-deps .`
  does in the image), into a virtual environment of its own: OUT/venv. That environment sees the
  lock's packages (this environment's site-packages, with their .pth files) but not this
  checkout's editable install, so a module the wheel leaves out cannot be imported from OUT/venv.
- the WORKDIR (/opt/pipeline) holds exactly what the Dockerfile's COPY lines copy into it:
  OUT/workdir. The runner mounts it at the WORKDIR's path for each step (conformance.py).
- ENV lines become the steps' environment (OUT/image.json).
What differs from the image: the lock's packages are this machine's (same lock, same versions),
and the base image's Python is this machine's Python 3.10.
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "kubeflow" / "Dockerfile"


class ImageError(RuntimeError):
    """The Dockerfile or the project cannot be turned into the emulated image."""


def parse_dockerfile(text: str) -> tuple[str, dict[str, str], list[tuple[str, str]]]:
    """(WORKDIR, ENV, [(source, destination)] of the COPY lines after the WORKDIR)."""
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            lines.append(current.strip())
            current = ""
    workdir, env, copies = None, {}, []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "WORKDIR":
            workdir = rest.strip()
        elif instruction == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
        elif instruction == "COPY" and workdir is not None:
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            *sources, destination = parts
            copies += [(source, destination) for source in sources]
    if workdir is None:
        raise ImageError("the Dockerfile has no WORKDIR: the steps' working folder is unknown")
    return workdir, env, copies


def build(out: Path, dockerfile: Path = DOCKERFILE, context: Path = REPO) -> Path:
    """Builds the emulated image in out (replacing it) and returns out."""
    workdir, env, copies = parse_dockerfile(Path(dockerfile).read_text())
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # The build sees only what the Dockerfile copies in (and no stale build/ folder).
    build_context = out / "context"
    for source, _ in copies:
        _copy(context / source.rstrip("/"), build_context / source.rstrip("/"), dockerfile)
    wheels = out / "wheels"
    _check(subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(wheels), str(build_context)],
                          check=False, capture_output=True, text=True, cwd=out),
           "build the project's wheel")
    venv = out / "venv"
    _check(subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                          check=False, capture_output=True, text=True), "create the image's venv")
    site = _site_packages(venv)
    lock = Path(_site_packages_of(sys.executable))
    # The lock's packages as a plain path, with their .pth files processed, except the
    # editable install's: so the project imports from the wheel only.
    p = repr(str(lock))  # a literal: a .pth line runs in exec(), where lambdas see no locals
    (site / "_lock_site_packages.pth").write_text(
        f"import sys; sys.path.append({p}); list(map(lambda n: __import__('site').addpackage("
        f"{p}, n, None), filter(lambda n: n.endswith('.pth') and not n.startswith("
        f"'__editable__'), sorted(__import__('os').listdir({p})))))\n")
    [wheel] = wheels.glob("*.whl")
    _check(subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          check=False, capture_output=True, text=True), "install the wheel")
    image_workdir = out / "workdir"
    image_workdir.mkdir()
    for source, destination in copies:
        if source in ("pyproject.toml", "README.md", "requirements.lock"):
            continue  # build inputs, not read by the steps
        src = context / source.rstrip("/")
        target = image_workdir / destination  # Docker: a folder's contents go into destination
        if src.is_file() and (destination.endswith("/") or destination in (".", "./")):
            target = target / src.name
        _copy(src, target, dockerfile)
    (out / "image.json").write_text(json.dumps(
        {"workdir": workdir, "env": {k: v for k, v in env.items() if k not in ("PATH",
                                                                              "VIRTUAL_ENV")},
         "python_bin": str(venv / "bin"), "workdir_copy": str(image_workdir)}, indent=1))
    return out


def _copy(src: Path, dst: Path, dockerfile: Path) -> None:
    if not src.exists():
        raise ImageError(f"{dockerfile}: COPY {src.name}: no such path in the build context")
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _site_packages(venv: Path) -> Path:
    return Path(_site_packages_of(str(venv / "bin" / "python")))


def _site_packages_of(python: str) -> str:
    return subprocess.run([python, "-c", ("import sysconfig; "
                                          "print(sysconfig.get_paths()['purelib'])")],
                          capture_output=True, text=True, check=True).stdout.strip()


def _check(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode != 0:
        raise ImageError(f"could not {what}:\n{result.stdout}{result.stderr}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.local_image",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="folder for the emulated image (replaced)")
    parser.add_argument("--dockerfile", type=Path, default=DOCKERFILE)
    parser.add_argument("--context", type=Path, default=REPO)
    args = parser.parse_args(argv)
    try:
        build(args.out, args.dockerfile, args.context)
    except ImageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Image emulated in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
