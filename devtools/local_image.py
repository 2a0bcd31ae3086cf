"""The step image, emulated here from deploy/kubeflow/Dockerfile, for the local KFP backend.

    python -m devtools.local_image OUT [--dockerfile deploy/kubeflow/Dockerfile]

There is no Docker engine here, so the image is rebuilt from what its Dockerfile says:
- the project is installed from a wheel built from the checkout (as `uv pip install --no-deps .`
  does in the image), into a virtual environment of its own: OUT/venv. That environment sees the
  lock's packages (this environment's site-packages, with their .pth files) but not this
  checkout's editable install, so a module the wheel leaves out cannot be imported from OUT/venv.
- the WORKDIR (/opt/pipeline) holds exactly what the Dockerfile's COPY lines copy into it:
  OUT/workdir. The runner mounts it at the WORKDIR's path for each step
  (devtools/kfp_backend/pod.py).
- ENV lines become the steps' environment (OUT/image.json).
- the image installs the runtime lock its Dockerfile copies in (requirements-image.lock): the
  development environment's versions without its dev extras. Packages of this environment that
  lock does not pin (pytest, moto, kubernetes-validate, ...) cannot be imported in OUT/venv
  (`_image_packages.py`), so a step that needs one fails here as it would in the pod, and a step
  that would import one only if present (the kubernetes client imports kubernetes-validate)
  starts as fast as it does there.
What differs from the image: the packages are this machine's (same versions), and the base
image's Python is this machine's Python 3.10.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
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


def installed_lock(text: str) -> str:
    """The lock file (its path in the build context) that the Dockerfile installs with
    `-r <where it copied it>`."""
    copied = dict((dest, src) for src, dest in re.findall(r"^COPY\s+(\S+\.lock)\s+(\S+)\s*$",
                                                          text, re.M))
    installed = [copied[path] for path in re.findall(r"\s-r\s+(\S+)", text) if path in copied]
    if len(installed) != 1:
        raise ImageError("the Dockerfile must COPY one lock file and install it with "
                         f"`-r <its path>`; found {installed or 'none'}")
    return installed[0]


def pinned(lock_text: str) -> set:
    """Normalized names of the distributions a uv/pip lock pins."""
    names = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", lock_text, re.M)
    return {canonicalize_name(name) for name in names}


def modules_not_in(lock_text: str, project: str, site_packages: str) -> list:
    """Top-level modules installed in site_packages (this environment's, which the emulated
    image sees) that only distributions the lock leaves out provide: the image's Python cannot
    import them. The project's own come from its wheel. Only that folder's distributions count:
    a process that imported setuptools also sees its vendored ones (setuptools/_vendor), which
    setuptools finds by itself in the image too."""
    # `python -m venv` seeds pip and setuptools (and TFX pip-installs user-code wheels).
    keep = pinned(lock_text) | {canonicalize_name(project), "pip", "setuptools"}
    providers: dict = {}
    for dist in importlib.metadata.distributions(path=[site_packages]):
        for module in _top_level_modules(dist):
            providers.setdefault(module, set()).add(canonicalize_name(dist.metadata["Name"]))
    return sorted(module for module, names in providers.items() if not keep & names)


def _top_level_modules(dist) -> set:
    """What a distribution's RECORD installs at the top of site-packages: packages and modules
    (Python 3.10's packages_distributions reads top_level.txt only, which uv does not write)."""
    modules = set()
    for path in dist.files or []:
        top = path.parts[0]
        if top in ("..", "__pycache__") or top.endswith((".dist-info", ".data", ".pth")):
            continue
        name = top if len(path.parts) > 1 else top.split(".")[0]
        if name.isidentifier():
            modules.add(name)
    return modules


IMAGE_PACKAGES = """\
\"\"\"Written by devtools.local_image: the modules the image's lock does not install.\"\"\"
import sys

HIDDEN = frozenset({hidden!r})


class NotInImage:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(
                f"No module named {{name!r}} (not in the image: {lock} does not pin it)", name=name)
        return None


sys.meta_path.insert(0, NotInImage())
"""


def build(out: Path, dockerfile: Path = DOCKERFILE, context: Path = REPO) -> Path:
    """Builds the emulated image in out (replacing it) and returns out."""
    text = Path(dockerfile).read_text()
    workdir, env, copies = parse_dockerfile(text)
    lock_file = installed_lock(text)
    if not (context / lock_file).is_file():
        raise ImageError(f"{dockerfile}: COPY {lock_file}: no such file in the build context")
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
    (site / "_image_packages.py").write_text(IMAGE_PACKAGES.format(
        hidden=modules_not_in((context / lock_file).read_text(), _project_name(build_context),
                              str(lock)), lock=lock_file))
    (site / "_image_packages.pth").write_text("import _image_packages\n")
    [wheel] = wheels.glob("*.whl")
    _check(subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                           "install", "-q", "--no-deps", "--no-index", str(wheel)],
                          check=False, capture_output=True, text=True), "install the wheel")
    image_workdir = out / "workdir"
    image_workdir.mkdir()
    for source, destination in copies:
        if source in ("pyproject.toml", "README.md") or source.endswith(".lock"):
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


def _project_name(build_context: Path) -> str:
    found = re.search(r'^name\s*=\s*"([^"]+)"', (build_context / "pyproject.toml").read_text(),
                      re.M)
    if not found:
        raise ImageError("pyproject.toml names no project")
    return found.group(1)


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
    parser = argparse.ArgumentParser(prog="python -m devtools.local_image",
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
