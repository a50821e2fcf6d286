"""Gal's UCI protocol for MC dropout: the job keys of stores written by the earlier ``bench
gal-uci`` command are kept, and the rate is chosen on validation only."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from bayesify.bench.runner import job_config, job_key
from bayesify.bench.uci import gal as gal_uci
from bayesify.bench.uci.command import UCIBenchOptions
from bayesify.bench.uci.jobs import GAL_EXPERIMENT, gal_jobs
from bayesify.data import DataError, data_root
from bayesify.data.uci import UCI_DATASETS

#: the last commit whose gal_uci.py built the jobs itself (GalUCIOptions.jobs)
OLD_COMMIT = "6137f80"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def need_data():
    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")


def _old_gal_uci(tmp_path: Path):
    """The gal_uci module as it was before ``bench uci`` took over, from git history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{OLD_COMMIT}:src/bayesify/bench/uci/gal.py"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"git history with commit {OLD_COMMIT} not available: {e}")
    path = tmp_path / "old_gal_uci.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_gal_uci", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_gal_uci"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["old_gal_uci"]
    return module


def test_mc_dropout_rows_keep_their_keys(tmp_path):
    old = _old_gal_uci(tmp_path)
    for preset in ("quick", "paper"):
        before = old.GalUCIOptions(preset=preset, datasets=UCI_DATASETS, splits=20).jobs()
        after = gal_jobs(("mc-dropout",), UCI_DATASETS, 20, None, preset)
        assert old.EXPERIMENT == GAL_EXPERIMENT and {e for e, _ in after} == {GAL_EXPERIMENT}
        assert [job_config(j) for j in before] == [
            job_config(j) for j in sorted((j for _, j in after),
                                          key=lambda j: (UCI_DATASETS.index(j.dataset),
                                                         j.likelihood != "homoscedastic", j.split))
        ]  # fmt: skip
        keys_before = {job_key(old.EXPERIMENT, j) for j in before}
        assert keys_before == {job_key(e, j) for e, j in after}
    # the command's default quick MC dropout jobs are the old command's default ones
    default_before = {job_key(old.EXPERIMENT, j) for j in old.GalUCIOptions().jobs()}
    opts = UCIBenchOptions(methods=("mc-dropout",))
    assert default_before == {job_key(e, j) for e, j in opts.jobs()}


def test_rate_is_chosen_on_validation_and_test_is_only_scored(monkeypatch):
    torch.set_num_threads(1)
    job = gal_uci.GalUCIJob("mc-dropout", "yacht", 0, dropout_rates=(0.01, 0.2), epochs=3,
                            samples=20, likelihood="heteroscedastic")  # fmt: skip
    seen = []
    original = gal_uci._train

    def spy(job, data, p):
        seen.append((p, len(data.x_train), len(data.x_val), len(data.x_test)))
        return original(job, data, p)

    monkeypatch.setattr(gal_uci, "_train", spy)
    metrics = gal_uci.score_job(job)
    assert sorted(s[0] for s in seen) == [0.01, 0.2]  # each once (Optuna's grid order)
    n_fit, n_val, n_test = seen[0][1:]
    assert n_fit + n_val + n_test == 308 and n_val == 278 - int(0.8 * 278)  # yacht: 308 rows
    assert metrics["dropout"] in (0.01, 0.2)
    assert math.isfinite(metrics["ll"]) and metrics["rmse"] > 0 and metrics["crps"] > 0
    # CUDO: the same mean with one variance, so the same RMSE and a finite LL of its own
    assert math.isfinite(metrics["cu_ll"]) and metrics["cu_ll"] != metrics["ll"]
    assert len(metrics["ue_std"]) == len(metrics["ue_rmse"]) == 10
    # the chosen rate is the one with the higher validation log-likelihood: rerun alone
    alone = gal_uci.score_job(replace(job, dropout_rates=(metrics["dropout"],)))
    assert alone["val_ll_standardised"] == pytest.approx(metrics["val_ll_standardised"])
    other = 0.2 if metrics["dropout"] == 0.01 else 0.01
    worse = gal_uci.score_job(replace(job, dropout_rates=(other,)))
    assert worse["val_ll_standardised"] <= metrics["val_ll_standardised"]
