"""`make flink-up`: a Flink 1.18.1 session cluster on this machine for the pipeline's Beam stages.

    python -m devtools.flink_cluster up [--taskmanagers 2] [--slots 2] [--bare-pool]
                                        [--pool-path PATH]
    python -m devtools.flink_cluster status   # what runs, where its log is
    python -m devtools.flink_cluster down     # stops what `up` started, and nothing else

`up` starts, on loopback and on free ports, each waited for until it answers:
1. a JobManager (StandaloneSessionClusterEntrypoint) and N TaskManagers (TaskManagerRunner),
   from the jars scripts/fetch_flink.sh fetched (`make tools`; PyPI's apache-flink-libraries
   1.18.1, sha256-pinned), on the machine's Java 17, with the JVM and `-D` memory flags that
   Flink's own BashJavaUtils computes, as Flink's bin/ scripts start them; ready once the REST
   API lists every TaskManager and slot;
2. a Beam SDK worker pool (devtools/beam_worker_pool.py) for the TaskManagers' Python stages:
   Beam's EXTERNAL environment; `--bare-pool` gives it PATH alone, `--pool-path` that
   PATH alone. Checked first: a pool whose `python` cannot import Beam and the project
   stops `up` before anything starts (its workers would never start, and Beam would wait).
It then prints the Beam arguments for `runner.beam_args`. Everything lives in outputs/flink/
(conf/, logs/, state.json: the processes `down` stops, each checked by its start time so that a
reused pid is never signalled).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import List, Optional

from devtools.beam_worker_pool import pool_environment, start_pool, worker_problem
from devtools.loopback import REPO, ServiceUnavailable, free_port
from devtools.service_up import Stack, _alive, status as recorded_status

FOLDER = REPO / "outputs" / "flink"
# Where scripts/fetch_flink.sh puts the jars (its FLINK_LIBS).
JARS = Path(os.environ.get("FLINK_LIBS", REPO / ".cache" / "flink"))
# Where scripts/fetch_flink_job_server.sh puts Beam's Flink job server (`make flink-job-server`).
JOB_SERVER_JAR = (REPO / ".cache" / "flink-job-server"
                  / "beam-runners-flink-1.18-job-server-2.59.0.jar")
FLINK_VERSION = "1.18"
READY_TIMEOUT_S = 120.0
# Flink 1.18's flink-dist/src/main/resources/flink-conf.yaml `env.java.opts.all`: what Flink
# needs opened on Java 17 (its bin/ scripts pass it to every JVM).
JAVA_17_OPTS = (
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED "
    "--add-exports=java.rmi/sun.rmi.registry=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.api=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.parser=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.tree=ALL-UNNAMED "
    "--add-exports=jdk.compiler/com.sun.tools.javac.util=ALL-UNNAMED "
    "--add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED "
    "--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED "
    "--add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED "
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED "
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED "
    "--add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED "
    "--add-opens=java.base/java.util=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED "
    "--add-opens=java.base/java.util.concurrent.locks=ALL-UNNAMED").split()
# One file per process, as Flink's conf/log4j.properties (its ${sys:log.file}).
LOG4J = """rootLogger.level = INFO
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.fileName = ${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
"""


def flink_conf(rest_port: int, rpc_port: int, slots: int) -> str:
    """flink-conf.yaml: loopback only, small processes (two TaskManagers and a JobManager in
    about 1 GB of heap on a 2-core machine), a lost TaskManager noticed within 10 s, and the
    restart strategy that re-runs a failed job a bounded number of times."""
    return "\n".join([
        "jobmanager.rpc.address: 127.0.0.1", f"jobmanager.rpc.port: {rpc_port}",
        "jobmanager.bind-host: 127.0.0.1", "taskmanager.bind-host: 127.0.0.1",
        "taskmanager.host: 127.0.0.1", "rest.address: 127.0.0.1",
        "rest.bind-address: 127.0.0.1", f"rest.port: {rest_port}",
        "jobmanager.memory.process.size: 768m", "taskmanager.memory.process.size: 1024m",
        f"taskmanager.numberOfTaskSlots: {slots}", "parallelism.default: 1",
        # A job's tasks on every TaskManager, not packed into the first one's slots.
        "cluster.evenly-spread-out-slots: true",
        "heartbeat.interval: 2000", "heartbeat.timeout: 10000",
        "restart-strategy.type: fixed-delay", "restart-strategy.fixed-delay.attempts: 2",
        "restart-strategy.fixed-delay.delay: 2 s", ""])


def classpath() -> str:
    """lib/ as Flink's bin/config.sh builds it: the other jars sorted, flink-dist last."""
    jars = sorted(p for p in (JARS / "lib").glob("*.jar") if not p.name.startswith("flink-dist"))
    return ":".join(str(p) for p in [*jars, *sorted((JARS / "lib").glob("flink-dist-*.jar"))])


def jar_problem() -> Optional[str]:
    if not list((JARS / "lib").glob("flink-dist-*.jar")):
        return (f"no Flink jars in {JARS}: run `make tools` (scripts/fetch_flink.sh fetches "
                "Flink 1.18.1's jars once)")
    if shutil.which("java") is None:
        return "java not found: install a JDK 17 (scripts/install_test_tools.sh)"
    return None


def resource_params(conf: Path, which: str) -> tuple:
    """(JVM flags, `-D` flags) for a JobManager (GET_JM_RESOURCE_PARAMS) or TaskManager
    (GET_TM_RESOURCE_PARAMS) of this config, as Flink's bin/ scripts get them."""
    answer = subprocess.run(
        ["java", *JAVA_17_OPTS, "-cp", f"{JARS / 'bin' / 'bash-java-utils.jar'}:{classpath()}",
         "org.apache.flink.runtime.util.bash.BashJavaUtils", which, "--configDir", str(conf)],
        capture_output=True, text=True, timeout=60)
    results = [line.split(":", 1)[1] for line in answer.stdout.splitlines()
               if line.startswith("BASH_JAVA_UTILS_EXEC_RESULT:")]
    if answer.returncode != 0 or len(results) < 2:
        raise ServiceUnavailable(f"Flink's BashJavaUtils {which} failed: "
                                 f"{(answer.stdout + answer.stderr)[-2000:]}")
    return results[-2].split(), results[-1].split()


def overview(rest: str) -> dict:
    with urllib.request.urlopen(f"{rest}/overview", timeout=2) as answer:
        return json.loads(answer.read())


def _java(conf: Path, log: Path, jvm: List[str], main: str, dynamic: List[str]) -> List[str]:
    return ["java", *JAVA_17_OPTS, *jvm, f"-Dlog.file={log}",
            f"-Dlog4j.configurationFile=file:{conf / 'log4j.properties'}", "-cp", classpath(),
            main, "--configDir", str(conf), *dynamic]


def _wait(what: str, ready, processes, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                raise ServiceUnavailable(f"{what}: a process exited with {process.returncode} "
                                         f"(log: {log})")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise ServiceUnavailable(f"{what} not ready within {timeout_s:.0f} s (log: {log})")


def up(folder: Path, taskmanagers: int, slots: int, bare_pool: bool,
       pool_path: Optional[str] = None) -> int:
    # Before anything starts: a pool whose workers cannot start would hang every Beam stage.
    problem = jar_problem() or worker_problem(pool_environment(bare_pool, pool_path))
    if problem:
        raise ServiceUnavailable(problem)
    if (folder / "state.json").exists():
        raise ServiceUnavailable(f"a cluster is recorded in {folder / 'state.json'}: "
                                 "`make flink-down` first")
    began = time.monotonic()
    stack = Stack(folder)
    conf = folder / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    rest_port, rpc_port, pool_port = free_port(), free_port(), free_port()
    (conf / "flink-conf.yaml").write_text(flink_conf(rest_port, rpc_port, slots))
    (conf / "log4j.properties").write_text(LOG4J)
    rest = f"http://127.0.0.1:{rest_port}"

    jm_log = stack.logs / "jobmanager.log"
    jm_jvm, jm_dynamic = resource_params(conf, "GET_JM_RESOURCE_PARAMS")
    jobmanager, _ = stack.spawn("jobmanager", _java(
        conf, jm_log, jm_jvm,
        "org.apache.flink.runtime.entrypoint.StandaloneSessionClusterEntrypoint", jm_dynamic),
        url=rest)
    tm_jvm, tm_dynamic = resource_params(conf, "GET_TM_RESOURCE_PARAMS")
    started = [jobmanager]
    for number in range(1, taskmanagers + 1):
        name = f"taskmanager-{number}"
        process, _ = stack.spawn(name, _java(
            conf, stack.logs / f"{name}.log", tm_jvm,
            "org.apache.flink.runtime.taskexecutor.TaskManagerRunner",
            [*tm_dynamic, "-D", f"taskmanager.resource-id={name}"]))
        started.append(process)
    _wait(f"the JobManager at {rest} with {taskmanagers} TaskManagers",
          lambda: (overview(rest)["taskmanagers"] == taskmanagers
                   and overview(rest)["slots-total"] == taskmanagers * slots),
          started, stack.logs, READY_TIMEOUT_S)

    pool_log = stack.logs / "worker_pool.log"
    pool = start_pool(pool_port, pool_log, bare_pool, pool_path, check=False)  # checked
    # group: the pool's workers are its children, in its session (beam_worker_pool.py).
    stack.record("worker_pool", pool, pool_log, url=f"127.0.0.1:{pool_port}", group=True)
    (folder / "beam_args.json").write_text(json.dumps(beam_args(rest_port, pool_port)))
    print(f"flink {FLINK_VERSION} session cluster up in {time.monotonic() - began:.0f} s: "
          f"{rest} ({taskmanagers} TaskManagers, {taskmanagers * slots} slots), worker pool "
          f"127.0.0.1:{pool_port}{' (PATH only)' if bare_pool else ''}; logs in {stack.logs}")
    print("runner.beam_args: " + json.dumps(beam_args(rest_port, pool_port)))
    if not JOB_SERVER_JAR.is_file():
        print("the job server jar is not fetched: `make flink-job-server` where Maven Central "
              "serves it (README: Beam stages on Flink)")
    return 0


def beam_args(rest_port: int, pool_port: int) -> List[str]:
    """What runner.beam_args needs for this cluster (README: Beam stages on Flink); the job
    server jar is the one scripts/fetch_flink_job_server.sh fetched (Beam's own download at
    run time is refused by the config check)."""
    jar = JOB_SERVER_JAR if JOB_SERVER_JAR.is_file() else "JOB_SERVER_JAR"
    return ["--runner=FlinkRunner", f"--flink_master=127.0.0.1:{rest_port}",
            f"--flink_version={FLINK_VERSION}", f"--flink_job_server_jar={jar}",
            "--environment_type=EXTERNAL", f"--environment_config=127.0.0.1:{pool_port}",
            "--parallelism=2"]


def down(folder: Path) -> int:
    """Stops what `up` recorded, and nothing else: the pool (with its workers) first, the
    TaskManagers, the JobManager last."""
    state_file = folder / "state.json"
    if not state_file.exists():
        print(f"nothing to stop: no {state_file}")
        return 0
    state = json.loads(state_file.read_text())
    order = ["worker_pool", *sorted(n for n in state if n.startswith("taskmanager")),
             "jobmanager"]
    for name in order:
        entry = state.get(name)
        if entry is None or not _alive(entry):
            continue
        signal_it = os.killpg if entry.get("group") else os.kill
        signal_it(entry["pid"], signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(entry) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(entry):
            signal_it(entry["pid"], signal.SIGKILL)
        if entry.get("group"):  # workers that outlived their pool
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry["pid"], signal.SIGKILL)
        print(f"  stopped {name} (pid {entry['pid']})")
    state_file.unlink()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--taskmanagers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=2, help="task slots per TaskManager")
    parser.add_argument("--bare-pool", action="store_true",
                        help="the worker pool's environment is PATH alone")
    parser.add_argument("--pool-path", help="the worker pool's PATH, alone (its `python` must "
                        "import Beam and this project)")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    try:
        if args.action == "up":
            return up(folder, args.taskmanagers, args.slots, args.bare_pool, args.pool_path)
        return down(folder) if args.action == "down" else recorded_status(folder)
    except ServiceUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        if args.action == "up" and "make flink-down" not in str(error):
            down(folder)
        return 1
    except BaseException:
        if args.action == "up":  # nothing half-started is left running
            down(folder)
        raise


if __name__ == "__main__":
    raise SystemExit(main())
