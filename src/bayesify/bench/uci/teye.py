"""MCBN vs CUBN (and MC dropout vs CUDO) on UCI regression (Teye et al. 2018 §4).

Two presets of :class:`UCISettings`:

* ``"paper"`` — Teye et al.'s Table 1 protocol: 5-fold cross-validation on the training part over
  batch size 32…1024 (log₂ steps; energy capped at 512 as in their code) and weight decay
  10⁻¹⁵…10⁻¹ (log₁₀ steps), RMSE of the MC mean checked every 20 epochs (patience 10 checks, at
  most 2000 epochs); the final model retrained on the whole training part for the chosen epochs;
  T = 500 (a bank of 500 batches, one per sample); 5 test seeds per split; L2 on weight matrices
  only; MC dropout (rates {0.2, 0.1, 0.05, 0.01, 0.005, 0.001}, batch 32) and CUDO beside
  MCBN/CUBN; τ by Teye's rule (:mod:`bayesify.posthoc.noise`, ``noise_protocol="teye"``).
* ``"quick"`` (default) — the same search on one 20% hold-out, batch size {32, 128}, weight decay
  10⁻⁴, the deterministic net's RMSE checked every epoch (patience 30, at most 300), the hold-out
  model itself tested (no retraining), T = 200 from a bank of 256, one test seed, MCBN only.

Both select by validation RMSE and fit τ on the validation rows (CV: all folds' rows).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields, replace
from functools import partial
from typing import Any

import numpy as np
import torch

from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.bench.search import Dimension, SearchSettings, run_search
from bayesify.bench.uci.teye_cv import (
    Fold,
    TrainSpec,
    cross_validate,
    fold_predictive,
    load_weights,
    make_folds,
    teye_weight_decay,
    train_final,
)
from bayesify.data import RegressionSplit, load_uci
from bayesify.methods import MCBN, MCDropout, Method
from bayesify.models import mlp, teye_regression_net
from bayesify.options import NoiseProtocol
from bayesify.predictive import Predictive

log = logging.getLogger(__name__)

PAPER_BATCH_SIZES = (32, 64, 128, 256, 512, 1024)
#: Teye et al.'s code caps energy's batch size at 512 (at 1024 MCBN equals CUBN on it)
PAPER_BATCH_SIZES_SPECIFIC = {"energy": (32, 64, 128, 256, 512)}
PAPER_WEIGHT_DECAYS = tuple(float(10.0**-e) for e in range(1, 16))  # 1e-1 ... 1e-15
PAPER_DROPOUT_RATES = (0.2, 0.1, 0.05, 0.01, 0.005, 0.001)
PRESETS = ("quick", "paper")


@dataclass(frozen=True)
class UCISettings:
    """Training, search and scoring settings of one UCI run (module docstring: the presets).

    ``weight_decays`` are Teye's L2 factors λ (loss ½·MSE + λ·½‖W‖²); ``cv_folds`` 0 means one
    hold-out of 20%; ``cv_samples`` is T for the RMSE checks (0: the deterministic net);
    ``refit`` retrains on the whole training part for the chosen epochs; ``decay_all`` puts the
    L2 penalty on every parameter instead of the weight matrices only.
    """

    protocol: str = "teye"  # the 80/20 splits (bayesify.data.load_uci)
    preset: str = "quick"
    epochs: int = 300  # at most
    check_every: int = 1
    patience: int = 30  # checks without improvement
    batch_sizes: tuple[int, ...] = (32, 128)
    weight_decays: tuple[float, ...] = (1e-4,)
    lr: float = 1e-3
    decay_all: bool = False
    cv_folds: int = 0
    cv_samples: int = 0
    refit: bool = False
    samples: int = 200
    bank_size: int = 256
    test_seeds: int = 1
    noise_protocol: str = NoiseProtocol.TEYE.value
    mc_dropout: bool = False
    dropout_rates: tuple[float, ...] = (0.05,)
    dropout_batch_size: int = 32

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; valid: {', '.join(PRESETS)}")
        NoiseProtocol(self.noise_protocol)
        for name in ("epochs", "check_every", "patience", "samples", "bank_size", "test_seeds"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.cv_folds == 1 or self.cv_folds < 0:
            raise ValueError(f"cv_folds must be 0 (hold-out) or >= 2, got {self.cv_folds}")
        if not self.batch_sizes or min(self.batch_sizes) < 2:
            raise ValueError(f"batch sizes must be >= 2, got {self.batch_sizes}")
        if not self.weight_decays or min(self.weight_decays) < 0:
            raise ValueError(f"weight decays must be >= 0, got {self.weight_decays}")

    @classmethod
    def from_preset(cls, name: str = "quick", **overrides: Any) -> UCISettings:
        """The ``"quick"`` or ``"paper"`` settings (module docstring), with ``overrides``."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
        base = cls()
        if name == "paper":
            base = replace(
                base, preset="paper", epochs=2000, check_every=20, patience=10,
                batch_sizes=PAPER_BATCH_SIZES, weight_decays=PAPER_WEIGHT_DECAYS, cv_folds=5,
                cv_samples=500, refit=True, samples=500, bank_size=500, test_seeds=5,
                mc_dropout=True, dropout_rates=PAPER_DROPOUT_RATES,
            )  # fmt: skip
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown UCI setting(s) {sorted(unknown)}; valid: {sorted(known)}")
        return replace(base, **overrides)

    def batch_sizes_for(self, dataset: str) -> tuple[int, ...]:
        """The batch-size grid for ``dataset`` (the paper preset caps energy at 512)."""
        if self.preset == "paper" and self.batch_sizes == PAPER_BATCH_SIZES:
            return PAPER_BATCH_SIZES_SPECIFIC.get(dataset, self.batch_sizes)
        return self.batch_sizes


