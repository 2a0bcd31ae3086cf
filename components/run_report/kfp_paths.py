"""The run id of a Kubeflow run, read from one of its output artifacts' URIs.

KFP's backend builds the URI in two steps (kubeflow/pipelines, backend/src/v2):
- metadata/client.go GetPipeline: the run's root is GenerateOutputURI(pipelineRoot,
  [pipelineName, runID]), i.e. <root>/<pipeline name>/<run id> (2.3.0, 2.4.1, 2.17.0);
- driver.go provisionOutputs: an output's URI under it is
  2.3.0   GenerateOutputURI(runRoot, [taskName, name])               <run root>/<task>/<key>
  2.4.1   GenerateOutputURI(runRoot, [taskName, outputUriSalt, name]) <run root>/<task>/<uuid>/<key>
  2.17.0  GenerateOutputURI(GenerateOutputURI(runRoot, [taskName, outputURISalt]), [name]),
          the same layout (driver/container.go passes uuid.NewString() as the salt).
GenerateOutputURI (metadata/client.go) drops the root's query string from output URIs.
So the run id sits right after the pipeline name and before the task: counting from the end finds
the task's name on 2.4.1+, not the run id.
"""
from __future__ import annotations

import re


def run_id_from_uri(uri: str, pipeline_name: str, task: str, key: str) -> str:
    """The run id in `uri`, an output `key` of `task` in a run of `pipeline_name`, with or
    without the salt 2.4.1 added; a URI of neither layout is an error."""
    layout = re.compile(rf"^.+/{re.escape(pipeline_name)}/(?P<run_id>[^/]+)/{re.escape(task)}"
                        rf"(?:/[^/]+)?/{re.escape(key)}$")
    found = layout.match(uri.rstrip("/"))
    if found is None:
        raise ValueError(f"no run id in the output URI {uri!r}: KFP writes an output as "
                         f"<root>/{pipeline_name}/<run id>/{task}/<uuid>/{key} (2.4.1 and later) "
                         f"or <root>/{pipeline_name}/<run id>/{task}/{key} (2.3)")
    return found.group("run_id")
