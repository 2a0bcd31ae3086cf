"""ML Metadata as the backend's metadata client writes and reads it (metadata/client.go,
metadata/converter.go), kept as JSON files under the run's state folder: ids, recorded output
artifacts, and the artifacts a downstream task reads back."""
from __future__ import annotations

import json
import threading
from pathlib import Path

from core import yaml_text
from devtools.kfp_backend.errors import TaskFailed


class Metadata:
    def __init__(self, state: Path):
        self.state = Path(state)
        self._ids = threading.Lock()  # ML Metadata's ids, given out to concurrent tasks

    def next_id(self, kind: str) -> int:
        counter = self.state / "mlmd" / f"last_{kind}_id"
        with self._ids:
            counter.parent.mkdir(parents=True, exist_ok=True)
            value = int(counter.read_text()) + 1 if counter.is_file() else 1
            counter.write_text(str(value))
        return value

    def record_artifact(self, key: str, artifact: dict, store_session_info: str) -> dict:
        """metadata/client.go RecordArtifact (toMLMDArtifact: metadata -> custom properties,
        display_name and store_session_info added), read back as the driver reads it
        (converter.go toRuntimeArtifact): name = the MLMD id."""
        metadata = dict(artifact.get("metadata", {}))
        metadata.setdefault("display_name", key)
        metadata.setdefault("store_session_info", store_session_info)
        return {"name": str(self.next_id("artifact")), "uri": artifact["uri"],
                "type": type_name(artifact["type"]), "metadata": metadata}


def as_input(recorded: dict) -> dict:
    """An upstream artifact as a downstream task gets it: metadata/client.go
    GetOutputArtifactsByExecutionId sets Schema "" (a TODO), and OutputArtifact.
    ToRuntimeArtifact puts it in type.instanceSchema: every upstream artifact reaches the step
    with an empty type, whatever the spec declares (the same at 2.4.1 and 2.17.0)."""
    return {**recorded, "type": {"instanceSchema": ""}}


def type_name(artifact_type: dict) -> str:
    """The MLMD type an output is recorded as: component/launcher_v2.go getArtifactSchema (the
    instance schema, or "title: " + the schema title), then metadata/client.go
    SchemaToArtifactType's YAML `title`."""
    schema = artifact_type.get("instanceSchema") or f"title: {artifact_type.get('schemaTitle')}"
    title = (yaml_text.load(schema) or {}).get("title")
    if not title:
        raise TaskFailed(f"output type {artifact_type} has no title (the backend's "
                         "metadata client stops: 'No title specified')")
    return title


def write_run_record(path: Path, run_id: str, pipeline: str, root: str, tasks: dict) -> None:
    """The run's details, as KFP's UI shows them: each task's state and outputs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"run_id": run_id, "pipeline": pipeline, "root": root,
                                "tasks": tasks}, indent=1, default=str))
