"""The cache: the key (cacheutils/cache.go GenerateCacheKey + GenerateFingerPrint, called by the
driver: driver/cache.go getFingerPrint at 2.17.0, driver/driver.go at 2.4.1) and the entries
(the API server's tasks: cacheutils/cache.go GetExecutionCache / CreateExecutionCache), kept as
JSON files scoped "pipeline/<name>" within the namespace."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from devtools.kfp_backend.errors import TaskFailed
from devtools.kfp_backend.versions import Backend


def fingerprint(executor_input: dict, component: dict, container: dict, backend: Backend,
                pvc_names: tuple[str, ...] = ()) -> str:
    """sha256 of the CacheKey (api/v2alpha1/cache_key.proto) in encoding/json's compact,
    key-sorted form: input artifact names (MLMD ids), input parameter values, output artifacts
    without URIs (name, type, metadata: so from 2.5.0 executor-logs, from 2.15.0 each output's
    name), output parameter types, image, command + args before substitution, from 2.15.0 the
    sorted PVC names (protojson leaves an empty list out). No env."""
    inputs, outputs = executor_input["inputs"], executor_input["outputs"]
    container_key = {"image": container["image"],
                     "cmdArgs": container["command"] + container.get("args", [])}
    if backend.cache_pvc_names and pvc_names:
        container_key["pvcNames"] = sorted(set(pvc_names))
    key = {
        "inputArtifactNames": {k: {"artifactNames": [a["name"] for a in v["artifacts"]]}
                               for k, v in inputs["artifacts"].items()},
        "inputParameterValues": inputs["parameterValues"],
        "outputArtifactsSpec": {k: {kk: vv for kk, vv in v["artifacts"][0].items()
                                    if kk in ("name", "type", "metadata")}
                                for k, v in outputs["artifacts"].items() if v["artifacts"]},
        "outputParametersSpec": {k: component["outputDefinitions"]["parameters"][k][
            "parameterType"] for k in outputs["parameters"]},
        "containerSpec": container_key}
    # Go's encoding/json escapes <, > and & in strings.
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return hashlib.sha256(text.encode()).hexdigest()


class Cache:
    def __init__(self, state: Path, namespace: str, pipeline: str):
        # driver.go getFingerPrintsAndID: scope "pipeline/<name>" within the namespace.
        self.folder = Path(state) / "cache" / namespace / "pipeline" / pipeline

    def get(self, key: str, outputs: dict) -> dict | None:
        """The entry, checked as driver/cache.go collectOutputArtifactMetadataFromCache does:
        every output of this ExecutorInput must be among the cached execution's artifacts."""
        path = self.folder / f"{key}.json"
        if not path.is_file():
            return None
        cached = json.loads(path.read_text())
        for name in outputs["artifacts"]:
            if name not in cached["artifacts"]:
                raise TaskFailed(f"failed collect output artifact metadata from cache: unable "
                                 f"to find artifact with name {name} in mlmd output artifacts")
        return cached

    def put(self, key: str, task: str, run_id: str, artifacts: dict, parameters: dict,
            execution_id: int) -> None:
        """component/launcher_v2.go Execute: CreateExecutionCache after the step succeeded."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{key}.json").write_text(json.dumps(
            {"task": task, "run_id": run_id, "artifacts": artifacts, "parameters": parameters,
             "execution_id": execution_id}, indent=1))
