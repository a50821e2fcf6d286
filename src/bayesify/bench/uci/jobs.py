"""The jobs of ``bayesify bench uci``: which rows a preset runs for each protocol and method.

Gal's protocol (standard 90/10 splits): MC dropout is a
:class:`~bayesify.bench.uci.gal.GalUCIJob` in the experiment ``gal-uci`` (its fields
and values are those of the earlier ``bench gal-uci`` command, so rows already in a store are
reused); every other method is a
:class:`~bayesify.bench.uci.gal_methods.UCIMethodJob` in ``uci-gal``. Teye et al.'s
protocol (5 seeded 80/20 splits): MCBN (+CUBN) and MC dropout (+CUDO) as a :class:`TeyeUCIJob`
in ``uci-teye``, scored with :mod:`bayesify.bench.uci.teye`'s search and τ protocol.

Quick grids are sized so that one method over all nine datasets and all splits runs in about
half an hour on one CPU core (times per job in ``benchmarks/uci.md``): the five small datasets
train 100 epochs at batch size 32, kin8nm, naval, power and protein 20 epochs at batch size 256
(the deep ensemble, which has no grid: 40 epochs at batch size 100, Lakshminarayanan et al.'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bayesify.bench.search import SearchJob
from bayesify.bench.uci.gal import PRESETS as GAL_PRESETS
from bayesify.bench.uci.gal import GalUCIJob
from bayesify.bench.uci.gal_methods import HOMOSCEDASTIC_ONLY, UCIMethodJob
from bayesify.data.uci import TEYE_N_SPLITS, UCI_DATASETS
from bayesify.methods.core.likelihood import Likelihood

GAL_EXPERIMENT = "gal-uci"  # MC dropout rows (the experiment name of the earlier command)
METHODS_EXPERIMENT = "uci-gal"  # every other method on Gal's splits
TEYE_EXPERIMENT = "uci-teye"
PROTOCOLS = ("gal", "teye")
GAL_METHODS = ("mc-dropout", "ensemble", "bbb", "ibnn", "stochastic-norm", "mcbn", "laplace",
               "laplace-all", "swag", "vbll", "evidential-regression",
               "packed-ensemble", "batch-ensemble", "sngp")  # fmt: skip
TEYE_METHODS = ("mcbn", "mc-dropout")
BIG = ("kin8nm", "naval-propulsion-plant", "power-plant", "protein-tertiary-structure")
SMALL = tuple(d for d in UCI_DATASETS if d not in BIG)
#: each method's grid (quick, paper); the values' meaning is GRID_NAMES in uci_gal_methods
GRIDS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "ensemble": ((), ()),
    "bbb": ((0.1, 1.0), (0.01, 0.1, 1.0)),
    "ibnn": ((0.1, 0.3), (0.1, 0.3, 1.0)),
    "stochastic-norm": ((0.05, 0.1), (0.02, 0.05, 0.1, 0.2)),
    "mcbn": ((32.0, 128.0), (32.0, 64.0, 128.0, 256.0, 512.0)),
    "laplace": ((), ()),  # the prior precision by the marginal likelihood: no grid
    "laplace-all": ((), ()),
    # collecting rate / training rate; offered 3 and 10, validation chose one of them on 8 of
    # 15 splits (0-2 of the five small sets), so the old (0.3, 1) did not bracket its choice
    "swag": ((0.3, 1.0, 3.0, 10.0), (0.1, 0.3, 1.0, 3.0, 10.0)),
    "vbll": ((0.1, 1.0), (0.1, 1.0, 10.0)),  # the last layer's prior variance
    "evidential-regression": ((0.01, 0.1), (0.001, 0.01, 0.1, 1.0)),  # λ (Amini et al.)
    "packed-ensemble": ((), ()),  # M = 4, alpha = 2 (the defaults): no grid
    "batch-ensemble": ((), ()),  # M = 4, fast weights N(1, 0.5²), fast_lr 0.5 (defaults): no grid
    "sngp": ((1.0, 2.0), (0.5, 1.0, 2.0, 4.0)),  # ℓ of the random features (default 1)
}
#: likelihoods a method runs when none are given: Lakshminarayanan's ensemble is heteroscedastic
#: (the methods of HOMOSCEDASTIC_ONLY run homoscedastic whatever is given)
DEFAULT_LIKELIHOODS = {"ensemble": ("heteroscedastic",)}
LIKELIHOODS = ("homoscedastic", "heteroscedastic")


def method_likelihoods(method: str, likelihoods: tuple[str, ...] | None) -> tuple[str, ...]:
    """The likelihoods ``method`` runs when ``likelihoods`` are asked for (None: its default):
    a method of :data:`HOMOSCEDASTIC_ONLY` runs the homoscedastic one only, and none where only
    heteroscedastic is asked for."""
    liks = likelihoods or DEFAULT_LIKELIHOODS.get(method, LIKELIHOODS)
    if method in HOMOSCEDASTIC_ONLY:
        return tuple(lik for lik in liks if lik == "homoscedastic")
    return tuple(liks)


def hidden_units(dataset: str) -> int:
    """Gal's net: one hidden layer of 50 ReLU units, 100 for protein."""
    return 100 if dataset == "protein-tertiary-structure" else 50


