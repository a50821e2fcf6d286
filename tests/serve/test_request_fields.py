"""Request fields as a table user expects them, on a real ``bayesify serve`` process serving a
folder of two bundles (:mod:`.request_bundles`): JSON values taken as they are typed (``true``
is not 1.0; booleans only in boolean columns), unknown fields refused by name (table rows, the
request body, v2 parameters), every missing feature named, v1 probabilities keyed by class
name, and adaptive sampling asked per request (v1 fields, v2 parameters): validated, honoured,
and refused where the bundle's conformal calibration does not hold for the policy asked."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from bayesify.bench.process import start_server
from bayesify.serve.rows import names_listed

from .request_bundles import (
    CALIBRATED_POLICY,
    NUMBERS,
    SPECIES,
    make_calibrated_bundle,
    make_table_bundle,
    table_row,
)

MAX_SAMPLES = 64  # the server's --max-samples


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    make_table_bundle(root / "flowers")
    make_calibrated_bundle(root / "calibrated")
    srv = start_server(root, tmp_path_factory.mktemp("log") / "server.log", "--threads", "1",
                       "--samples", "8", "--max-samples", str(MAX_SAMPLES),
                       name=None)  # fmt: skip
    yield srv.url
    srv.stop()


def _v1(url: str, body: dict, model: str = "flowers") -> httpx.Response:
    return httpx.post(f"{url}/v1/predict", json={"model": model, **body}, timeout=60)


def _error(r: httpx.Response, status: int = 422) -> dict:
    assert r.status_code == status, r.text
    return r.json()["detail"][0]


def _features(rows: list[dict], parameters: dict | None = None) -> dict:
    """A v2 request of raw feature tensors, one per column of ``rows``."""
    inputs = [{"name": f, "shape": [len(rows)], "datatype": "FP64" if f in NUMBERS else "BYTES",
               "data": [r[f] for r in rows]} for f in rows[0]]  # fmt: skip
    return {"inputs": inputs, **({"parameters": parameters} if parameters else {})}


def _v2(url: str, body: dict, model: str = "flowers") -> httpx.Response:
    return httpx.post(f"{url}/v2/models/{model}/infer", json=body, timeout=60)


# ---------------------------------------------------------------------------- typed values
def test_true_in_a_number_or_text_column_is_refused_naming_the_field(url):
    d = _error(_v1(url, {"inputs": [{**table_row(0), "f3": True}]}))
    assert d["loc"] == ["body", "inputs", 0, "f3"] and "true/false" in d["msg"], d
    listed = list(table_row(0).values())
    d = _error(_v1(url, {"inputs": [[False, *listed[1:]]]}))
    assert d["loc"] == ["body", "inputs", 0, 0] and "feature 'f0'" in d["msg"], d
    d = _error(_v1(url, {"inputs": [{**table_row(0), "zone": True}]}))
    assert d["loc"] == ["body", "inputs", 0, "zone"] and "'east'" in d["msg"], d
    d = _error(_v1(url, {"inputs": [table_row(0)], "samples": True}))
    assert d["loc"][:2] == ["body", "samples"], d
    d = _error(_v1(url, {"inputs": [[True, 0.0, 0.0, 0.0]]}, "calibrated"))
    assert d["loc"] == ["body", "inputs", 0, 0], d


def test_booleans_are_the_values_of_a_boolean_column(url):
    row = table_row(1)  # wet: "True"
    typed = _v1(url, {"inputs": [{**row, "wet": True}], "seed": 5})
    text = _v1(url, {"inputs": [row], "seed": 5})
    assert typed.status_code == 200, typed.text
    assert typed.json()["predictions"][0]["probabilities"] == \
        text.json()["predictions"][0]["probabilities"]  # fmt: skip
    flipped = _v1(url, {"inputs": [{**row, "wet": False}], "seed": 5}).json()
    assert flipped["predictions"][0]["probabilities"] != \
        text.json()["predictions"][0]["probabilities"]  # fmt: skip


@pytest.mark.parametrize("spelled", ["true", "TRUE", "False"])
def test_true_and_false_as_text_are_the_values_of_a_boolean_column(url, spelled):
    row = table_row(1)  # wet: "True"
    wet = spelled.lower() == "true"
    typed = _v1(url, {"inputs": [{**row, "wet": wet}], "seed": 5}).json()["predictions"]
    text = _v1(url, {"inputs": [{**row, "wet": spelled}], "seed": 5})
    assert text.status_code == 200, text.text
    assert text.json()["predictions"][0]["probabilities"] == typed[0]["probabilities"]
    v2 = _v2(url, {**_features([{**row, "wet": spelled}]), "parameters": {"seed": 5}})
    assert v2.status_code == 200, v2.text
    same = _v2(url, {**_features([{**row, "wet": str(wet)}]), "parameters": {"seed": 5}})
    served = [{o["name"]: o["data"] for o in r.json()["outputs"]} for r in (v2, same)]
    assert served[0]["probabilities"] == served[1]["probabilities"]


# ---------------------------------------------------------------------------- field names
def test_unknown_fields_of_a_row_are_refused_by_name(url):
    d = _error(_v1(url, {"inputs": [table_row(0), {**table_row(1), "colour": 1, "é": 2}]}))
    assert d["loc"] == ["body", "inputs", 1], d
    assert "unknown field(s) ['colour', 'é']" in d["msg"], d
    d = _error(_v1(url, {"inputs": [{**table_row(0), "species": "setosa"}]}))
    assert "'species' is the target" in d["msg"], d


def test_every_missing_feature_is_named(url):
    row = {"zone": "east", "wet": "True", "f11": 0.0}
    d = _error(_v1(url, {"inputs": [row]}))
    assert d["loc"] == ["body", "inputs", 0], d
    assert f"missing feature(s) {NUMBERS[:11]}" in d["msg"], d
    r = _v2(url, _features([{"f0": 1.0}]))
    assert r.status_code == 422 and str([*NUMBERS[1:], "zone", "wet"]) in r.json()["error"], r.text


def test_long_lists_of_names_give_their_count():
    names = [f"c{i}" for i in range(120)]
    text = names_listed(names)
    assert text.startswith("['c0', 'c1'") and "'c49', ... (120 in all)]" in text
    assert "'c50'" not in text
    assert names_listed(names[:3]) == "['c0', 'c1', 'c2']"


def test_unknown_body_fields_and_parameters_are_refused_by_name(url):
    d = _error(_v1(url, {"inputs": [table_row(0)], "sample": 8}))
    assert d["loc"] == ["body", "sample"], d
    r = _v2(url, _features([table_row(0)], {"samples": 8, "smaples": 8, "ünï": 1}))
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith("parameters: unknown parameter(s) ['smaples', 'ünï']")
    body = _features([table_row(0)])
    body["inputs"][0]["parameters"] = {"shared_memory_region": "x"}
    r = _v2(url, body)
    assert r.status_code == 422 and "inputs.0.parameters" in r.json()["error"], r.text
    body = _features([table_row(0)])
    body["inputs"][0]["dtype"] = "FP64"
    r = _v2(url, body)
    assert r.status_code == 422 and "inputs.0.dtype" in r.json()["error"], r.text
    ok = _v2(url, _features([table_row(0)], {"samples": 8, "binary_data_output": False}))
    assert ok.status_code == 200, ok.text  # the protocol's own parameters are taken


# ---------------------------------------------------------------------------- class names
@pytest.mark.parametrize(("model", "names"), [("flowers", SPECIES),
                                              ("calibrated", ["low", "mid", "high"])])  # fmt: skip
def test_v1_probabilities_are_keyed_by_class_name(url, model, names):
    rows = [table_row(i) for i in range(5)] if model == "flowers" else [[0.1, -1, 2, 0.5]] * 2
    r = _v1(url, {"inputs": rows, "samples": 16}, model)
    assert r.status_code == 200, r.text
    for p in r.json()["predictions"]:
        by_name = p["class_probabilities"]
        assert list(by_name) == names
        assert list(by_name.values()) == p["probabilities"]  # the list stays, same numbers
        assert max(by_name, key=by_name.get) == p["label"]
        assert sum(by_name.values()) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- adaptive
def _used(r: httpx.Response) -> list[int]:
    assert r.status_code == 200, r.text
    return [p["samples_used"] for p in r.json()["predictions"]]


def test_adaptive_sampling_per_request_stops_each_row_at_its_tolerance(url):
    rows = [table_row(i) for i in range(30)]
    ask = {"inputs": rows, "samples": "adaptive", "start": 4, "max_samples": 32}
    assert set(_used(_v1(url, {**ask, "tol": 0.0}))) == {32}
    assert set(_used(_v1(url, {**ask, "tol": 1.0}))) == {4}
    tol = 0.03
    r = _v1(url, {**ask, "tol": tol, "return_samples": True})
    used = _used(r)
    assert len(set(used)) > 1, used
    for p, t in zip(r.json()["predictions"], used, strict=True):
        own = np.asarray(p["samples"][:t])  # [t, C]: the row's distinct samples
        se = (own.std(0, ddof=1) / np.sqrt(t)).max()
        assert se <= tol + 1e-9 or t == 32
        half = own[: t // 2]
        assert t == 4 or (half.std(0, ddof=1) / np.sqrt(t // 2)).max() > tol - 1e-9
    v2 = _v2(url, _features(rows[:3], {"samples": "adaptive", "tol": 0, "start": 4,
                                       "max_samples": 8}))  # fmt: skip
    assert v2.status_code == 200, v2.text
    out = {o["name"]: o["data"] for o in v2.json()["outputs"]}
    assert out["samples_used"] == [8, 8, 8]


@pytest.mark.parametrize(
    ("fields", "loc", "msg"),
    [
        ({"samples": "adaptive"}, "tol", "needs tol"),
        ({"samples": "adaptive", "tol": 0.1, "max_samples": 24}, "max_samples", "power of two"),
        (
            {"samples": "adaptive", "tol": 0.1, "start": 8, "max_samples": 128},
            "max_samples",
            f"at most {MAX_SAMPLES}",
        ),
        ({"samples": 8, "tol": 0.1}, "tol", 'only with samples "adaptive"'),
        ({"samples": "adaptive", "tol": -1}, "tol", "0"),
        ({"samples": "many"}, "samples", ""),
    ],
)
def test_bad_adaptive_requests_are_refused_naming_the_field(url, fields, loc, msg):
    r = _v1(url, {"inputs": [table_row(0)], **fields})
    assert r.status_code == 422, r.text
    details = r.json()["detail"]
    assert any(d["loc"][:2] == ["body", loc] and msg in d["msg"] for d in details), details
    v2 = _v2(url, _features([table_row(0)], fields))
    assert v2.status_code == 422 and v2.json()["error"].startswith(f"parameters.{loc}"), v2.text


def test_adaptive_sampling_is_refused_where_the_conformal_sets_do_not_hold(url):
    tol, start, most = CALIBRATED_POLICY
    rows = [[0.1, -1, 2, 0.5], [1, 1, 1, 1]]
    ask = {"inputs": rows, "samples": "adaptive", "start": start, "max_samples": most}
    ok = _v1(url, {**ask, "tol": tol}, "calibrated")
    assert set(_used(ok)) <= {4, 8, 16} and "warnings" not in ok.json()
    d = _error(_v1(url, {**ask, "tol": 0.02}, "calibrated"))
    assert d["loc"] == ["body", "samples"], d
    assert "adaptive tol=0.02 T=4..16 is not served" in d["msg"], d
    assert "made under T=8, adaptive tol=0.05 T=4..16 only" in d["msg"], d
    v2 = _v2(url, {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP64", "data": rows}],
                   "parameters": {"samples": "adaptive", "tol": 0.02, "start": 4,
                                  "max_samples": 16}}, "calibrated")  # fmt: skip
    assert v2.status_code == 422 and "parameters.samples" in v2.json()["error"], v2.text
    fixed = _v1(url, {"inputs": rows, "samples": 32}, "calibrated")  # a fixed T: a warning
    assert fixed.status_code == 200 and fixed.json()["warnings"], fixed.text
