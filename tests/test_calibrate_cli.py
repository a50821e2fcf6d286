"""``bayesify calibrate`` end to end: a yacht bundle gets a deferral policy on its validation
split, the saved policy is the one refitted from the same predictive, and weights are untouched."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bayesify.app.calibration import bundle_splits, predictive
from bayesify.cli import app
from bayesify.data import DataError, data_root
from bayesify.methods import load
from bayesify.posthoc.deferral import DeferralPolicy

runner = CliRunner()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    try:
        data_root()
    except DataError as e:
        pytest.skip(f"shared data not found: {e}")
    out = tmp_path_factory.mktemp("cal") / "yacht"
    args = ["train", "--method", "mcbn", "--data", "yacht", "--epochs", "3", "--out", str(out),
            "--option", "bank_size=8", "--no-eval"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out


def test_calibrate_stores_the_policy_fitted_on_validation(bundle):
    weights = (bundle / "weights.safetensors").read_bytes()
    args = ["calibrate", str(bundle), "--score", "std", "--coverage", "0.8", "--samples", "16",
            "--decision", "single"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "validation:" in result.output and "test:" in result.output
    assert (bundle / "weights.safetensors").read_bytes() == weights
    stored = json.loads((bundle / "config.json").read_text())["metadata"]["deferral"]
    method = load(bundle)
    policy = DeferralPolicy.from_metadata(method.metadata)
    assert policy.to_dict() == stored
    val, _ = bundle_splits(method)
    refit = DeferralPolicy.fit(predictive(method, val, 16, 0), val.y, score="std",
                               target_coverage=0.8)  # fmt: skip
    assert refit.threshold == pytest.approx(policy.threshold)
    assert policy.validation["coverage"] == pytest.approx(0.8, abs=1.5 / len(val.y))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "exactly one of --coverage and --error"),
        (["--coverage", "0.9", "--error", "0.1"], "exactly one"),
        (["--coverage", "0.9", "--score", "mi"], "score must be one of std, epistemic_variance"),
        (["--coverage", "0.9", "--data", "fashion-mnist"], "nor the bundle's own dataset"),
        (["--coverage", "0.9", "--target", "y"], "--target names the target column of"),
    ],
)
def test_calibrate_rejects_bad_options(bundle, args, message):
    result = runner.invoke(app, ["calibrate", str(bundle), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())


def test_calibrate_missing_bundle(tmp_path):
    result = runner.invoke(app, ["calibrate", str(tmp_path / "nope"), "--coverage", "0.9"])
    assert result.exit_code == 2 and "no bundle folder" in result.output


def test_a_test_table_of_the_split_rows_gives_the_built_in_test_figures(bundle, tmp_path):
    """The yacht test rows written out in raw units (features, then the target) and passed as
    --test FILE go through the bundle's preprocessing and give the figures of the built-in test
    split: the table path and the dataset path agree."""
    import pandas as pd

    from bayesify.data import load_uci

    s = load_uci("yacht", 0, protocol="teye")
    x = s.x_test.double() * s.scaler.x_std + s.scaler.x_mean  # raw units
    frame = pd.DataFrame(x.numpy(), columns=[f"f{j}" for j in range(x.shape[1])])
    frame["resistance"] = s.original_targets("test").numpy()
    frame.to_csv(tmp_path / "test.csv", index=False)
    args = ["calibrate", str(bundle), "--score", "std", "--coverage", "0.8", "--samples", "16",
            "--decision", "single"]  # fmt: skip
    built_in = runner.invoke(app, args)
    table = runner.invoke(app, [*args, "--test", str(tmp_path / "test.csv"), "--target",
                                "resistance"])  # fmt: skip
    assert built_in.exit_code == 0 and table.exit_code == 0, table.output
    line = [ln for ln in built_in.output.splitlines() if ln.startswith("test:")]
    assert line and line == [ln for ln in table.output.splitlines() if ln.startswith("test:")]
    stored = load(bundle).metadata["deferral"]["validation"]
    assert stored["data"] == "yacht validation split"
