"""PLL under one CRPS-fitted tau: the authors' range vs an unbounded one (yacht, energy)."""

import torch

from bayesify.bench.scores import NoiseFit, regression_scores
from bayesify.bench.uci.teye import UCISettings, _folds, _search
from bayesify.bench.uci.teye_cv import fold_predictive, train_final
from bayesify.data import load_uci

torch.set_num_threads(1)
s = UCISettings.from_preset(
    "paper",
    epochs=200,
    batch_sizes=(32, 128),
    weight_decays=(1e-4, 1e-2),
    cv_samples=20,
    test_seeds=1,
    mc_dropout=False,
)
for name in ("yacht", "energy"):
    data = load_uci(name, 0, protocol="teye", val_fraction=0.0)
    folds = _folds(data, s, 0)
    res, spec, build, chosen = _search("mcbn", data, folds, s, 0)
    val_pred, y_val = fold_predictive(build[1], folds, res, spec, samples=s.samples, seed=0)
    m = train_final(build[1], data.x_train, data.y_train, spec, res.epochs, 0)
    m.noise_variance = 1.0
    pred = m.predict(data.x_test, samples=s.samples, seed=1)
    y = data.y_test_original.to(pred.samples.dtype)
    sc = float(data.scaler.y_std)
    for label, kw in (
        ("teye, authors' range", {"protocol": "teye", "dataset": name}),
        ("teye, tau in [1e-3, 1e12]", {"protocol": "teye", "tau_range": (1e-3, 1e12)}),
        ("bayesify (tau per metric)", {"protocol": "bayesify"}),
    ):
        fit = NoiseFit.fit(val_pred, y_val, y_scale=sc, **kw)
        r = regression_scores(pred, y, fit, loc=data.scaler.y_mean, scale=sc)["MC"]
        print(
            f"| {name} | {label} | {fit.noise_pll * sc**2:.3g} | {fit.noise_crps * sc**2:.3g} | "
            f"{r['pll']:.3f} | {r['pll_norm']:.2f} | {r['crps_norm']:.2f} |"
        )
