"""Request and response bodies (pydantic), as the OpenAPI document shows them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr

MODEL_HELP = "Model name; needed when the server serves several models."
VERSION_HELP = "Model version (default: the newest version served)."


#: JSON values are taken as they are typed: ``true`` is not 1, ``"5"`` not 5, ``5.0`` not an int
STRICT = ConfigDict(extra="forbid", strict=True)
PositiveInt = Annotated[int, Field(ge=1)]
ADAPTIVE_HELP = ("Adaptive sampling (``samples: \"adaptive\"``): the largest Monte Carlo "
                 "standard error of a row's mean, in the units of the answer (probabilities, or "
                 "the regression target's). Default: the server's ``--adaptive-tol``.")  # fmt: skip


class PredictRequest(BaseModel):
    """Rows in raw units (the bundle's preprocessing applies): lists of numbers (an image may be
    nested ``[1, 28, 28]`` or flat) or ``{feature: value}`` objects for table bundles."""

    model_config = STRICT
    inputs: list[Any] = Field(min_length=1, description="One entry per row.")
    model: str | None = Field(default=None, description=MODEL_HELP)
    version: int | None = Field(default=None, ge=1, description=VERSION_HELP)
    samples: PositiveInt | Literal["adaptive"] | None = Field(
        default=None,
        description='Monte Carlo samples T, or "adaptive" (with ``tol``, ``start``, '
        "``max_samples``; refused where the bundle's conformal or deferral calibration does "
        "not hold for that policy). Default: the server's setting.",
    )
    tol: float | None = Field(default=None, ge=0, allow_inf_nan=False, description=ADAPTIVE_HELP)
    start: int | None = Field(
        default=None, ge=2, description="Adaptive sampling: the samples every row gets first "
        "(default: the server's ``--adaptive-start``, else 8)."
    )  # fmt: skip
    max_samples: int | None = Field(
        default=None, ge=2, description="Adaptive sampling: the most samples a row gets, start "
        "times a power of two (default: the server's ``--adaptive-max``, else 32)."
    )  # fmt: skip
    level: float = Field(default=0.9, gt=0, lt=1, description="Interval level (regression).")
    seed: int | None = Field(
        default=None,
        ge=0,
        lt=2**63,
        description="Seed of the Monte Carlo draws: the same rows with the same seed get the "
        "same answer (the request then runs in a pass of its own).",
    )
    return_samples: bool = Field(default=False, description="Include each row's T samples.")
    scores: list[str] | None = Field(
        default=None,
        description="OOD scores per row by name (max_prob, max_logit, energy, entropy, "
        "mutual_information; mahalanobis where the bundle has a Mahalanobis fit, density where "
        "the method has a feature density): a field ``ood_<name>`` each, higher = more likely "
        "out of distribution.",
    )


class PredictResponse(BaseModel):
    model: str
    version: int
    request_id: str
    warnings: list[str] | None = Field(
        default=None,
        description="Guarantees this answer does not carry: e.g. conformal intervals "
        "calibrated under another sampling policy than the one served.",
    )
    distilled_from: dict[str, Any] | None = Field(
        default=None,
        description="Answers of a distilled student (bayesify distill): its teacher's method, "
        "config and weights digests and source bundle. Absent for any other model.",
    )
    predictions: list[dict[str, Any]] = Field(
        description="Per row: the predictor's record (prediction, uncertainty, interval or "
        "prediction set, defer/defer_score/defer_threshold when the bundle has a deferral "
        "policy), samples_used and its own request_id (for /v1/feedback). Classification: "
        "``probabilities`` (a list in class order) and ``class_probabilities`` (an object "
        "keyed by class name, or by class index as text when the bundle names none)."
    )


class Outcome(BaseModel):
    model_config = STRICT
    request_id: str = Field(min_length=1, max_length=200)
    outcome: StrictInt | StrictFloat | StrictStr = Field(
        description="True class (index or name) or value."
    )


class FeedbackRequest(BaseModel):
    model_config = STRICT
    outcomes: list[Outcome] = Field(min_length=1)
    model: str | None = Field(default=None, description=MODEL_HELP)
    version: int | None = Field(default=None, ge=1, description=VERSION_HELP)


class FlaggedOutcome(BaseModel):
    request_id: str
    reason: str


class FeedbackResponse(BaseModel):
    accepted: int = Field(description="Outcomes scored into the rolling figures.")
    unknown: list[str] = Field(description="Request ids never served or no longer remembered.")
    already_received: list[str] = Field(
        description="Request ids whose row had feedback before (not counted again)."
    )
    flagged: list[FlaggedOutcome] = Field(
        description="Regression outcomes beyond the bound the server keeps (the training "
        "targets' range widened by its width, else 1000 served standard deviations from the "
        "served mean): received, not scored."
    )


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    """Every error: ``detail`` is a message or a list of field errors (FastAPI's shape)."""

    detail: str | list[ErrorItem]


# ---------------------------------------------------------------------- Open Inference Protocol
class V2Tensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any]


class V2InputTensor(BaseModel):
    """An input tensor: ``data`` (flat or nested, row-major), or with the binary tensor
    extension ``parameters.binary_data_size`` bytes after the JSON header."""

    model_config = STRICT
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any] | None = None


class V2RequestedOutput(BaseModel):
    model_config = STRICT
    name: str
    parameters: dict[str, Any] | None = None


class V2InferRequest(BaseModel):
    model_config = STRICT
    id: str | None = None
    parameters: dict[str, Any] | None = Field(
        default=None,
        description='``samples``: T or "adaptive" (with ``tol``, ``start``, ``max_samples``, '
        "as in ``/v1/predict``); ``seed``. The protocol's ``binary_data_output``, "
        "``content_type``, ``headers``, ``priority``, ``timeout`` and ``sequence_*`` are taken "
        "and have no effect; any other parameter is refused.",
    )
    inputs: list[V2InputTensor] = Field(min_length=1)
    outputs: list[V2RequestedOutput] | None = None


class V2InferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str
    parameters: dict[str, Any] | None = None
    outputs: list[V2Tensor]


class V2Error(BaseModel):
    error: str


class V2TensorMeta(BaseModel):
    name: str
    datatype: str
    shape: list[int]


class V2ModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[V2TensorMeta]
    outputs: list[V2TensorMeta]
    parameters: dict[str, Any] | None = Field(
        default=None,
        description="Table bundles: input_columns, the input tensor's columns in order.",
    )


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its ``$defs`` written in place (for ``openapi_extra``)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` documenting ``model`` as the required JSON body of an endpoint that
    reads and checks its body itself (``model.model_validate_json``)."""
    schema = inline_schema(model)
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
