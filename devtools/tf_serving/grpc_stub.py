"""TF Serving's gRPC API (tensorflow.serving.PredictionService and ModelService) answered by a
loaded model, beside the REST stand-in in the same process, with TF Serving's own protos
(tensorflow-serving-api). Behaviour of 2.16.1 and 2.20.0 (the same at both tags for everything
here), the source file named beside each rule:

- the ModelSpec: no name -> INVALID_ARGUMENT "ModelSpec has no name specified."; `version` or
  `version_label` (an unknown label: INVALID_ARGUMENT "Unrecognized servable version label: <l>")
  or the latest; a model or version not loaded -> NOT_FOUND "Servable not found for request:
  ..." (servables.py: model_servers/server_core.cc ServableRequestFromModelSpec);
- Predict: an empty signature_name is "serving_default", an unknown one FAILED_PRECONDITION
  'Serving signature key "<s>" not found.'; inputs not the signature's, or of another dtype:
  INVALID_ARGUMENT with the server's text (servables/tensorflow/predict_util.cc RunPredict,
  PreProcessPrediction, VerifyRequestInputsSize; the dtype text from the session's call frame;
  components/trainer/warmup.py request_problem, the REST stand-in's warmup check); an
  output_filter alias not in the signature, or twice: INVALID_ARGUMENT (PreProcessPrediction);
  more rows than the batching config's max_batch_size: INVALID_ARGUMENT "Task size <n> is larger
  than maximum input batch size <max>", as the REST path (rest_stub.py);
- Classify / Regress: the signature (default "serving_default"; unknown: INVALID_ARGUMENT "No
  signature was found with the name: <s>") must take one tensor "inputs" of serialized
  tf.Examples and give classes/scores (or one "outputs"), else INVALID_ARGUMENT as
  servables/tensorflow/classifier.cc PreProcessClassification and regressor.cc
  PreProcessRegression answer (the method-name check is off: main.cc
  --enable_signature_method_name_check defaults to false);
- GetModelMetadata: metadata_field must name "signature_def" only (get_model_metadata_impl.cc
  ValidateGetModelMetadataRequest); the answer packs the MetaGraphDef's SignatureDefMap;
- GetModelStatus: every loaded version AVAILABLE, or NOT_FOUND "Could not find version <v> of
  model <m>" / "Could not find any versions of model <m>" (model_servers/get_model_status_impl.cc);
- messages up to INT32_MAX bytes both ways (model_servers/server.cc
  builder.SetMaxMessageSize(tensorflow::kint32max)), not gRPC's 4 MiB default;
- request_count / request_latency with entrypoint "GRPC" (metrics.py;
  model_servers/prediction_service_impl.cc).
- MultiInference: classify/regress tasks on one model, each signature once, over the same
  examples (servables/tensorflow/multi_inference.cc; another method_name: UNIMPLEMENTED).
"""
from __future__ import annotations

import os
import time
from concurrent import futures
from typing import Optional

import grpc
import numpy as np
from google.protobuf import text_format
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                     get_model_status_pb2, inference_pb2,
                                     model_service_pb2_grpc,
                                     prediction_service_pb2_grpc, predict_pb2, regression_pb2)

from devtools.tf_serving.metrics import Metrics
from devtools.tf_serving.servables import INVALID_ARGUMENT, ServableError, Servables

DEFAULT_SIGNATURE = "serving_default"  # signature_constants kDefaultServingSignatureDefKey
INT32_MAX = 2**31 - 1
# server.h: grpc_max_threads defaults to 4 x the schedulable CPUs (server.cc: the resource
# quota's SetMaxThreads); here the handler pool's size.
MAX_THREADS = 4 * (os.cpu_count() or 1)
# A MultiInference task's method_name -> the signature kind it runs (multi_inference.cc).
_TASK_KINDS = {"tensorflow/serving/classify": "classification",
               "tensorflow/serving/regress": "regression"}


