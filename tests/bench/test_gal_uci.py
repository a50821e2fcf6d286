"""Gal's UCI protocol through the runner: jobs per preset, the rate chosen on validation only."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from bayesify.bench.experiments import gal_uci
from bayesify.data import DataError, data_root


@pytest.fixture(autouse=True)
def need_data():
    try:
        (data_root() / "uci" / "yacht").resolve(strict=True)
    except (DataError, FileNotFoundError) as e:
        pytest.skip(f"shared UCI data not found: {e}")


def test_presets_make_one_job_per_dataset_split_and_likelihood():
    quick = gal_uci.GalUCIOptions().jobs()
    assert len(quick) == 5 * 3 * 2
    assert {j.dropout_rates for j in quick} == {(0.01, 0.05)}
    paper = gal_uci.GalUCIOptions(preset="paper", likelihoods=("homoscedastic",)).jobs()
    assert len(paper) == 8 * 20 + 5  # protein has 5 standard splits
    assert {j.hidden for j in paper if j.dataset == "protein-tertiary-structure"} == {100}
    with pytest.raises(ValueError, match="unknown preset"):
        gal_uci.GalUCIOptions(preset="full")


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
    assert [s[0] for s in seen] == [0.01, 0.2]
    n_fit, n_val, n_test = seen[0][1:]
    assert n_fit + n_val + n_test == 308 and n_val == 278 - int(0.8 * 278)  # yacht: 308 rows
    assert metrics["dropout"] in (0.01, 0.2)
    assert math.isfinite(metrics["ll"]) and metrics["rmse"] > 0 and metrics["crps"] > 0
    # the chosen rate is the one with the higher validation log-likelihood: rerun alone
    alone = gal_uci.score_job(replace(job, dropout_rates=(metrics["dropout"],)))
    assert alone["val_ll_standardised"] == pytest.approx(metrics["val_ll_standardised"])
    other = 0.2 if metrics["dropout"] == 0.01 else 0.01
    worse = gal_uci.score_job(replace(job, dropout_rates=(other,)))
    assert worse["val_ll_standardised"] <= metrics["val_ll_standardised"]
