"""The run: the Argo Workflow the backend compiles a spec to (compiler/argocompiler), walked here
task by task, each task its driver, its cache lookup and its launcher.

- Executors other than containers are refused (argocompiler/dag.go: "resolver executors not
  implemented", argocompiler/argo.go Resolver; importers the backend runs, this runner does not);
  `lifecycle.preCacheCheck` is never read (no code in the backend reads it; Vertex AI runs it).
- Each task starts as soon as every task it depends on succeeded, concurrently with the others
  (argocompiler/dag.go addImplicitDependencies adds each input's producer to dependentTasks;
  `depends` makes them `<task>.Succeeded`). No limit on how many run at once (argocompiler/argo.go
  sets no WorkflowSpec.parallelism; parallelism=N sets one, as a cluster's Argo config may).
- After a failure no task starts, the running ones finish, then the run fails: the DAG template
  sets no failFast, and Argo v3.4's default is true ("stop scheduling new steps ... waits until
  all DAG nodes are completed", DAGTemplate.FailFast).
- A DAG component (kfp's ExitHandler group: `comp-exit-handler-1`) is its tasks, started once
  the tasks the DAG task depends on succeeded (argocompiler/dag.go task: the DAG driver's
  `depends`); it failed when one of them did (spec.py dag_tasks).
- An exit task (triggerPolicy ALL_UPSTREAM_TASKS_COMPLETED) runs once every task it depends on
  ended, succeeded or failed, and after a failure too: argocompiler/dag.go DAG makes it the
  `exit` lifecycle hook of those tasks (common.go addExitTask), and Argo runs a task's exit hook
  whatever its phase (argo-workflows workflow/controller, dag executeDAGTask -> runOnExitNode,
  v3.5.14 and v4.0.5). Without the strategy it is an ordinary task, not run after a failure.
  Its TASK_FINAL_STATUS input (2.14.0+, versions.py task_final_status) is its first upstream
  task's state (driver/resolve.go resolveInputParameter); before 2.14.0 such a spec is refused.
"""
from __future__ import annotations

import dataclasses
import subprocess
import time
import uuid
from concurrent import futures
from pathlib import Path

from devtools.kfp_backend import driver
from devtools.kfp_backend.cache import Cache, fingerprint
from devtools.kfp_backend.errors import SpecError, TaskFailed
from devtools.kfp_backend.launcher import Launcher, local_path
from devtools.kfp_backend.metadata import Metadata, write_run_record
from devtools.kfp_backend.objectstore import ObjectStore, split_uri
from devtools.kfp_backend.pod import STEP_PRELOAD, Pod
from devtools.kfp_backend.resources import describe, pod_resources
from devtools.kfp_backend.spec import dag_tasks, is_exit_task, refuse_placeholder_paths
from devtools.kfp_backend.versions import NEWEST, backend

TASK_KEYS = {"taskInfo", "componentRef", "inputs", "dependentTasks", "cachingOptions",
             "triggerPolicy"}
# ML Metadata's Execution.State names, as the driver reads a DAG's (driver/resolve.go).
COMPLETE, FAILED = "COMPLETE", "FAILED"


@dataclasses.dataclass
class TaskResult:
    name: str
    status: str  # "ran" or "cached"
    seconds: float
    artifacts: dict[str, dict]  # output key -> RuntimeArtifact as MLMD gives it back
    parameters: dict[str, object]
    execution_id: int
    log: Path | None = None
    # What the step's process used (usage.py; None from the cache or a forked step).
    peak_rss_mib: float | None = None
    cpu_seconds: float | None = None


@dataclasses.dataclass
class RunResult:
    run_id: str
    tasks: dict[str, TaskResult]

    def names(self, status: str) -> list[str]:
        return [n for n, t in self.tasks.items() if t.status == status]


def task_needs(tasks: dict[str, dict], until: str | None = None) -> dict[str, set]:
    """Each task's upstream tasks: dependentTasks plus each input's producer (argocompiler/
    dag.go addImplicitDependencies); with until, only it and what it needs."""
    needs = {name: set(task.get("dependentTasks", [])) | _producers(task)
             for name, task in tasks.items()}
    if until is not None:
        if until not in tasks:
            raise SpecError(f"no task {until!r}; tasks: {', '.join(sorted(tasks))}")
        wanted, todo = set(), [until]
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo += needs[name]
        needs = {n: d for n, d in needs.items() if n in wanted}
    return needs