@dataclass
class UCIRun:
    """One split: the tested MCBN (first seed), the split, its test predictive in original
    units, the noise fit, the per-method scores (mean over test seeds) and each seed's."""

    method: Method
    split: RegressionSplit
    pred: Predictive  # MCBN test predictive in original units, with its τ
    noise: NoiseFit  # MCBN's τ and CUBN's variance, model units
    scores: dict[str, dict[str, float]]
    seed_scores: list[dict[str, dict[str, float]]]


def _folds(data: RegressionSplit, s: UCISettings, seed: int) -> list[Fold]:
    if s.cv_folds == 0:
        return [Fold(data.x_train, data.y_train, data.x_val, data.y_val)]
    return make_folds(data.x_train, data.y_train, s.cv_folds, seed=seed)


def _builders(kind: str, data: RegressionSplit, s: UCISettings, rate: float = 0.0):
    """(build for the search, build for the tested model) of ``kind`` "mcbn" or "mcdo"."""
    hidden = 100 if data.name.startswith("protein") else 50
    d = data.n_features
    if kind == "mcbn":
        cv_bank = max(s.cv_samples, 1)
        return (
            lambda: MCBN(teye_regression_net(d, hidden=hidden), bank_size=cv_bank),
            lambda: MCBN(teye_regression_net(d, hidden=hidden), bank_size=s.bank_size),
        )
    net = lambda: mlp(d, 1, (hidden, hidden), norm=None, dropout=rate)  # noqa: E731
    return (lambda: MCDropout(net()), lambda: MCDropout(net()))


def _space(kind: str, data: RegressionSplit, s: UCISettings) -> list[Dimension]:
    """The search space in the paper's loop order: batch size (MCBN) or dropout rate (MC
    dropout, at ``dropout_batch_size``) outermost, weight decay λ inside."""
    decays = Dimension("weight_decay", tuple(s.weight_decays), log=min(s.weight_decays) > 0)
    if kind == "mcbn":
        sizes = s.batch_sizes_for(data.name)
        return [Dimension("batch_size", tuple(sizes), log=True, integer=True), decays]
    return [Dimension("dropout", tuple(s.dropout_rates), log=min(s.dropout_rates) > 0), decays]


def _cv_trial(kind: str, data: RegressionSplit, folds: list[Fold], s: UCISettings, seed: int,
              params: dict[str, Any], report: Any):  # fmt: skip
    """One configuration's cross-validation: (CV RMSE, (result, spec, builders, chosen))."""
    b = int(params.get("batch_size", s.dropout_batch_size))
    lam, p = float(params["weight_decay"]), float(params.get("dropout", 0.0))
    spec = TrainSpec(b, s.lr, teye_weight_decay(lam), s.decay_all)
    build = _builders(kind, data, s, p)
    res = cross_validate(
        build[0], folds, spec, max_epochs=s.epochs, check_every=s.check_every,
        patience=s.patience, samples=s.cv_samples, seed=seed, report=report,
    )  # fmt: skip
    log.info("%s %s b=%d λ=%g p=%g: CV RMSE %.4f", data.name, kind, b, lam, p, res.rmse)
    return res.rmse, (res, spec, build, {"batch_size": b, "weight_decay": lam, "dropout": p})


def _search(kind: str, data: RegressionSplit, folds: list[Fold], s: UCISettings, seed: int,
            search: SearchSettings | None = None):  # fmt: skip
    """The search (:func:`~bayesify.bench.search.run_search`, by default the full grid);
    returns (CV result, spec, build pair, chosen hyper-parameters)."""
    objective = partial(_cv_trial, kind, data, folds, s, seed)
    return run_search(objective, _space(kind, data, s), search).artefact


