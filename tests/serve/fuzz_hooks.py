"""Schemathesis hooks (loaded by ``SCHEMATHESIS_HOOKS``) that turn schema-valid bodies into
the JSON a table user's client may send: booleans, nulls, strings of digits, huge numbers and
unicode field names in rows, in the request body and in v2 parameters, rows of the served
bundle's features (``BAYESIFY_FUZZ_FEATURES``, a JSON object of each feature's valid values,
``[]`` for a number) with some missing or extra, and the name of the served model
(``BAYESIFY_FUZZ_MODEL``) so that most requests reach it (and a share of them is valid)."""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from hypothesis import strategies as st

VALID: dict[str, list] = json.loads(os.environ.get("BAYESIFY_FUZZ_FEATURES", '{"x": []}'))
FEATURES = list(VALID)
MODEL = os.environ.get("BAYESIFY_FUZZ_MODEL", "toy")

HUGE = st.sampled_from([10**400, -(10**309), 2**64, 2**63, 1.7976931348623157e308, -1e39,
                        5e-324, 3.4028236e38])  # fmt: skip
ODD = st.one_of(
    st.booleans(),
    st.none(),
    st.from_regex(r"\A-?[0-9]{1,40}\Z"),
    st.sampled_from(["True", "false", "NaN", "Infinity", "1e400", "٣", "0x10", " 7 ", ""]),
    HUGE,
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=1),
)
PLAIN = st.floats(-3, 3)


VALUE = st.one_of(PLAIN, PLAIN, ODD)
NAME = st.one_of(st.sampled_from(FEATURES), st.text(min_size=1, max_size=6))
V1_FIELDS = ["samples", "tol", "start", "max_samples", "level", "seed", "model", "version",
             "return_samples"]  # fmt: skip
V2_PARAMETERS = ["samples", "tol", "start", "max_samples", "seed", "binary_data_output"]
SETTING = st.one_of(ODD, st.just("adaptive"), st.integers(0, 300), st.floats(0, 1))
#: valid sampling fields (v1) or parameters (v2)
SAMPLING = st.one_of(
    st.builds(lambda t: {"samples": t}, st.integers(1, 64)),
    st.builds(lambda tol: {"samples": "adaptive", "tol": tol, "start": 4, "max_samples": 16},
              st.floats(0, 0.5)),
)  # fmt: skip


def _valid(feature: str) -> st.SearchStrategy:
    return st.sampled_from(VALID[feature]) if VALID.get(feature) else PLAIN


@st.composite
def _row(draw: Any) -> Any:
    """A row of the served features, as an object or a list: half of them valid, the others
    with one thing wrong (an odd value, features dropped, fields added, a short list)."""
    values = {f: draw(_valid(f)) for f in FEATURES}
    change = draw(st.sampled_from(["none", "none", "none", "value", "drop", "add", "list"]))
    if change == "value":
        values[draw(st.sampled_from(FEATURES))] = draw(ODD)
    elif change == "drop":
        for f in draw(st.sets(st.sampled_from(FEATURES), min_size=1, max_size=3)):
            del values[f]
    elif change == "add":
        values.update(draw(st.dictionaries(NAME, VALUE, min_size=1, max_size=2)))
    elif change == "list" or draw(st.booleans()):
        row = list(values.values())
        return row if change != "list" else row[: draw(st.sampled_from([0, 1, 99]))]
    return values


def _served(body: dict) -> dict:
    """``body`` without the generated model name and version (the one model is served)."""
    return {k: v for k, v in body.items() if k not in ("model", "version")}


def _v1(body: dict) -> st.SearchStrategy:
    fields = st.dictionaries(st.one_of(st.sampled_from(V1_FIELDS), NAME), SETTING, max_size=3)
    fields = st.one_of(st.just({}), st.just({}), SAMPLING, fields)
    rows = st.lists(_row(), min_size=1, max_size=3)
    base = st.sampled_from([{}, {}, _served(body)])  # the generated fields: mostly too large
    return st.builds(lambda b, rows, extra: {**b, "inputs": rows, **extra}, base, rows, fields)


@st.composite
def _tensor(draw: Any, rows: int, name: str | None = None) -> dict:
    """A feature's tensor as a client should send it, or an odd one."""
    if name is not None:
        text = [v for v in VALID.get(name, []) if isinstance(v, str)]  # BYTES are strings
        datatype = "BYTES" if text else "FP64"
        values = st.sampled_from(text) if text else PLAIN
        data = draw(st.lists(values, min_size=rows, max_size=rows))
        return {"name": name, "shape": [rows], "datatype": datatype, "data": data}
    name = draw(NAME)
    datatype = draw(st.sampled_from(["FP64", "FP32", "INT64", "BOOL", "BYTES", "UINT8", "X"]))
    shape = draw(st.sampled_from([[rows], [rows, 1], [rows, 2], [0], [2**62]]))
    data = draw(st.lists(VALUE, min_size=rows, max_size=rows))
    out = {"name": name, "shape": shape, "datatype": datatype, "data": data}
    if draw(st.integers(0, 5)) == 0:
        out["parameters"] = draw(st.dictionaries(NAME, ODD, max_size=2))
    return out


@st.composite
def _v2(draw: Any, body: dict) -> dict:
    rows = draw(st.integers(1, 3))
    inputs = [draw(_tensor(rows, f)) for f in FEATURES]  # one tensor per feature
    change = draw(st.sampled_from(["none", "none", "none", "odd", "drop", "add", "other"]))
    if change == "odd":
        inputs[draw(st.integers(0, len(inputs) - 1))] = draw(_tensor(rows))
    elif change == "drop":
        del inputs[draw(st.integers(0, len(inputs) - 1))]
    elif change == "add":
        inputs.append(draw(_tensor(rows)))
    elif change == "other":
        inputs = draw(st.lists(_tensor(rows), min_size=1, max_size=3))
    names = st.one_of(st.sampled_from(V2_PARAMETERS), NAME)
    # the generated outputs and parameters mostly name none that exist
    out = {k: v for k, v in body.items() if k not in ("outputs", "parameters")}
    out["inputs"] = inputs
    parameters = st.one_of(SAMPLING, st.dictionaries(names, SETTING, max_size=4))
    if draw(st.booleans()):
        out["parameters"] = draw(parameters)
    return out


def _feedback(body: dict) -> st.SearchStrategy:
    outcome = st.fixed_dictionaries({"request_id": st.text(min_size=1, max_size=8),
                                     "outcome": ODD})  # fmt: skip
    outcomes = st.lists(outcome, min_size=1, max_size=3)
    return st.builds(lambda o: {**_served(body), "outcomes": o}, outcomes)


@schemathesis.hook
def flatmap_body(context: Any, body: Any) -> st.SearchStrategy:
    path = context.operation.path if context.operation is not None else ""
    if not isinstance(body, dict):
        return st.just(body)
    if path == "/v1/predict":
        return st.one_of(_v1(body), _v1(body), st.just(body))
    if path.endswith("/infer"):
        return st.one_of(_v2(body), _v2(body), st.just(body))
    if path == "/v1/feedback":
        return st.one_of(_feedback(body), st.just(body))
    return st.just(body)


@schemathesis.hook
def flatmap_path_parameters(context: Any, parameters: Any) -> st.SearchStrategy:
    """Mostly the served model (and version 1), sometimes what was generated."""
    if not isinstance(parameters, dict) or "name" not in parameters:
        return st.just(parameters)
    served = {**parameters, "name": MODEL}
    if "version" in parameters:
        served["version"] = "1"
    return st.one_of(st.just(served), st.just(served), st.just(parameters))