def mc_dropout_job(dataset: str, split: int, likelihood: str, preset: str,
                   epochs: int = 0) -> GalUCIJob:  # fmt: skip
    """MC dropout on Gal's split: exactly the job the earlier ``bench gal-uci`` made."""
    pre = GAL_PRESETS[preset]
    return GalUCIJob("mc-dropout", dataset, split, likelihood=likelihood,
                     dropout_rates=pre.dropout_rates, hidden=hidden_units(dataset),
                     epochs=epochs or pre.epochs, batch_size=pre.batch_size, lr=pre.lr,
                     samples=pre.samples)  # fmt: skip


def method_job(method: str, dataset: str, split: int, likelihood: str, preset: str,
               epochs: int = 0) -> UCIMethodJob:  # fmt: skip
    """Any other method on Gal's split under ``preset``."""
    big = dataset in BIG
    quick = preset == "quick"
    if method == "ensemble":  # Lakshminarayanan et al.: 40 epochs at batch 100 (paper preset)
        n_epochs, batch = (40, 100) if big or not quick else (100, 32)
    elif quick:  # sized for ~30 min per method over all nine datasets on one core
        n_epochs, batch = (20, 256) if big else (100, 32)
    else:  # Gal's budget
        n_epochs, batch = 400, 128
    epochs = epochs or n_epochs
    # SWAG collects for as many epochs as it trained: the authors' UCI runs collect for the
    # last 500 of 1,000 epochs (20 collecting epochs after 100 left the small sets' spread flat)
    swag = {"swag_epochs": epochs} if method == "swag" else {}
    return UCIMethodJob(method, dataset, split, likelihood=likelihood,
                        grid=GRIDS[method][0 if quick else 1], hidden=hidden_units(dataset),
                        epochs=epochs, batch_size=batch, lr=1e-2 if quick else 1e-3,
                        samples=100 if quick else 1000,
                        noise_fit=laplace_noise_fit(method, likelihood), **swag)  # fmt: skip


def laplace_noise_fit(method: str, likelihood: str) -> str:
    """A homoscedastic Laplace job's ``noise_fit`` (its σ² scales the posterior); "" for the
    rest, whose rows it cannot change (heteroscedastic nets have no σ²)."""
    homoscedastic = likelihood == Likelihood.HOMOSCEDASTIC.value
    return "validation" if method.startswith("laplace") and homoscedastic else ""


