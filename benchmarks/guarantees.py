"""Guarantees as served: conformal coverage under several sampling policies, the deferral rate over
seeds and the per-row defer/accept flip rate, on a regression and a classification bundle
calibrated as shipped (``bayesify calibrate --conformal --coverage ...`` with its defaults).

    python benchmarks/guarantees.py --work /tmp/guarantees > report.md

Regression: kin8nm (UCI, 8,192 rows) written to CSV, shuffled (seed 0): 5,192 training, 1,000
calibration and 1,000 held-out rows; an MC dropout MLP trained on the training file
(``bayesify train --data train.csv --target y``). Classification: an MC dropout LeNet trained on
10,000 Fashion-MNIST training images (``--limit 10000``; its 1,000 validation images calibrate),
held out: the first 1,000 test images. "Before" copies are calibrated the old way (conformal at
T = 100 only; deferral on one draw at T = 32). Predictions go through the predictor the server
and ``bayesify predict`` use, one seed per repeat.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BAYESIFY = [str(Path(sys.executable).parent / "bayesify")]
SHIPPED = "8,16,32,64,100,128,256"


def run(*args: str) -> str:
    cmd = [*BAYESIFY, *map(str, args)]
    print("$ bayesify " + " ".join(map(str, args)), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stdout + out.stderr)
    return out.stdout


def regression_data(work: Path) -> dict[str, Path]:
    import pandas as pd

    raw = np.loadtxt(DATA / "uci" / "kin8nm" / "data.txt")
    rng = np.random.default_rng(0)
    raw = raw[rng.permutation(len(raw))]
    frame = pd.DataFrame(raw[:, :-1], columns=[f"x{i}" for i in range(raw.shape[1] - 1)])
    frame["y"] = raw[:, -1]
    parts = {"train": frame[:5192], "val": frame[5192:6192], "test": frame[6192:7192]}
    paths = {}
    for name, part in parts.items():
        paths[name] = work / f"kin8nm_{name}.csv"
        if not paths[name].exists():
            part.to_csv(paths[name], index=False)
    return paths


def bundles(work: Path, adaptive: dict[str, str]) -> dict[str, dict]:
    """Train (once) and calibrate both bundles as shipped and the old way."""
    paths = regression_data(work)
    out: dict[str, dict] = {}
    reg = work / "kin8nm"
    if not reg.exists():
        run("train", "--method", "mc-dropout", "--data", paths["train"], "--target", "y",
            "--hidden", "50,50", "--norm", "none", "--dropout", "0.1", "--epochs", "40",
            "--out", reg, "--no-eval")  # fmt: skip
    cls = work / "fmnist"
    if not cls.exists():
        run("train", "--method", "mc-dropout", "--data", "fashion-mnist", "--dropout", "0.5",
            "--limit", "10000", "--epochs", "3", "--no-eval", "--out", cls)  # fmt: skip
    for name, bundle, data, score in (("regression", reg, ["--data", paths["val"]], "std"),
                                      ("classification", cls, [], "mi")):  # fmt: skip
        shipped, before = work / f"{bundle.name}_shipped", work / f"{bundle.name}_before"
        t0 = time.perf_counter()
        if not shipped.exists():
            shutil.copytree(bundle, shipped)
            run("calibrate", shipped, *data, "--conformal", "--score", score, "--coverage",
                "0.8", "--samples", f"{SHIPPED},{adaptive[name]}", "--test-limit", "0")  # fmt: skip
        took = time.perf_counter() - t0
        if not before.exists():
            shutil.copytree(bundle, before)
            run("calibrate", before, *data, "--conformal", "--samples", "100", "--test-limit", "0")
            run("calibrate", before, *data, "--score", score, "--coverage", "0.8",
                "--decision", "single", "--samples", "32", "--test-limit", "0")  # fmt: skip
        out[name] = {"shipped": shipped, "before": before, "paths": paths, "seconds": took}
    return out


def held_out(name: str, info: dict):
    """Inputs and targets of the 1,000 held-out rows."""
    import pandas as pd

    if name == "regression":
        test = pd.read_csv(info["paths"]["test"])
        return test.drop(columns=["y"]), test["y"].to_numpy()
    from bayesify.data import load_fashion_mnist

    test = load_fashion_mnist("test", limit=1000, normalize=False)  # raw pixels, as served
    return (test.x * 255).numpy(), test.y.numpy()


def covered(cols: dict, y: np.ndarray, names: list | None) -> np.ndarray:
    if "lower" in cols:
        return (cols["lower"] <= y) & (y <= cols["upper"])
    index = {c: i for i, c in enumerate(names)} if names else None
    return np.array([int(t) in [index[c] if index else int(c) for c in s]
                     for t, s in zip(y, cols["prediction_set"], strict=True)])  # fmt: skip


def policy_args(policy: str) -> dict:
    if policy.startswith("adaptive"):
        tol, start, most = policy.split(":")[1:]
        return {"samples": "adaptive", "tol": float(tol), "start": int(start),
                "max_samples": int(most)}  # fmt: skip
    return {"samples": int(policy)}


def coverage_table(results: dict, adaptive: dict[str, str], seeds: int) -> str:
    from bayesify.predictor import Predictor

    lines = ["| bundle | calibration | served | coverage (mean over seeds) | range | "
             "warning in the answer |", "|---|---|---|---:|---|---|"]  # fmt: skip
    for name, info in results.items():
        x, y = held_out(name, info)
        for which in ("before", "shipped"):
            p = Predictor.load(info[which])
            for policy in ("8", "32", "100", adaptive[name]):
                covs, warn = [], False
                for s in range(seeds):
                    res = p.predict(x, level=0.9, seed=100 + s, **policy_args(policy))
                    covs.append(covered(res.columns, y, p.class_names).mean())
                    warn = warn or bool([w for w in res.warnings if "conformal" in w])
                label = "T=100 only (old)" if which == "before" else "as shipped"
                span = f"{min(covs):.3f}–{max(covs):.3f}"
                lines.append(f"| {name} | {label} | {policy} | {np.mean(covs):.3f} | {span} | "
                             f"{'yes' if warn else 'no'} |")  # fmt: skip
                print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def larger_max(results: dict, most: int, only: str | None) -> dict:
    """Copies of the shipped bundles whose sequential decision goes up to ``most`` samples."""
    out = {}
    for name, info in results.items():
        if only and name != only:
            continue
        bundle = info["shipped"].with_name(f"{info['shipped'].name}_max{most}")
        data = ["--data", info["paths"]["val"]] if name == "regression" else []
        score = "std" if name == "regression" else "mi"
        if not bundle.exists():
            shutil.copytree(info["shipped"], bundle)
            run("calibrate", bundle, *data, "--score", score, "--coverage", "0.8",
                "--decision-max", str(most), "--test-limit", "0")  # fmt: skip
        out[name] = {**info, "shipped": bundle}
    return out


def deferral_table(results: dict, seeds: int, repeats: int, which_ones=None) -> str:
    from bayesify.posthoc.deferral import DeferralPolicy
    from bayesify.predictor import Predictor

    lines = ["| bundle | decision | served T | deferral rate over seeds (target 0.200) | "
             "mean | flip rate over 5 repeats | samples per row (mean) | seconds per 1,000 "
             "rows |", "|---|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for name, info in results.items():
        x, _ = held_out(name, info)
        for which, samples in which_ones or (("before", 32), ("before", 256), ("shipped", 32)):
            p = Predictor.load(info[which])
            policy = DeferralPolicy.from_metadata(p.method.metadata)
            decisions, rates, used, secs = [], [], [], []
            for s in range(max(seeds, repeats)):
                t0 = time.perf_counter()
                cols = p.predict(x, samples=samples, seed=s, with_samples=False).columns
                secs.append(time.perf_counter() - t0)
                decisions.append(cols["defer"])
                rates.append(cols["defer"].mean())
                used.append(cols.get("defer_samples", np.full(len(x), samples)).mean())
            d = np.array(decisions[:repeats])
            flips = (d.min(0) != d.max(0)).mean()
            how = "one draw (old)" if policy.decision is None else (
                f"sequential {policy.decision.start}..{policy.decision.max_samples}, "
                f"z = {policy.decision.z:g}")  # fmt: skip
            lines.append(f"| {name} | {how} | {samples} | {min(rates[:seeds]):.3f}–"
                         f"{max(rates[:seeds]):.3f} | {np.mean(rates[:seeds]):.3f} | "
                         f"{flips:.3f} | {np.mean(used):.0f} | {np.mean(secs):.1f} |")  # fmt: skip
            print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/guarantees"))
    ap.add_argument("--seeds", type=int, default=10, help="Seeds of the deferral rate.")
    ap.add_argument("--repeats", type=int, default=5, help="Repeats of the flip rate.")
    ap.add_argument("--coverage-seeds", type=int, default=3)
    ap.add_argument("--part", choices=("all", "coverage", "deferral"), default="all")
    ap.add_argument(
        "--decision-max",
        type=int,
        default=None,
        help="Also (only) measure deferral with a sequential decision up to this T.",
    )
    ap.add_argument("--only", choices=("regression", "classification"), default=None)
    args = ap.parse_args()
    import torch

    from bayesify.bench.machine import machine_description

    torch.set_num_threads(1)
    args.work.mkdir(parents=True, exist_ok=True)
    adaptive = {"regression": "adaptive:0.01:8:32", "classification": "adaptive:0.01:8:32"}
    t0 = time.perf_counter()
    results = bundles(args.work, adaptive)
    print(f"Machine: {machine_description()}\n")
    for name, info in results.items():
        print(f"Calibrating the {name} bundle as shipped took {info['seconds']:.0f} s.\n")
    if args.decision_max:
        results = larger_max(results, args.decision_max, args.only)
        print(deferral_table(results, args.seeds, args.repeats, (("shipped", 32),)) + "\n")
        return
    if args.part in ("all", "coverage"):
        print(coverage_table(results, adaptive, args.coverage_seeds) + "\n")
    if args.part in ("all", "deferral"):
        print(deferral_table(results, args.seeds, args.repeats) + "\n")
    print(f"Total {time.perf_counter() - t0:.0f} s.")


if __name__ == "__main__":
    main()
