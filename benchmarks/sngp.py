"""SNGP against the plain network and a 4-member deep ensemble on Fashion-MNIST, MNIST as
out-of-distribution rows: accuracy, NLL, OOD AUROC by each method's default score, and the time
of one prediction of 1,000 rows, all measured side by side in one run.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/sngp.py --seeds 0 --epochs 5

The data folder holds Fashion-MNIST's 10,000 test images only: a seeded permutation of them
gives ``--train`` training rows and the rest (up to ``--test``) the test rows; ``--ood`` rows of
MNIST's test set are the OOD rows. Every method trains the same MLP (784-256-256-10 on the
flattened image, ReLU) from the same initial weights with Adam at 10⁻³, batches of 128, for
``--epochs`` epochs. SNGP's mean-field row is the sampled SNGP's trained network, predicted
with ``prediction="mean-field"``. Times: calls alternate in a rotating order after a warm-up
round; medians.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from dataclasses import replace

import torch
from torch import nn

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.metrics.ood import auroc


def _pm(rows: list[dict], key: str) -> str:
    """The mean of ``key`` over seeds ± its standard error (the mean alone for one seed)."""
    vals = [r[key] for r in rows]
    m = statistics.fmean(vals)
    if len(vals) < 2:
        return f"{m:.4f}"
    return f"{m:.4f} ± {statistics.stdev(vals) / len(vals) ** 0.5:.3f}"


def _net() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                         nn.ReLU(), nn.Linear(256, 10))  # fmt: skip


def _mean_field(sngp: bayesify.SNGP) -> bayesify.SNGP:
    """The same trained SNGP predicting the paper's mean-field logits."""
    mf = copy.deepcopy(sngp)
    mf.config = replace(sngp.config, prediction="mean-field")
    mf.head.mean_field = True
    return mf


def _score(name: str, method, pred) -> torch.Tensor:  # noqa: ANN001
    """The default uncertainty score of each row: MI where the samples differ, else entropy."""
    if name in ("deterministic", "sngp mean-field"):
        return pred.entropy
    return pred.mutual_information


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--train", type=int, default=8000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--ood", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(machine_description())
    fashion, mnist = load_fashion_mnist("test"), load_mnist("test")
    rows: dict[str, list[dict[str, float]]] = {}
    fit = {"epochs": args.epochs, "batch_size": 128, "lr": 1e-3, "progress": False}
    for seed in (int(s) for s in args.seeds.split(",")):
        perm = torch.randperm(len(fashion.x), generator=torch.Generator().manual_seed(seed))
        tr, te = perm[: args.train], perm[args.train : args.train + args.test]
        train = (fashion.x[tr], fashion.y[tr])
        x_test, y_test = fashion.x[te], fashion.y[te]
        x_ood = mnist.x[torch.randperm(len(mnist.x), generator=torch.Generator().manual_seed(seed))
                        [: args.ood]]  # fmt: skip
        torch.manual_seed(seed)
        net = _net()
        cls = {"task": "classification"}
        methods: dict[str, object] = {}
        t0 = time.perf_counter()
        methods["deterministic"] = bayesify.Deterministic(net, **cls).fit(train, seed=seed, **fit)
        t_det = time.perf_counter() - t0
        t0 = time.perf_counter()
        methods["ensemble x4"] = bayesify.DeepEnsemble(net, members=4, init_seed=seed, **cls).fit(
            train, seed=seed, **fit
        )
        t_ens = time.perf_counter() - t0
        t0 = time.perf_counter()
        sngp = bayesify.SNGP(net, **cls).fit(train, seed=seed, **fit)
        t_sngp = time.perf_counter() - t0
        methods["sngp"], methods["sngp mean-field"] = sngp, _mean_field(sngp)
        train_s = {"deterministic": t_det, "ensemble x4": t_ens, "sngp": t_sngp,
                   "sngp mean-field": t_sngp}  # fmt: skip
        for name, m in methods.items():
            t = {"deterministic": 1, "ensemble x4": 4}.get(name, args.samples)
            p_in = m.predict(x_test, samples=t, seed=seed)  # type: ignore[attr-defined]
            p_out = m.predict(x_ood, samples=t, seed=seed)  # type: ignore[attr-defined]
            row = {
                "acc": float((p_in.mean.argmax(-1) == y_test).float().mean()),
                "nll": float(-p_in.log_prob(y_test).mean()),
                "auroc": float(auroc(_score(name, m, p_in), _score(name, m, p_out))),
                "train_s": train_s[name],
            }
            if name == "sngp":
                row["auroc_gp_var"] = float(auroc(sngp.gp_variance(x_test),
                                                  sngp.gp_variance(x_ood)))  # fmt: skip
            rows.setdefault(name, []).append(row)
    print(f"\nseeds {args.seeds}; {args.train} training rows, {args.test} test rows, "
          f"{args.ood} OOD rows; {args.epochs} epochs; means over the seeds ± their standard "
          "error")  # fmt: skip
    print("| method | T | accuracy | NLL | OOD AUROC (default score) | training s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, rs in rows.items():
        t = {"deterministic": 1, "ensemble x4": 4}.get(name, args.samples)
        mean = {k: statistics.fmean(r[k] for r in rs) for k in rs[0]}
        print(f"| {name} | {t} | {_pm(rs, 'acc')} | {_pm(rs, 'nll')} | {_pm(rs, 'auroc')} | "
              f"{mean['train_s']:.1f} |")  # fmt: skip
        if "auroc_gp_var" in mean:
            print(f"| sngp, score = GP variance | — | | | {_pm(rs, 'auroc_gp_var')} | |")
    # prediction time of 1,000 rows, the last seed's methods
    x = x_test.repeat(1000 // len(x_test) + 1, 1, 1, 1)[:1000]
    calls = {
        "deterministic (T=1)": (methods["deterministic"], 1),
        "ensemble x4 (T=4)": (methods["ensemble x4"], 4),
        "sngp (T=4)": (methods["sngp"], 4),
        f"sngp (T={args.samples})": (methods["sngp"], args.samples),
        "sngp mean-field (T=1)": (methods["sngp mean-field"], 1),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for r in range(args.repeats + 1):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            m, t = calls[k]
            t0 = time.perf_counter()
            m.predict(x, samples=t, seed=0)  # type: ignore[attr-defined]
            if r:  # round 0 warms up
                times[k].append(time.perf_counter() - t0)
    base = statistics.median(times[names[0]])
    print("\n| predict 1,000 rows | median ms | ratio to deterministic |")
    print("| --- | ---: | ---: |")
    for k in names:
        med = statistics.median(times[k])
        print(f"| {k} | {med * 1e3:.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