@dataclass(frozen=True)
class TeyeUCIJob(SearchJob):
    """One row of Teye et al.'s protocol: MCBN (scored with CUBN) or MC dropout (with CUDO) on
    one 80/20 split, searched and scored by :mod:`bayesify.bench.uci.teye` under ``preset``."""

    method: str
    dataset: str
    split: int
    seed: int = 0
    preset: str = "quick"
    epochs: int = 0  # 0, () or -1 below: the preset's
    noise_protocol: str = "teye"
    batch_sizes: tuple[int, ...] = ()
    weight_decays: tuple[float, ...] = ()
    dropout_rates: tuple[float, ...] = ()
    cv_samples: int = -1
    samples: int = 0
    test_seeds: int = 0

    def settings(self) -> Any:
        """The preset's :class:`~bayesify.bench.uci.teye.UCISettings` with this job's values."""
        from bayesify.bench.uci.teye import UCISettings

        given = {"epochs": self.epochs, "batch_sizes": self.batch_sizes,
                 "weight_decays": self.weight_decays, "dropout_rates": self.dropout_rates,
                 "samples": self.samples, "test_seeds": self.test_seeds}  # fmt: skip
        overrides = {k: v for k, v in given.items() if v}
        if self.cv_samples >= 0:
            overrides["cv_samples"] = self.cv_samples
        if self.samples and self.preset == "paper":
            overrides["bank_size"] = self.samples  # one bank batch per sample
        return UCISettings.from_preset(self.preset, noise_protocol=self.noise_protocol,
                                       **overrides)  # fmt: skip


def gal_jobs(methods: tuple[str, ...], datasets: tuple[str, ...], splits: int,
             likelihoods: tuple[str, ...] | None, preset: str,
             epochs: int = 0) -> list[tuple[str, Any]]:  # fmt: skip
    """(experiment, job) for every method × dataset × split (0: all) × likelihood."""
    from bayesify.data.uci import uci_n_splits

    out: list[tuple[str, Any]] = []
    for method in methods:
        for name in datasets:
            n = uci_n_splits(name, "gal")
            n = min(n, splits or n)
            for lik in method_likelihoods(method, likelihoods):
                for s in range(n):
                    if method == "mc-dropout":
                        out.append((GAL_EXPERIMENT, mc_dropout_job(name, s, lik, preset, epochs)))
                    else:
                        out.append(
                            (METHODS_EXPERIMENT, method_job(method, name, s, lik, preset, epochs))
                        )
    return out


def teye_jobs(methods: tuple[str, ...], datasets: tuple[str, ...], splits: int, preset: str,
              **settings: Any) -> list[tuple[str, Any]]:  # fmt: skip
    """(experiment, job) for every method × dataset × Teye split (0: all 5); ``settings``:
    :class:`TeyeUCIJob`'s fields after ``preset``."""
    n = min(TEYE_N_SPLITS, splits or TEYE_N_SPLITS)
    return [
        (TEYE_EXPERIMENT, TeyeUCIJob(m, d, s, preset=preset, **settings))
        for d in datasets  # every method of a split before the next: partial runs stay paired
        for s in range(n)
        for m in methods
    ]


def score_teye_job(job: TeyeUCIJob) -> dict[str, Any]:
    """Search, fit τ on validation, score on test (mean over the preset's test seeds); the
    constant baseline's scores as ``cu_*``, each seed's normalised scores for the t-test."""
    from bayesify.bench.uci.gal_methods import uncertainty_error_bins
    from bayesify.bench.uci.teye import evaluate_kind
    from bayesify.data import load_uci

    kind = {"mcbn": "mcbn", "mc-dropout": "mcdo"}.get(job.method)
    if kind is None:
        raise ValueError(f"unknown Teye-protocol method {job.method!r}; valid: mcbn, mc-dropout")
    s = job.settings()
    data = load_uci(job.dataset, job.split, protocol=s.protocol,
                    val_fraction=0.0 if s.cv_folds else 0.2)  # fmt: skip
    models, _, per_seed, info = evaluate_kind(kind, data, s, job.seed + job.split,
                                              job.search_settings())  # fmt: skip
    out: dict[str, Any] = {}
    for key in per_seed[0]["MC"]:
        out[key] = sum(p["MC"][key] for p in per_seed) / len(per_seed)
        out[f"cu_{key}"] = sum(p["CU"][key] for p in per_seed) / len(per_seed)
    out["seed_pll_norm"] = [p["MC"]["pll_norm"] for p in per_seed]
    out["seed_crps_norm"] = [p["MC"]["crps_norm"] for p in per_seed]
    _, pred = models[0]
    mc = pred.affine(data.scaler.y_mean, data.scaler.y_std)
    y = data.y_test_original.to(mc.samples.dtype)
    out.update(uncertainty_error_bins(mc.std, mc.mean - y))
    out.update({k: v for k, v in info.items() if isinstance(v, int | float)})
    return out