class _Abort(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def _status(text: str) -> _Abort:
    """'INVALID_ARGUMENT: message' (absl::Status::ToString, as request_problem writes it)."""
    code, _, message = text.partition(": ")
    return _Abort(code, message)


class GrpcStub:
    """`model`: a session_model.SessionModel (or anything with its `signatures` and `run`)."""

    def __init__(self, servables: Servables, model, max_batch_size: Optional[int] = None,
                 metrics: Optional[Metrics] = None, port: int = 0, host: str = "127.0.0.1"):
        self.servables, self.model, self.max_batch_size = servables, model, max_batch_size
        self.metrics = metrics or Metrics()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=MAX_THREADS),
            options=[("grpc.max_receive_message_length", INT32_MAX),
                     ("grpc.max_send_message_length", INT32_MAX)])
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            _PredictionService(self), self._server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(_ModelService(self),
                                                                  self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        if not self.port:
            raise OSError(f"cannot listen for gRPC on {host}:{port}")
        self.target = f"{host}:{self.port}"

    def __enter__(self) -> "GrpcStub":
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(grace=None)

    # -- shared steps ------------------------------------------------------------------------
    def version(self, spec) -> int:
        if not spec.name:
            raise _Abort(INVALID_ARGUMENT, "ModelSpec has no name specified.")
        which = spec.WhichOneof("version_choice")
        try:
            return self.servables.resolve(
                spec.name, version=spec.version.value if which == "version" else None,
                label=spec.version_label if which == "version_label" else None)
        except ServableError as error:
            raise _Abort(error.code, str(error)) from None

    def check_batch(self, rows: int) -> None:
        if self.max_batch_size is not None and rows > self.max_batch_size:
            raise _Abort(INVALID_ARGUMENT, f"Task size {rows} is larger than maximum input "
                                           f"batch size {self.max_batch_size}")

    def answer(self, api: str, request, context, handler):
        """Runs `handler`, maps _Abort to the gRPC status, records the metrics as
        prediction_service_impl.cc does (count always, latency when OK)."""
        start = time.perf_counter()
        status = "OK"
        try:
            return handler(request)
        except _Abort as error:
            status = error.code
            context.abort(getattr(grpc.StatusCode, error.code), str(error))
        finally:
            if api is not None:
                self.metrics.record(request.model_spec.name, status, api, "GRPC",
                                    (time.perf_counter() - start) * 1e6)

    # -- the methods -------------------------------------------------------------------------
    def predict(self, request: predict_pb2.PredictRequest) -> predict_pb2.PredictResponse:
        from components.trainer.warmup import request_problem

        version = self.version(request.model_spec)
        problem = request_problem(self.model.signatures, request)
        if problem is not None:
            raise _status(problem)
        signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
        outputs = self.model.signatures[signature].outputs
        seen = []
        for alias in request.output_filter:  # predict_util.cc PreProcessPrediction
            if alias not in outputs:
                raise _Abort(INVALID_ARGUMENT, (
                    f"output tensor alias not found in signature: {alias} Outputs expected to "
                    f"be in the set {{{','.join(sorted(outputs))}}}."))
            if alias in seen:
                raise _Abort(INVALID_ARGUMENT, f"duplicate output tensor alias: {alias}")
            seen.append(alias)
        import tensorflow as tf

        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        self.check_batch(max((len(v) if v.ndim else 1) for v in inputs.values()))
        values = self.model.run(signature, inputs)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = request.model_spec.name
        response.model_spec.version.value = version
        response.model_spec.signature_name = signature
        for alias in seen or sorted(values):
            response.outputs[alias].CopyFrom(tf.make_tensor_proto(np.asarray(values[alias])))
        return response

    def _example_signature(self, spec, kind: str):
        """The classification/regression signature and its serialized tf.Examples
        (classifier.cc / regressor.cc Get*SignatureDef, PreProcess*)."""
        name = spec.signature_name or DEFAULT_SIGNATURE
        signature = self.model.signatures.get(name)
        if signature is None:
            raise _Abort(INVALID_ARGUMENT, f"No signature was found with the name: {name}")
        if len(signature.inputs) != 1:
            raise _Abort(INVALID_ARGUMENT, "Expected one input Tensor.")
        debug = text_format.MessageToString(signature)
        if kind == "classification":
            if len(signature.outputs) not in (1, 2):
                raise _Abort(INVALID_ARGUMENT, "Expected one or two output Tensors, found "
                                               f"{len(signature.outputs)}")
            if "inputs" not in signature.inputs:
                raise _Abort(INVALID_ARGUMENT,
                             f"No classification inputs found in SignatureDef: {debug}")
            if not {"classes", "scores"} & set(signature.outputs):
                raise _Abort(INVALID_ARGUMENT, (
                    'Expected classification signature outputs to contain at least one of '
                    f'"classes" or "scores". Signature was: {debug}'))
        else:
            if len(signature.outputs) != 1:
                raise _Abort(INVALID_ARGUMENT, "Expected one output Tensor.")
            if "inputs" not in signature.inputs:
                raise _Abort(INVALID_ARGUMENT,
                             f"No regression inputs found in SignatureDef: {debug}")
            if "outputs" not in signature.outputs:
                raise _Abort(INVALID_ARGUMENT,
                             f"No regression outputs found in SignatureDef: {debug}")
        return name

    def _examples(self, request) -> list:
        kind = request.input.WhichOneof("kind")
        if kind == "example_list":
            examples = request.input.example_list.examples
        elif kind == "example_list_with_context":  # util.cc InputToSerializedExampleTensor
            context = request.input.example_list_with_context.context
            examples = []
            for example in request.input.example_list_with_context.examples:
                merged = type(context)()
                merged.CopyFrom(context)
                merged.MergeFrom(example)
                examples.append(merged)
        else:
            examples = []
        if not examples:
            raise _Abort(INVALID_ARGUMENT, "Input is empty.")  # util.cc
        self.check_batch(len(examples))
        return [e.SerializeToString() for e in examples]

    def _classification(self, name: str, examples: list, result) -> None:
        """Runs a classification signature; fills a ClassificationResult
        (classifier.cc PostProcessClassificationResult: one class per column)."""
        values = self.model.run(name, {"inputs": examples})
        classes, scores = values.get("classes"), values.get("scores")
        rows = classes if classes is not None else scores
        for row in range(len(rows)):
            classification = result.classifications.add()
            for k in range(len(rows[row])):
                item = classification.classes.add()
                if classes is not None:
                    label = classes[row][k]
                    item.label = label.decode() if isinstance(label, bytes) else str(label)
                if scores is not None:
                    item.score = float(scores[row][k])

    def _regression(self, name: str, examples: list, result) -> None:
        values = self.model.run(name, {"inputs": examples})
        for value in np.asarray(values["outputs"]).reshape(-1):
            result.regressions.add(value=float(value))

    @staticmethod
    def _spec(out, name: str, signature: str, version: int) -> None:
        """util.cc MakeModelSpec: an empty signature name is written as serving_default."""
        out.name, out.signature_name = name, signature or DEFAULT_SIGNATURE
        out.version.value = version

    def classify(self, request):
        version = self.version(request.model_spec)
        name = self._example_signature(request.model_spec, "classification")
        response = classification_pb2.ClassificationResponse()
        self._classification(name, self._examples(request), response.result)
        self._spec(response.model_spec, request.model_spec.name, name, version)
        return response

    def regress(self, request):
        version = self.version(request.model_spec)
        name = self._example_signature(request.model_spec, "regression")
        response = regression_pb2.RegressionResponse()
        self._regression(name, self._examples(request), response.result)
        self._spec(response.model_spec, request.model_spec.name, name, version)
        return response

    def multi_inference(self, request):
        """servables/tensorflow/multi_inference.cc TensorFlowMultiInferenceRunner::Infer: the
        servable of the first task's ModelSpec (multi_inference_helper.cc; none: an empty
        one), every task on the same model, each signature once, classify or regress only."""
        version = self.version(request.tasks[0].model_spec if request.tasks else
                               inference_pb2.InferenceTask().model_spec)
        seen = set()
        for task in request.tasks:
            if not task.model_spec.name:
                raise _Abort(INVALID_ARGUMENT, "Found ModelSpec with an empty model name.")
            if task.model_spec.name != request.tasks[0].model_spec.name:
                raise _Abort(INVALID_ARGUMENT, "All ModelSpecs in a MultiInferenceRequest must "
                                               "access the same model name.")
            name = task.model_spec.signature_name or DEFAULT_SIGNATURE
            if name in seen:
                raise _Abort(INVALID_ARGUMENT, f"Duplicate evaluation of signature: {name}")
            seen.add(name)
            if name not in self.model.signatures:
                raise _Abort(INVALID_ARGUMENT,
                             f"Requested signature not found in model graph: {name}")
            if task.method_name not in _TASK_KINDS:
                raise _Abort("UNIMPLEMENTED",
                             f"Unsupported signature method_name: {task.method_name}")
            self._example_signature(task.model_spec, _TASK_KINDS[task.method_name])
        examples = self._examples(request)
        response = inference_pb2.MultiInferenceResponse()
        for task in request.tasks:
            result = response.results.add()
            name = task.model_spec.signature_name or DEFAULT_SIGNATURE
            if _TASK_KINDS[task.method_name] == "classification":
                self._classification(name, examples, result.classification_result)
            else:
                self._regression(name, examples, result.regression_result)
            self._spec(result.model_spec, task.model_spec.name, name, version)
        return response

    def metadata(self, request):
        if not request.metadata_field:
            raise _Abort(INVALID_ARGUMENT,
                         "GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != "signature_def":
                raise _Abort(INVALID_ARGUMENT, f"Metadata field {field} is not supported")
        version = self.version(request.model_spec)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for name, signature in self.model.signatures.items():
            signature_map.signature_def[name].CopyFrom(signature)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = request.model_spec.name
        response.model_spec.version.value = version
        response.metadata["signature_def"].Pack(signature_map)
        return response

    def model_status(self, request):
        if not request.HasField("model_spec"):
            raise _Abort(INVALID_ARGUMENT, "Missing ModelSpec")
        name = request.model_spec.name
        versions = sorted(self.servables.versions) if name == self.servables.model_name else []
        if request.model_spec.HasField("version"):
            wanted = request.model_spec.version.value
            if wanted not in versions:
                raise _Abort("NOT_FOUND", f"Could not find version {wanted} of model {name}")
            versions = [wanted]
        if not versions:
            raise _Abort("NOT_FOUND", f"Could not find any versions of model {name}")
        response = get_model_status_pb2.GetModelStatusResponse()
        for v in versions:
            status = response.model_version_status.add(
                version=v, state=get_model_status_pb2.ModelVersionStatus.AVAILABLE)
            status.status.error_code = 0
        return response


class _PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, stub: GrpcStub):
        self.stub = stub

    def Predict(self, request, context):  # noqa: N802 (the proto's names)
        return self.stub.answer("Predict", request, context, self.stub.predict)

    def Classify(self, request, context):  # noqa: N802
        return self.stub.answer("Classify", request, context, self.stub.classify)

    def Regress(self, request, context):  # noqa: N802
        return self.stub.answer("Regress", request, context, self.stub.regress)

    def MultiInference(self, request, context):  # noqa: N802 (counted nowhere in TF Serving)
        return self.stub.answer(None, request, context, self.stub.multi_inference)

    def GetModelMetadata(self, request, context):  # noqa: N802 (counted nowhere either)
        return self.stub.answer(None, request, context, self.stub.metadata)


class _ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, stub: GrpcStub):
        self.stub = stub

    def GetModelStatus(self, request, context):  # noqa: N802
        return self.stub.answer(None, request, context, self.stub.model_status)
