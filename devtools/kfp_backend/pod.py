"""Where a task's container runs here, as the kubelet would run it: from the image emulated by
devtools.local_image (its Python, its ENV, its WORKDIR mounted at its own path), with the pod's
own /tmp/kfp and /tmp/kfp_outputs, in a private mount namespace (`unshare --mount`, root only;
without it the WORKDIR path in the command line is rewritten to the copy, and tasks run one at
a time). With prefork, each `python -m` step is a fork of one interpreter that imported the
image's libraries (devtools/prefork.py says what that changes)."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from devtools.kfp_backend.usage import Usage, wait_measured
from devtools.prefork import LIBRARIES

# --prefork: what a step's TFX entrypoint imports (pipeline/kubeflow/step/entrypoint.py), once: the
# project's libraries (devtools/prefork.py LIBRARIES), then TFX's container entrypoint.
STEP_PRELOAD = LIBRARIES + ("tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",)

# A pod's mounts: its /tmp/kfp folders, the image's WORKDIR read-only at its path (the image's
# USER cannot write there either). If the WORKDIR's parent lacks the mount point, a tmpfs over
# the parent gets the parent's entries bound back plus the mount point.
_MOUNT_SETUP = """set -e
for d in kfp kfp_outputs; do mkdir -p /tmp/$d {pod}/tmp/$d; mount --bind {pod}/tmp/$d /tmp/$d; done
wd={workdir}
if [ ! -d "$wd" ]; then
  parent=$(dirname "$wd"); keep={pod}/host-parent
  mkdir -p "$keep"; mount --rbind "$parent" "$keep"; mount -t tmpfs pod "$parent"
  for e in "$keep"/* "$keep"/.[!.]*; do
    [ -e "$e" ] || continue; n=$(basename "$e")
    if [ -d "$e" ]; then mkdir "$parent/$n"; else touch "$parent/$n"; fi
    mount --rbind "$e" "$parent/$n"
  done
  mkdir "$wd"
fi
mount --bind {copy} "$wd"; mount -o remount,bind,ro "$wd"
"""


class Pod:
    def __init__(self, image: Path | None, timeout_s: int = 3600, prefork: bool | str = False,
                 prefork_preload: tuple = STEP_PRELOAD):
        self.image = json.loads((Path(image) / "image.json").read_text()) if image else None
        self.mount_namespace = self.image is not None and can_unshare()
        self.timeout_s = timeout_s
        self.prefork, self.prefork_preload = prefork, prefork_preload
        self._server = None

    def start(self, state: Path) -> None:
        """--prefork: a server that imports the step's libraries once (step_server), or the
        running one --prefork-socket names."""
        from devtools.prefork import PreforkClient

        if isinstance(self.prefork, str):
            self._server = PreforkClient(self.prefork)
        elif self.prefork:
            self._server = step_server(self.image, state, self.prefork_preload)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def image_env(self) -> dict[str, str]:
        """The image's ENV lines."""
        return dict(self.image["env"]) if self.image else {}

    def run(self, argv: list[str], work: Path, env: dict[str, str], log: Path) -> int:
        """argv in the pod (work: its folder on this machine), stdout and stderr to log."""
        return self.run_measured(argv, work, env, log)[0]

    def run_measured(self, argv: list[str], work: Path, env: dict[str, str],
                     log: Path) -> tuple[int, Usage | None]:
        """As run, with what the step used (None for a forked step: its server's children are
        not ours to wait for)."""
        env = {**base_env(self.image), "HOME": str(work / "home"), **env}
        for folder in ("kfp_outputs", "kfp/outputs"):
            (work / "tmp" / folder).mkdir(parents=True, exist_ok=True)
        if self._server is not None and argv[:2] == ["python", "-m"] and len(argv) > 2:
            return self._forked(argv, work, env, log), None
        argv, cwd = self.wrapped(argv, work)
        with open(log, "w") as out:
            process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                       stderr=subprocess.STDOUT)
        return wait_measured(process, self.timeout_s)

    def wrapped(self, argv: list[str], work: Path) -> tuple[list[str], Path]:
        """The command wrapped so it sees the pod's /tmp/kfp* folders and the image's
        WORKDIR at their paths, in a private mount namespace."""
        argv, cwd, mounts = self._mounts(argv, work)
        if mounts is None:
            return argv, cwd
        return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                mounts + 'cd "$wd"\nexec "$@"\n', "pod", *argv], work

    def _mounts(self, argv: list[str], work: Path) -> tuple[list[str], Path, str | None]:
        """(argv, folder, the /bin/sh script that makes the pod's mounts or None): without a
        mount namespace the WORKDIR path in argv is rewritten to the copy instead."""
        if self.image is None:
            return argv, work, None
        workdir, copy = self.image["workdir"], self.image["workdir_copy"]
        if not self.mount_namespace:
            return [a.replace(workdir, copy) for a in argv], Path(copy), None
        return argv, Path(workdir), _MOUNT_SETUP.format(
            workdir=shlex.quote(workdir), copy=shlex.quote(copy), pod=shlex.quote(str(work)))

    def _forked(self, argv: list[str], work: Path, env: dict[str, str], log: Path) -> int:
        """`python -m MODULE ARGS` as a fork of the prefork server, in the pod's mount
        namespace and folder as wrapped() sets them up (`unshare --propagation private` is
        `mount --make-rprivate /` after unshare)."""
        argv, cwd, mounts = self._mounts(argv, work)
        log.write_text("")
        return self._server.run(
            argv[2], argv[3:], env=env, cwd=str(cwd), stdout=str(log), timeout=self.timeout_s,
            setup=None if mounts is None else "set -e; mount --make-rprivate /\n" + mounts,
            mount_namespace=mounts is not None)


def step_server(image: dict | None, folder: Path, preload=STEP_PRELOAD):
    """A prefork server for steps (devtools/prefork.py): the image's Python (None: this one)
    with the image's ENV, the step's libraries imported once. Several runs can share one
    (--prefork-socket)."""
    from devtools.prefork import PreforkServer

    env = {**base_env(image), **(image["env"] if image else {})}
    Path(folder).mkdir(parents=True, exist_ok=True)
    return PreforkServer(str(Path(_python_bin(image)) / "python"), preload, env=env,
                         cwd=str(folder))


def base_env(image: dict | None) -> dict[str, str]:
    """What every pod's environment starts with: PATH with the image's Python first, LANG."""
    return {"PATH": f"{_python_bin(image)}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _python_bin(image: dict | None) -> str:
    """The folder of the image's Python (no image: this one's)."""
    return image["python_bin"] if image else str(Path(sys.executable).parent)


def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              check=False, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