def task_order(tasks: dict[str, dict], until: str | None = None) -> list[str]:
    """Tasks in dependency order (ties by name); with until, only it and what it needs."""
    return order_of(task_needs(tasks, until))


def order_of(needs: dict[str, set]) -> list[str]:
    """task_needs' tasks in dependency order (ties by name)."""
    order: list[str] = []
    while len(order) < len(needs):
        ready = sorted(n for n, d in needs.items() if n not in order and d <= set(order))
        if not ready:
            raise SpecError(f"tasks depend on each other in a cycle: {set(needs) - set(order)}")
        order.append(ready[0])
    return order


def _producers(task: dict) -> set:
    inputs = task.get("inputs", {})
    refs = [*inputs.get("parameters", {}).values(), *inputs.get("artifacts", {}).values()]
    return {ref[kind]["producerTask"] for ref in refs
            for kind in ("taskOutputParameter", "taskOutputArtifact") if kind in ref}


class Runner:
    def __init__(self, spec: dict, root: str, state: Path, platform: dict | None = None,
                 secrets: dict[str, dict[str, str]] | None = None,
                 config_maps: dict[str, dict[str, str]] | None = None,
                 image: Path | None = None, env: dict[str, str] | None = None,
                 launcher_config: dict | None = None, namespace: str = "kubeflow",
                 cache: bool = True, echo=print, timeout_s: int = 3600,
                 prefork: bool | str = False, prefork_preload: tuple = STEP_PRELOAD,
                 version: str = NEWEST):
        # Before anything (a state folder, a pod): a run of placeholder paths could only fail.
        refuse_placeholder_paths(spec, root)
        self.spec, self.root, self.state = spec, root.rstrip("/"), Path(state).resolve()
        self.name = spec["pipelineInfo"]["name"]
        self.backend = backend(version)
        self.tasks, self.groups = dag_tasks(spec)
        if "://" in root:
            split_uri(root)
        self.executors_k8s = ((platform or {}).get("platforms", {}).get("kubernetes", {})
                              .get("deploymentSpec", {}).get("executors", {}))
        self.secrets, self.config_maps = secrets or {}, config_maps or {}
        self.env, self.cache, self.namespace = dict(env or {}), cache, namespace
        self.echo = echo
        self.pod = Pod(image, timeout_s, prefork, prefork_preload)
        self.metadata = Metadata(self.state)
        self.caches = Cache(self.state, namespace, self.name)
        self.launcher = Launcher(self.backend, self.root,
                                 ObjectStore(self.backend, launcher_config, self.secrets,
                                             namespace),
                                 self.metadata, self.pod, echo)
        self.results: dict[str, TaskResult] = {}

    def run(self, until: str | None = None, run_id: str | None = None,
            parallelism: int = 0) -> RunResult:
        """Runs each task once the tasks it needs succeeded, up to parallelism at once (0: no
        limit, as the backend's Workflow); after a failure starts none, lets the running ones
        finish, then raises the first failure (Argo's DAG failFast)."""
        run_id = run_id or str(uuid.uuid4())  # the backend's run ids are UUIDs
        tasks = self.tasks
        needs = task_needs(tasks, until)
        exits = {n for n in needs if is_exit_task(tasks[n])}
        self._refuse_final_status(needs)
        order = order_of(needs)
        limit = self._limit(parallelism or len(order))
        self.record = self.state / "runs" / f"{run_id}.json"
        self.failed: dict[str, TaskFailed | SpecError | subprocess.TimeoutExpired] = {}
        self.results = {}
        running: dict[futures.Future, str] = {}
        succeeded: set[str] = set()
        self.pod.start(self.state)
        try:
            with futures.ThreadPoolExecutor(max_workers=max(limit, 1)) as pool:
                while True:
                    # Argo's dependency check: every upstream task Succeeded. Fail fast: once a
                    # task failed, nothing new starts but exit tasks, once what they wait for
                    # ended (a task that will never start has).
                    started = set(running.values()) | succeeded | set(self.failed)

                    ended = succeeded | set(self.failed) | (
                        set(order) - started if self.failed else set())
                    ready = [n for n in order if n not in started and (
                        needs[n] <= ended if n in exits
                        else not self.failed and needs[n] <= succeeded)]
                    for name in ready[:limit - len(running)]:
                        running[pool.submit(self._task, run_id, name, tasks[name])] = name
                    if not running:
                        break
                    done, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                    for future in sorted(done, key=lambda f: order.index(running[f])):
                        name = running.pop(future)
                        try:
                            self.results[name] = future.result()
                            succeeded.add(name)
                        except (TaskFailed, SpecError, subprocess.TimeoutExpired) as error:
                            self.failed[name] = error
        finally:
            self._write_record(run_id, order)
            self.pod.close()
        if self.failed:
            raise next(iter(self.failed.values()))
        return RunResult(run_id, {n: self.results[n] for n in order})

    def _limit(self, limit: int) -> int:
        """How many tasks may run at once, after saying what differs from a cluster."""
        self.echo(f"  backend: open-source KFP {self.backend.tag} (devtools/kfp_backend)")
        if "://" not in self.root:
            self.echo(f"  ! pipeline root {self.root} is a local folder: the backend refuses "
                      "it (objectstore/config.go); here it stands for a bucket every pod "
                      "mounts, so nothing is downloaded or uploaded")
        if self.pod.image is None:
            self.echo("  ! no --image: steps run from this checkout's Python, not the image")
        elif not self.pod.mount_namespace:
            self.echo(f"  ! no private mount namespace (unshare --mount needs root): "
                      f"{self.pod.image['workdir']} in command lines is rewritten to the copy")
        if not self.pod.mount_namespace and limit > 1:
            self.echo("  ! no private mount namespace: tasks run one at a time (each pod's "
                      "/tmp/kfp folders would be this machine's one)")
            return 1
        return limit

    def _write_record(self, run_id: str, order: list[str]) -> None:
        tasks = {}
        for name in order:
            if name in self.results:
                tasks[name] = dataclasses.asdict(self.results[name])
            elif name in self.failed:
                error = self.failed[name]
                tasks[name] = {"name": name, "status": "failed", "error": str(error),
                               "artifacts": getattr(error, "artifacts", {})}
            else:
                tasks[name] = {"name": name, "status": "not run"}
        write_run_record(self.record, run_id, self.name, self.root, tasks)

    def _task(self, run_id: str, name: str, task: dict) -> TaskResult:
        """One task: the driver (driver/container.go Container), the cache, the launcher."""
        unknown = set(task) - TASK_KEYS
        if unknown:
            raise SpecError(f"task {name}: {sorted(unknown)} is not supported here")
        component, container = self._container(name, task)
        if container.get("lifecycle", {}).get("preCacheCheck"):
            self.echo(f"  ! {name}: lifecycle.preCacheCheck ignored, as open-source KFP does")
        started = time.monotonic()
        work = self.state / "pods" / run_id / name
        executor_input = {
            "inputs": driver.resolve_inputs(name, task, component, self.results,
                                            self._final_status(run_id, task)),
            "outputs": driver.provision_outputs(
                driver.run_root(self.root, self.name, run_id), name, component, self.backend,
                lambda uri: local_path(uri, work))}
        key = None
        if task.get("cachingOptions", {}).get("enableCache") and self.cache:
            # No PVC is mounted here (pod_env names pvcMount as not reproduced).
            key = fingerprint(executor_input, component, container, self.backend)
            cached = self.caches.get(key, executor_input["outputs"])
            if cached is not None:
                # driver/cache.go reuseCachedOutputs: the cached execution's artifacts, as they
                # are.
                self.echo(f"  ✓ {name} (from cache)")
                return TaskResult(name, "cached", time.monotonic() - started,
                                  cached["artifacts"], cached["parameters"],
                                  cached["execution_id"])
        result = self._launch(name, executor_input, work, started)
        if key is not None:
            self.caches.put(key, name, run_id, result.artifacts, result.parameters,
                            result.execution_id)
        return result

    def run_step(self, name: str, executor_input: dict) -> TaskResult:
        """Task `name`'s launcher alone, on an ExecutorInput built elsewhere (by hand, as a
        release's driver builds it): no driver, no cache. Raises TaskFailed as run() does."""
        self.pod.start(self.state)
        try:
            return self._launch(name, executor_input, self.state / "pods" / "step" / name,
                                time.monotonic())
        finally:
            self.pod.close()

    def _launch(self, name: str, executor_input: dict, work: Path,
                started: float) -> TaskResult:
        component, container = self._container(name, self.tasks[name])
        env = driver.pod_env(name, container, self.pod.image_env(),
                             self.executors_k8s.get(component["executorLabel"], {}),
                             self.secrets, self.config_maps, self.env, self.echo)
        resources = pod_resources(name, container)  # the driver's podSpecPatch
        self.echo(f"  > {name} ... ({describe(resources)})")
        launched = self.launcher.execute(name, container, component, executor_input, work, env,
                                         resources)
        seconds, usage = time.monotonic() - started, launched.usage
        self.echo(f"  ✓ {name} {seconds:.1f}s" + (
            f" (peak RSS {usage.peak_rss_bytes / 2**20:.0f} MiB, CPU {usage.cpu_seconds:.1f} s)"
            if usage else ""))
        return TaskResult(name, "ran", seconds, launched.artifacts, launched.parameters,
                          self.metadata.next_id("execution"), launched.log,
                          round(usage.peak_rss_bytes / 2**20, 1) if usage else None,
                          round(usage.cpu_seconds, 2) if usage else None)

    def _refuse_final_status(self, names) -> None:
        """Before 2.14.0 the API server cannot compile a spec with a TASK_FINAL_STATUS input
        (compiler/argocompiler/dag.go addImplicitDependencies): the run never starts. Here the
        tasks of the run are checked (all, but with --until)."""
        if self.backend.task_final_status:
            return
        for name, task in sorted((n, self.tasks[n]) for n in names):
            for source in task.get("inputs", {}).get("parameters", {}).values():
                if "taskFinalStatus" in source:
                    raise SpecError(f"compiling task {name!r}: task final status not supported "
                                    f"yet (open-source KFP {self.backend.tag}; 2.14.0 runs it)")

    def _final_status(self, run_id: str, task: dict) -> dict:
        """driver/resolve.go resolveInputParameter, TaskFinalStatus: the state of the task's
        first dependentTask as the spec names it (a DAG task: FAILED when one of its tasks
        failed), PipelineTaskFinalStatus in protojson, its error left empty (a TODO there)."""
        spec_task = self._spec_task(task["taskInfo"]["name"])
        producers = spec_task.get("dependentTasks", [])
        if not producers:
            return {}
        producer = producers[0]
        members = self.groups.get(producer, {producer})
        state = FAILED if members & set(self.failed) else COMPLETE
        return {"state": state, "pipelineTaskName": producer,
                "pipelineJobResourceName": f"{self.name}-{run_id[:8]}", "error": {}}

    def _spec_task(self, name: str) -> dict:
        """The task as the spec writes it (its own dependentTasks), in whichever DAG."""
        dags = [self.spec["root"]["dag"]] + [c["dag"] for c in self.spec["components"].values()
                                             if "dag" in c]
        return next(d["tasks"][name] for d in dags if name in d["tasks"])

    def _container(self, name: str, task: dict) -> tuple[dict, dict]:
        """(component, container) of a task the backend runs (argocompiler/dag.go)."""
        component = self.spec["components"][task["componentRef"]["name"]]
        executor = self.spec["deploymentSpec"]["executors"][component["executorLabel"]]
        if "importer" in executor:
            raise SpecError(f"task {name}: an importer. Open-source KFP supports importers "
                            "(argocompiler/dag.go importerTask); this runner does not")
        if set(executor) != {"container"}:
            raise SpecError(f"task {name}: a {'/'.join(executor)} executor: open-source KFP "
                            "runs none (argocompiler/dag.go: resolver executors not "
                            "implemented)")
        return component, executor["container"]
