"""Start-up of the Kubeflow steps, each a fresh process in the step image's environment, as a
pod runs it: start to the executor's Do, Do, Do to exit; beside `python -c pass` and
`python -c 'import tensorflow'` in the same environment and the same run.

    .venv/bin/python -m bench.step_startup [--repeat N] [--context DIR] [--keep DIR]

1. The image is emulated from DIR's deploy/kubeflow/Dockerfile (devtools/local_image.py: its
   wheel, its ENV, its WORKDIR; default: this checkout) and DIR compiles the bundled config's
   spec for it (`python -m pipeline.run --runner kubeflow`, run in DIR), so an older checkout
   can be measured the same way (--context /path/to/other/worktree).
2. A cold night: every task of the spec through the local KFP backend (2.17.0,
   devtools/kfp_backend), each a fresh interpreter started through devtools/step_probe.py,
   which records when the executor's Do starts and ends. Its start-up overhead is the sum over
   the tasks of (start to Do) + (Do to exit); the ExampleGen driver task, which has no
   executor, counts whole.
3. --repeat rounds of fresh processes: `python -c pass`, then for each light step (in a
   rotating order) `python -c 'import tensorflow'` and right after it the step's own command
   again (the night's ExecutorInput, its outputs at new URIs). Medians; each step's start-up
   (start to Do, wall, and the process's CPU by then) as a ratio to the `import tensorflow` run
   just before it (start to the import's end), then the median of those ratios: pairs, so that
   the ratio holds while the load drifts.
Goal (issue 32): light steps start in at most 1.3x `import tensorflow`. Figures in
deploy/kubeflow/README.md. About 10 minutes on 2 shared cores (the night is most of it).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from devtools.step_probe import heavy_imports  # noqa: E402  (the checkout's, run from anywhere)
from bench.scratch import keep_or_remove, scratch_folder  # noqa: E402

PROBE = REPO / "devtools" / "step_probe.py"
LIGHT = ("ImportSchemaGen", "AnomalyGate", "DriftGate", "SkewGate", "ServingBaseline", "Pusher",
         "RunReport")
# `import tensorflow` prints when its import is done (wall and CPU), the yardstick of a step's
# start to Do: its exit (TensorFlow's teardown at interpreter exit, which a step skips through
# os._exit) is in its total only.
IMPORTED = "imported-at"
BASELINES = {"python -c pass": ["python", "-c", "pass"],
             "import tensorflow": ["python", "-c", "import time, tensorflow; print("
                                   f"'{IMPORTED}', time.time(), time.process_time())"]}
INVOCATION_FLAG = "--json_serialized_invocation_args"


def prepare(scratch: Path, context: Path) -> tuple[Path, Path]:
    """(the emulated image, the compiled spec) from context."""
    from devtools.local_image import build
    from tests.helpers import copy_spans, kubeflow_local_changes, write_config

    image = build(scratch / "image", context / "deploy" / "kubeflow" / "Dockerfile", context)
    folder = scratch / "night"
    folder.mkdir()
    data = copy_spans(folder)
    config = write_config(folder, kubeflow_local_changes(folder, data), data_dir=data)
    # The schema is the context's own (the compiler refuses one outside the project it builds).
    config.write_text(config.read_text().replace(str(REPO), str(context)))
    compiled = subprocess.run([sys.executable, "-m", "pipeline.run", "--runner", "kubeflow",
                               "--config", str(config)], cwd=context, capture_output=True,
                              text=True, check=False)
    if compiled.returncode != 0:
        sys.exit(f"error: compiling the spec in {context} failed:\n{compiled.stderr[-3000:]}")
    [spec] = (folder / "spec").glob("*.yaml")
    return image, spec


class Step:
    """One fresh process: its phases in seconds (None where it ran no executor)."""

    def __init__(self, code: int, total: float, record: dict | None, started: float,
                 cpu: float = 0.0):
        self.fields = {"code": code, "total": total, "record": record, "started": started,
                       "cpu": cpu}
        self.code, self.total, self.cpu = code, total, cpu  # cpu: the process's, in all
        self.to_do = self.do = self.after = self.cpu_to_do = None
        if record:
            self.cpu_to_do = record.get("cpu_at_do")
            self.to_do = record["do_start"] - started
            self.do = record["do_end"] - record["do_start"]
            self.after = started + total - record["do_end"]
        self.imported = set(record["imported_at_do"]) if record else set()

    @property
    def overhead(self) -> float:
        return self.total if self.to_do is None else self.to_do + self.after


def run_probed(pod, argv: list[str], work: Path, env: dict, log: Path) -> Step:
    """argv (a pod's command) fresh in the pod, a `python -m` step through the probe."""
    record = work / "probe.json"
    record.unlink(missing_ok=True)
    if argv[:2] == ["python", "-m"]:
        argv = ["python", str(PROBE), str(record), *argv[2:]]
    cpu = _children_cpu()
    started = time.time()
    code = pod.run(argv, work, env, log)
    total = time.time() - started
    return Step(code, total, json.loads(record.read_text()) if record.exists() else None,
                started, _children_cpu() - cpu)


def _children_cpu() -> float:
    """User + system seconds of the waited-for children (the pod's command execs into the
    step's Python: unshare and sh -c 'exec')."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class ProbedPod:
    """The runner's Pod, each task started through the probe; keeps each task's command."""

    def __init__(self, pod):
        self.pod, self.commands, self.night = pod, {}, {}

    def __getattr__(self, name):
        return getattr(self.pod, name)

    def run(self, argv, work, env, log):
        name = Path(log).stem
        self.commands[name] = (list(argv), Path(work), dict(env))
        self.night[name] = run_probed(self.pod, argv, Path(work), env, Path(log))
        print(f"    {name}: {self.night[name].total:.1f} s", flush=True)
        return self.night[name].code


def cold_night(image: Path, spec_path: Path, scratch: Path) -> ProbedPod:
    """The night run (or, in a --keep folder that has one, the one it recorded)."""
    import yaml

    from devtools.kfp_backend import Runner
    from devtools.kfp_backend.pod import Pod

    saved = scratch / "night.json"
    if saved.exists():
        recorded = json.loads(saved.read_text())
        probed = ProbedPod(Pod(image))
        probed.commands = {n: (a, Path(w), e) for n, (a, w, e) in recorded["commands"].items()}
        probed.night = {n: Step(**fields) for n, fields in recorded["night"].items()}
        print(f"The cold night recorded in {saved}", flush=True)
        return probed

    spec = yaml.safe_load(spec_path.read_text())
    runner = Runner(spec, str(scratch / "root"), scratch / "state", image=image,
                    version="2.17.0", echo=lambda *_: None)
    probed = ProbedPod(runner.pod)
    runner.pod = runner.launcher.pod = probed
    print("A cold night, every task a fresh process:", flush=True)
    runner.run(parallelism=1)  # one at a time: each pod has its node's cores to itself
    saved.write_text(json.dumps({
        "commands": {n: [a, str(w), e] for n, (a, w, e) in probed.commands.items()},
        "night": {n: step.fields for n, step in probed.night.items()}}))
    return probed


def rerun_step(probed: ProbedPod, name: str) -> Step:
    """The night's command for task `name` again, fresh, its outputs at new URIs in KFP's
    layout, <task root>/<a new uuid>/<key> (an executor refuses to overwrite; the run report
    reads the run id from it), and no ExecutorOutput file yet (TFX's entrypoint would read one
    as a driver's output)."""
    from devtools.kfp_backend.launcher import _host_path

    argv, work, env = probed.commands[name]
    argv = list(argv)
    at = argv.index(INVOCATION_FLAG) + 1
    invocation = json.loads(argv[at])
    for listed in invocation["outputs"]["artifacts"].values():
        for artifact in listed["artifacts"]:
            folder, key = artifact["uri"].rsplit("/", 1)
            artifact["uri"] = f"{folder.rsplit('/', 1)[0]}/{uuid.uuid4()}/{key}"
            Path(artifact["uri"]).parent.mkdir(parents=True, exist_ok=True)
    argv[at] = json.dumps(invocation)
    _host_path(invocation["outputs"]["outputFile"], work).unlink(missing_ok=True)
    log = work / f"rerun-{name}.log"
    step = run_probed(probed.pod, argv, work, env, log)
    if step.code != 0:
        sys.exit(f"error: {name} failed when run again (log: {log})")
    return step


def rounds(probed: ProbedPod, repeat: int, scratch: Path) -> dict[str, list]:
    """{name: [Step, ...]}; a light step's entries are (its Step, the `import tensorflow` Step
    run just before it): pairs, so that the ratio holds while the machine's load drifts."""
    found: dict[str, list] = {}
    work = scratch / "baseline"
    work.mkdir(exist_ok=True)

    def baseline(name: str) -> Step:
        log = work / "baseline.log"
        step = run_probed(probed.pod, BASELINES[name], work, probed.pod.image_env(), log)
        for line in log.read_text().splitlines():
            if line.startswith(IMPORTED):  # the import's end: as a step's start to Do
                wall, cpu = map(float, line.split()[1:])
                step.to_do, step.cpu_to_do = wall - step.fields["started"], cpu
        return step

    for index in range(repeat):
        found.setdefault("python -c pass", []).append(baseline("python -c pass"))
        order = LIGHT[index % len(LIGHT):] + LIGHT[:index % len(LIGHT)]
        for name in order:
            tf = baseline("import tensorflow")
            found.setdefault("import tensorflow", []).append(tf)
            found.setdefault(name, []).append((rerun_step(probed, name), tf))
        print(f"  round {index + 1}/{repeat}: " + ", ".join(
            f"{n} {found[n][-1][0].to_do:.2f}/{found[n][-1][1].to_do:.2f}" for n in LIGHT),
              flush=True)
    return found


def table(found: dict[str, list], night: dict[str, Step]) -> str:
    median = statistics.median
    lines = [f"{'process':<18} {'start→Do':>9} {'Do':>6} {'Do→exit':>8} {'total':>6} "
             f"{'start/tf':>9} {'CPU→Do':>7} {'CPU/tf':>7}  imported at Do"]
    steps = found["python -c pass"]
    lines.append(f"{'python -c pass':<18} {'':>9} {'':>6} {'':>8} "
                 f"{median(s.total for s in steps):6.2f} {'':>9} "
                 f"{median(s.cpu for s in steps):7.2f}")
    steps = found["import tensorflow"]
    lines.append(f"{'import tensorflow':<18} {median(s.to_do for s in steps):9.2f} {'':>6} "
                 f"{'':>8} {median(s.total for s in steps):6.2f} {'':>9} "
                 f"{median(s.cpu_to_do for s in steps):7.2f}  (start→Do, CPU→Do: to the import's "
                 "end)")
    for name in LIGHT:
        pairs = found[name]
        steps = [step for step, _ in pairs]
        heavy = heavy_imports(set.union(*(s.imported for s in steps)))
        lines.append(
            f"{name:<18} {median(s.to_do for s in steps):9.2f} {median(s.do for s in steps):6.2f} "
            f"{median(s.after for s in steps):8.2f} {median(s.total for s in steps):6.2f} "
            f"{median(s.to_do / tf.to_do for s, tf in pairs):8.2f}x "
            f"{median(s.cpu_to_do for s in steps):7.2f} "
            f"{median(s.cpu_to_do / tf.cpu_to_do for s, tf in pairs):6.2f}x  "
            f"{', '.join(heavy) or '-'}")
    tf_wall = median(t.to_do for t in found["import tensorflow"])
    tf_cpu = median(t.cpu_to_do for t in found["import tensorflow"])
    overhead = sum(step.overhead for step in night.values())
    cpu_overhead = sum(s.cpu if s.to_do is None else s.cpu_to_do or 0 for s in night.values())
    lines += ["", f"{'night task':<22} {'start→Do':>9} {'Do':>7} {'Do→exit':>8} {'total':>7} "
              f"{'CPU→Do':>7}"]
    for name, step in sorted(night.items()):
        lines.append(f"{name:<22} " + (
            f"{step.to_do:9.2f} {step.do:7.2f} {step.after:8.2f} {step.total:7.2f} "
            f"{step.cpu_to_do or 0:7.2f}" if step.to_do is not None else
            f"{'(no executor: all of it)':>26} {step.total:7.2f} {step.cpu:7.2f}"))
    lines.append(f"cold night: {len(night)} tasks, start-up overhead {overhead:.1f} s wall = "
                 f"{overhead / tf_wall:.1f} x `import tensorflow` ({tf_wall:.2f} s); CPU to Do "
                 f"{cpu_overhead:.1f} s = {cpu_overhead / tf_cpu:.1f} x ({tf_cpu:.2f} s); Do "
                 f"{sum(s.do or 0 for s in night.values()):.1f} s wall")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.step_startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--context", type=Path, default=REPO,
                        help="the checkout whose image and spec are measured (default: this)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it; one that "
                        "holds a night already: its rounds run again on that night")
    args = parser.parse_args(argv)
    os.environ.setdefault("_KFP_RUNTIME", "true")
    scratch = args.keep or scratch_folder("step_startup-")
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        print(f"load average {os.getloadavg()[0]:.1f}; context {args.context.resolve()}",
              flush=True)
        if (scratch / "night.json").exists():  # a --keep folder's night, measured again
            image, spec = scratch / "image", None
        else:
            image, spec = prepare(scratch, args.context.resolve())
        probed = cold_night(image, spec, scratch)
        found = rounds(probed, args.repeat, scratch)
        print(table(found, probed.night))
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        keep_or_remove(scratch, args.keep is not None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
