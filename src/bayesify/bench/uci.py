"""MCBN vs its constant-uncertainty baseline (CUBN) on UCI regression (Teye et al. 2018 §4)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.data import RegressionSplit, load_uci
from bayesify.methods import MCBN
from bayesify.models import teye_regression_net
from bayesify.predictive import Predictive
from bayesify.seeding import seeded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UCISettings:
    """Training and prediction settings for one UCI run (Teye et al.'s network and protocol)."""

    protocol: str = "teye"
    epochs: int = 300
    batch_sizes: tuple[int, ...] = (32, 128)  # chosen per split on validation CRPS
    lr: float = 1e-3
    weight_decay: float = 1e-4
    patience: int = 30
    samples: int = 200
    bank_size: int = 256
    noise_objective: str = "crps"


@dataclass
class UCIRun:
    """One trained split: the method, the split, and test predictives in original units."""

    method: MCBN
    split: RegressionSplit
    pred: Predictive  # test predictive in original units (τ fitted for config.noise_objective)
    noise: NoiseFit  # τ and constant variances per metric, model units
    scores: dict[str, dict[str, float]]


def _train(data: RegressionSplit, settings: UCISettings, batch_size: int, seed: int) -> MCBN:
    hidden = 100 if data.name.startswith("protein") else 50
    with seeded(seed):
        net = teye_regression_net(data.n_features, hidden=hidden)
        method = MCBN(net, bank_size=settings.bank_size, noise_objective=settings.noise_objective)
    return method.fit(
        (data.x_train, data.y_train),
        val=(data.x_val, data.y_val),
        epochs=settings.epochs,
        batch_size=batch_size,
        lr=settings.lr,
        weight_decay=settings.weight_decay,
        patience=settings.patience,
        seed=seed,
        progress=False,
    )


def run_mcbn_split(name: str, split: int, settings: UCISettings, *, seed: int = 0) -> UCIRun:
    """Train MCBN on one split and score MCBN and CUBN on its test set (original units).

    The batch size b (training and bank, as in Teye et al.) is chosen from
    ``settings.batch_sizes`` by the validation CRPS of the MCBN predictive; Teye et al. chose it
    (with weight decay) by cross-validation. The test set is never looked at before scoring.
    """
    data = load_uci(name, split, protocol=settings.protocol)
    best = None
    for b in settings.batch_sizes:
        method = _train(data, settings, b, seed + split)
        val_pred = method.predict(data.x_val, samples=settings.samples, seed=seed)
        fit = NoiseFit.fit(val_pred, data.y_val)
        val_crps = regression_scores(val_pred, data.y_val, fit)["MC"]["crps"]
        log.info("%s split %d, b=%d: validation CRPS %.4f", name, split, b, val_crps)
        if best is None or val_crps < best[0]:
            best = (val_crps, b, method, fit)
    assert best is not None
    _, b, method, fit = best
    method.metadata = {
        "data": name, "split": split, "protocol": settings.protocol,
        "scaler": data.scaler.to_dict(), "settings": asdict(settings), "batch_size": b,
    }  # fmt: skip
    pred = method.predict(data.x_test, samples=settings.samples, seed=seed + 1)
    y = data.y_test_original.to(pred.samples.dtype)
    loc, scale = data.scaler.y_mean, data.scaler.y_std
    raw = regression_scores(pred, y, fit, loc=loc, scale=scale)
    scores = {"MCBN": {**raw["MC"], "batch_size": b}, "CUBN": raw["CU"]}
    log.info("%s split %d: %s", name, split, scores["MCBN"])
    return UCIRun(method, data, pred.affine(loc, scale), fit, scores)
