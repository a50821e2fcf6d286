"""Why last-layer Laplace's predictive std barely varies across UCI test points: per Gal split,
the uci.md job of ``--method`` (homoscedastic, quick preset, fitted as ``bench uci`` fits it),
then on the training and test rows h(x) = v(x) / s², the epistemic variance over the noise
variance. For the last layer, whose posterior is a Bayesian linear regression on the 51
features φ(x) (50 hidden units and the bias), h(x) is x's leverage φᵀ(ΦᵀΦ + λI)⁻¹φ times the
posterior's noise over the refitted one, whose mean over the training rows is about 51 / N; the
predicted std is s·√(1 + h(x)), so the std-bin ratio (largest-std tenth of the test rows over
the smallest) is √(1 + h) of the top bin over the bottom's.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/uci_laplace_leverage.py \\
        --method laplace --splits 3 > laplace.jsonl

One JSON line per split: the training rows N, mean h on the training and test rows, mean h of
the top and bottom std bins, the std-bin ratio measured and as √(1 + h) gives it, and the
epistemic share of the predictive variance.
"""

from __future__ import annotations

import argparse
import json

import torch

from bayesify.bench.uci.gal_methods import _grid_trial, uncertainty_error_bins
from bayesify.bench.uci.jobs import SMALL, method_job
from bayesify.data import load_uci

SAMPLES = 1000  # draws per prediction: the Monte Carlo error of v(x) is ~4.5%


def leverage_row(method: str, dataset: str, split: int) -> dict[str, float | int | str]:
    job = method_job(method, dataset, split, "homoscedastic", "quick")
    data = load_uci(dataset, split, protocol="gal", val_fraction=job.val_fraction)
    _, fitted = _grid_trial(job, data, {}, None)
    out: dict[str, float | int | str] = {"dataset": dataset, "split": split,
                                         "n_train": len(data.x_train)}  # fmt: skip
    for part, x in (("train", data.x_train), ("test", data.x_test)):
        pred = fitted.predict(x, samples=SAMPLES, seed=0)
        h = pred.epistemic_variance / pred.aleatoric_variance
        out[f"h_mean_{part}"] = round(float(h.mean()), 4)
        if part == "test":
            bins = uncertainty_error_bins(pred.std, pred.mean - data.y_test)
            top, *_, bottom = reversed(h[pred.std.argsort()].tensor_split(10))
            out["h_top_bin"] = round(float(top.mean()), 4)
            out["h_bottom_bin"] = round(float(bottom.mean()), 4)
            out["ratio"] = round(bins["ue_std"][-1] / bins["ue_std"][0], 3)
            root = float((1 + top).sqrt().mean() / (1 + bottom).sqrt().mean())
            out["ratio_from_h"] = round(root, 3)
            share = pred.epistemic_variance / pred.variance
            out["epistemic_share"] = round(float(share.mean()), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="laplace", help="laplace or laplace-all")
    parser.add_argument("--datasets", default=",".join(SMALL), help="comma-separated")
    parser.add_argument("--splits", type=int, default=3, help="Gal's first splits")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for d in args.datasets.split(","):
        for split in range(args.splits):
            print(json.dumps(leverage_row(args.method, d, split)), flush=True)


if __name__ == "__main__":
    main()
