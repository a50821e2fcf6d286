"""Evidential models measured on toys, side by side in one run: the cost of a prediction against
the plain network and a 4-member DeepEnsemble, and the weaknesses the literature reports.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/evidential.py [--seeds 3]

1. Cost: ``predict`` of 1,000 rows (T = 50; the ensemble T = 4, its members) on one MLP
   shape (8 -> 64 -> 64 -> out), calls alternated in a rotating order after a warm-up, medians.
2. Regression on y = sin(3x) + N(0, 0.1²), x in [-2, -0.5] U [0.5, 2] (a gap around 0):
   epistemic variance on the data, in the gap (|x| < 0.3) and beyond (3 < |x| < 4), for the
   evidence regulariser's weight coeff in {0, 0.01, 0.1, 1}, against a 4-member ensemble of
   heteroscedastic networks; and the correlation over x of log Var[mu] with log E[sigma²].
3. Classification on three Gaussian blobs: mutual information and vacuity (C / S) on held-out
   in-distribution rows as the training set grows (a faithful epistemic measure shrinks), and
   on rows 10x farther out than the data.
4. Evidence functions (relu, softplus, exp) on the blobs: accuracy, and classes left with no
   evidence on any test row (ReLU's dead classes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import bayesify
from bayesify.bench.machine import machine_description
from bayesify.models import mlp


def gap_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g) * 1.5 + 0.5
    x = torch.where(torch.rand(n, generator=g) < 0.5, -x, x)
    return x[:, None], torch.sin(3 * x) + 0.1 * torch.randn(n, generator=g)


def blobs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    centres = torch.tensor([[0.0, 1.5], [-1.3, -0.8], [1.3, -0.8]])
    return centres[y] + 0.6 * torch.randn(n, 2, generator=g), y


def cost(repeats: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(1000, 8)
    reg = dict(norm=None)
    methods = {
        "deterministic": (bayesify.Deterministic(mlp(8, 1, (64, 64), **reg)), 1),
        "evidential-regression": (bayesify.EvidentialRegression(mlp(8, 1, (64, 64), **reg)), 50),
        "evidential-classification": (
            bayesify.EvidentialClassifier(mlp(8, 10, (64, 64), **reg)),
            50,
        ),
        "ensemble (4)": (bayesify.DeepEnsemble(mlp(8, 1, (64, 64), **reg), members=4), 4),
    }
    methods["deterministic"][0].noise_variance = 1.0
    methods["ensemble (4)"][0].noise_variance = 1.0
    times: dict[str, list[float]] = {k: [] for k in methods}
    names = list(methods)
    for r in range(repeats + 1):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            m, t = methods[k]
            t0 = time.perf_counter()
            m.predict(x, samples=t, seed=r)
            if r:
                times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["deterministic"])
    print("| method | T | ms per 1,000 rows | ratio to deterministic |")
    print("| --- | ---: | ---: | ---: |")
    for k, (_, t) in methods.items():
        med = statistics.median(times[k])
        print(f"| {k} | {t} | {1000 * med:.2f} | {med / base:.2f} |")


def regions() -> dict[str, torch.Tensor]:
    return {
        "data": torch.cat([torch.linspace(-2, -0.5, 40), torch.linspace(0.5, 2, 40)])[:, None],
        "gap": torch.linspace(-0.3, 0.3, 20)[:, None],
        "beyond": torch.cat([torch.linspace(-4, -3, 20), torch.linspace(3, 4, 20)])[:, None],
    }


def regression(seeds: int) -> None:
    rows: dict[str, list[list[float]]] = {}
    corr: dict[str, list[float]] = {}
    x, y = gap_data(400, 0)
    for seed in range(seeds):
        for coeff in (0.0, 0.01, 0.1, 1.0):
            torch.manual_seed(seed)
            m = bayesify.EvidentialRegression(mlp(1, 1, (64, 64), norm=None), coeff=coeff)
            m.fit((x, y), epochs=150, batch_size=32, lr=3e-3, progress=False)
            forms = {k: m.summaries(v) for k, v in regions().items()}
            key = f"evidential, coeff {coeff:g}"
            rows.setdefault(key, []).append(
                [float(f["epistemic_variance"].mean()) for f in forms.values()]
            )
            grid = torch.linspace(-4, 4, 161)[:, None]
            s = m.summaries(grid)
            c = np.corrcoef(s["epistemic_variance"].log(), s["aleatoric_variance"].log())[0, 1]
            corr.setdefault(key, []).append(float(c))
        torch.manual_seed(seed)
        ens = bayesify.DeepEnsemble(mlp(1, 2, (64, 64), norm=None), members=4,
                                    likelihood="heteroscedastic")  # fmt: skip
        ens.fit((x, y), epochs=150, batch_size=32, lr=3e-3, progress=False)
        rows.setdefault("ensemble (4), heteroscedastic", []).append(
            [
                float(ens.predict(v, samples=4, seed=0).epistemic_variance.mean())
                for v in regions().values()
            ]  # fmt: skip
        )
    print(f"mean over {seeds} seeds (min-max in brackets) of the mean epistemic variance:\n")
    print("| model | data | gap | beyond | gap / data | beyond / data | corr(log epi, log ale) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, vals in rows.items():
        a = np.array(vals)  # [seeds, 3]
        cells = [f"{a[:, i].mean():.2g} [{a[:, i].min():.2g}-{a[:, i].max():.2g}]"
                 for i in range(3)]  # fmt: skip
        ratios = [f"{(a[:, i] / a[:, 0]).mean():.2f}" for i in (1, 2)]
        c = f"{np.mean(corr[key]):.2f}" if key in corr else "-"
        print(f"| {key} | " + " | ".join(cells + ratios) + f" | {c} |")


def classification(seeds: int) -> None:
    xt, _ = blobs(600, 99)
    far = xt * 10
    print("| training rows | accuracy | MI in-distribution | vacuity in-dist. | MI 10x out "
          "| vacuity 10x out |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in (60, 300, 1500):
        vals = []
        for seed in range(seeds):
            x, y = blobs(n, seed)
            torch.manual_seed(seed)
            m = bayesify.EvidentialClassifier(mlp(2, 3, (32, 32), norm=None))
            m.fit((x, y), epochs=max(20, 6000 // n), batch_size=32, lr=3e-3, progress=False)
            s, f = m.summaries(xt), m.summaries(far)
            _, yt = blobs(600, 99)
            acc = float((s["mean"].argmax(-1) == yt).double().mean())
            scores = [s["mutual_information"], s["vacuity"], f["mutual_information"], f["vacuity"]]
            vals.append([acc, *(float(v.mean()) for v in scores)])
        a = np.array(vals).mean(0)
        print(f"| {n} | " + " | ".join(f"{v:.3f}" for v in a) + " |")


def evidence(seeds: int) -> None:
    x, y = blobs(300, 0)
    xt, yt = blobs(600, 99)
    print("| evidence | training accuracy | test accuracy | classes never evidenced |")
    print("| --- | ---: | ---: | ---: |")
    for kind in ("relu", "softplus", "exp"):
        vals = []
        for seed in range(seeds):
            torch.manual_seed(seed)
            m = bayesify.EvidentialClassifier(mlp(2, 3, (32,), norm=None), evidence=kind)
            m.fit((x, y), epochs=40, batch_size=32, lr=3e-3, progress=False)
            train, test = m.summaries(x), m.summaries(xt)
            dead = int(((test["alpha"] - 1).amax(0) < 1e-6).sum())
            vals.append([float((train["mean"].argmax(-1) == y).double().mean()),
                         float((test["mean"].argmax(-1) == yt).double().mean()), dead])  # fmt: skip
        a = np.array(vals).mean(0)
        print(f"| {kind} | {a[0]:.3f} | {a[1]:.3f} | {a[2]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--parts", default="cost,regression,classification,evidence")
    args = parser.parse_args()
    print(machine_description())
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    parts = args.parts.split(",")
    if "cost" in parts:
        print()
        cost(args.repeats)
    for name, part in (("regression", regression), ("classification", classification),
                       ("evidence", evidence)):  # fmt: skip
        if name in parts:
            print()
            part(args.seeds)


if __name__ == "__main__":
    main()