def evaluate_kind(kind: str, data: RegressionSplit, s: UCISettings, seed: int,
                  search: SearchSettings | None = None):  # fmt: skip
    """Search (``search``: how; default the full grid), fit τ on the validation rows, test
    every seed; (models, fit, per-seed scores, chosen settings)."""
    folds = _folds(data, s, seed)
    res, spec, build, chosen = _search(kind, data, folds, s, seed, search)
    # τ and the constant baseline on the validation rows, with the tested T and bank size
    val_pred, y_val = fold_predictive(build[1], folds, res, spec, samples=s.samples, seed=seed)
    fit = NoiseFit.fit(val_pred, y_val, protocol=s.noise_protocol, dataset=data.name,
                       y_scale=float(data.scaler.y_std))  # fmt: skip
    x_all = torch.cat([data.x_train, data.x_val]) if s.refit else data.x_train
    y_all = torch.cat([data.y_train, data.y_val]) if s.refit else data.y_train
    loc, scale = data.scaler.y_mean, data.scaler.y_std
    models, per_seed = [], []
    for t in range(s.test_seeds):
        if s.refit:
            method = train_final(build[1], x_all, y_all, spec, res.epochs, seed + 1000 * t)
        else:  # the hold-out model at its best check, finished with the tested bank size
            method = build[1]()
            load_weights(method.net, res.states[0])
            _finish_holdout(method, folds[0], spec, seed)
        method.noise_variance = fit.noise_crps
        method.constant_variance = fit.constant_crps
        pred = method.predict(data.x_test, samples=s.samples, seed=seed + 1 + t)
        y = data.y_test_original.to(pred.samples.dtype)
        per_seed.append(regression_scores(pred, y, fit, loc=loc, scale=scale))
        models.append((method, pred))
    # τ⁻¹ and the constant variance used for PLL, in original target units²
    var = float(data.scaler.y_std) ** 2
    info = {**chosen, "epochs": res.epochs, "cv_rmse": res.rmse,
            "noise_var": fit.noise_pll * var, "constant_var": fit.constant_pll * var}  # fmt: skip
    return models, fit, per_seed, info


def _finish_holdout(method: Method, fold: Fold, spec: TrainSpec, seed: int) -> None:
    """Finish a hold-out model as ``fit`` would (fill MCBN's bank) without training it."""
    method._remember_input_shape(torch.utils.data.TensorDataset(fold.x_train, fold.y_train))
    method._after_fit((fold.x_train, fold.y_train), spec.batch_size, seed)


def _mean_scores(per_seed: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([p[k] for p in per_seed])) for k in per_seed[0]}


def run_mcbn_split(name: str, split: int, settings: UCISettings, *, seed: int = 0) -> UCIRun:
    """Search, train and score MCBN / CUBN (and MC dropout / CUDO with ``settings.mc_dropout``)
    on one split's test set, in original units. The test set is never looked at before scoring.
    """
    s = settings
    # CV folds split the whole training part; the hold-out is its last 20%
    data = load_uci(name, split, protocol=s.protocol, val_fraction=0.0 if s.cv_folds else 0.2)
    kinds = {"mcbn": ("MCBN", "CUBN")}
    if s.mc_dropout:
        kinds["mcdo"] = ("MCDO", "CUDO")
    seed_scores: list[dict[str, dict[str, float]]] = [{} for _ in range(s.test_seeds)]
    scores: dict[str, dict[str, float]] = {}
    first = None
    for kind, (mc, cu) in kinds.items():
        models, fit, per_seed, info = evaluate_kind(kind, data, s, seed + split)
        for t, sc in enumerate(per_seed):
            seed_scores[t][mc], seed_scores[t][cu] = sc["MC"], sc["CU"]
        scores[mc] = {**_mean_scores([p["MC"] for p in per_seed]), **info}
        scores[cu] = _mean_scores([p["CU"] for p in per_seed])
        if kind == "mcbn":
            first = (models[0], fit, info)
    assert first is not None
    (method, pred), fit, info = first
    method.metadata = {
        "data": name, "split": split, "protocol": s.protocol, "scaler": data.scaler.to_dict(),
        "settings": asdict(s), **info,
    }  # fmt: skip
    loc, scale = data.scaler.y_mean, data.scaler.y_std
    log.info("%s split %d: %s", name, split, scores["MCBN"])
    return UCIRun(method, data, pred.affine(loc, scale), fit, scores, seed_scores)
