"""BatchEnsemble's fast-weight options against its epistemic share on UCI: per Gal split, the
uci.md job of ``batch-ensemble`` (quick preset, fitted as ``bench uci`` fits it) with its
defaults (N(1, 0.5²) fast weights trained at half the learning rate, every member on the whole
mini-batch) and variants of the fast weights' learning rate (``fast_lr``), initialisation
(``init``, ``init_std``) and rows per member (``member_batch``), all from the same initial
network and training seed; each scored on the test split as uci.md scores it.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/uci_batch_ensemble_init.py \\
        --datasets wine-quality-red,power-plant --splits 0 --variants "default;fast_lr=1"

One markdown row per dataset and variant: splits, test LL and RMSE (original units), the
epistemic share of the predictive variance and the validation LL (standardised units), each the
mean ± standard error over the splits; then, where the default is among the variants, each
other variant's difference from it split by split (paired).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import bayesify
from bayesify.bench.summary import mean_se
from bayesify.bench.uci.gal_methods import _grid_trial, score_predictive
from bayesify.bench.uci.jobs import method_job
from bayesify.data import load_uci
from bayesify.data.uci import UCI_DATASETS, uci_n_splits

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "fast_lr=1": {"fast_lr": 1.0},
    "fast_lr=0.25": {"fast_lr": 0.25},
    "fast_lr=0.1": {"fast_lr": 0.1},
    "fast_lr=0": {"fast_lr": 0.0},
    "init='sign'": {"init": "sign"},
    "init_std=0.75": {"init_std": 0.75},
    "fast_lr=1, init='sign'": {"fast_lr": 1.0, "init": "sign"},
    "fast_lr=1, init_std=1": {"fast_lr": 1.0, "init_std": 1.0},
    "fast_lr=1, member_batch='split'": {"fast_lr": 1.0, "member_batch": "split"},
}
COLUMNS = ("ll", "rmse", "epistemic_share", "val_ll")


@contextmanager
def batch_ensemble_with(**options: Any) -> Iterator[None]:
    """``bayesify.BatchEnsemble`` built with ``options`` inside the block (the bench's
    ``gal_methods.build`` looks the class up there)."""
    original = bayesify.BatchEnsemble
    bayesify.BatchEnsemble = functools.partial(original, **options)  # type: ignore[misc]
    try:
        yield
    finally:
        bayesify.BatchEnsemble = original  # type: ignore[misc]


def variant_scores(
    dataset: str, split: int, likelihood: str, variants: list[str]
) -> dict[str, dict[str, float]]:
    """Each variant's test scores and validation LL on one split: ``bench uci``'s
    ``batch-ensemble`` job (``gal_methods._grid_trial``), its method built with the variant's
    options."""
    job = method_job("batch-ensemble", dataset, split, likelihood, "quick")
    data = load_uci(dataset, split, protocol="gal", val_fraction=job.val_fraction)
    out = {}
    for name in variants:
        with batch_ensemble_with(**VARIANTS[name]):
            val_ll, method = _grid_trial(job, data, {}, None)
        pred = method.predict(data.x_test, samples=job.samples, seed=job.seed)
        out[name] = {**score_predictive(method, pred, data), "val_ll": val_ll}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(UCI_DATASETS))
    parser.add_argument("--splits", type=int, default=0, help="first splits (0: all)")
    parser.add_argument("--likelihood", default="homoscedastic")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="names, ';'-separated")
    args = parser.parse_args()
    variants = args.variants.split(";")
    print("| dataset | variant | splits | test LL | test RMSE | epistemic share | val LL |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    paired = []
    for dataset in args.datasets.split(","):
        splits = range(args.splits or uci_n_splits(dataset, "gal"))
        rows = [variant_scores(dataset, s, args.likelihood, variants) for s in splits]
        for name in variants:
            cells = ["{:.4f} ± {:.4f}".format(*mean_se(r[name][col] for r in rows))
                     for col in COLUMNS]  # fmt: skip
            print(f"| {dataset} | {name} | {len(rows)} | {' | '.join(cells)} |", flush=True)
            if name != "default" and "default" in variants:
                paired.append(f"| {dataset} | {name} | {paired_cells(rows, name)} |")
    if paired:
        print("\n| dataset | variant | test LL − default's | z | epistemic share − default's |")
        print("| --- | --- | ---: | ---: | ---: |")
        print("\n".join(paired))


def paired_cells(rows: list[dict[str, dict[str, float]]], name: str) -> str:
    """Variant ``name`` minus the default, split by split: test LL (mean ± standard error, and
    z = mean / standard error) and epistemic share (mean ± standard error)."""
    ll = mean_se(r[name]["ll"] - r["default"]["ll"] for r in rows)
    share = mean_se(r[name]["epistemic_share"] - r["default"]["epistemic_share"] for r in rows)
    z = ll[0] / ll[1] if ll[1] > 0 else float("nan")
    return f"{ll[0]:+.4f} ± {ll[1]:.4f} | {z:+.1f} | {share[0]:+.4f} ± {share[1]:.4f}"


if __name__ == "__main__":
    main()
