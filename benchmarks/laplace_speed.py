"""Last-layer Laplace prediction cost on the Fashion-MNIST LeNet, side by side in one run:
bayesify's sampled and probit predictives, laplace-torch 0.3's sampled ("nn", mc) and GLM
(probit) predictives, and one plain forward pass over the same N images (the floor).

    PYTHONPATH=src python benchmarks/laplace_speed.py [--net CHECKPOINT_FOLDER] [--threads 2]
        [--cells 1x32,1x100,64x32,64x100] [--clock wall|cpu]

Both Laplace fits use the same network and 2,000 training images (prediction cost does not
depend on how many images the curvature summed). Every cell is the median of ``--repeats``
calls, the candidates interleaved call by call so that load on the machine hits them alike.
Prints a markdown table of milliseconds and ratios (ratio columns: the median of the per-round
ratios, paired call by call, with their quartiles). ``--clock cpu`` times each call by the CPU
time of this thread (``time.thread_time``) instead of wall time: on a machine shared with other
jobs it leaves out the time the process waits to be scheduled (it still pays for the caches
other jobs evict), so with ``--threads 1`` its ratios are far steadier than wall time's.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

import bayesify
from bayesify.data import load_fashion_mnist
from bayesify.models import lenet


def _net(folder: str | None) -> torch.nn.Module:
    net = lenet(norm="batch")
    if folder:
        from bayesify.io import read_bundle

        tensors, _ = read_bundle(folder)
        net.load_state_dict(tensors)
    return net.eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", default=None, help="a checkpoint folder of bench images (lenet)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--fit-images", type=int, default=2000)
    ap.add_argument("--cells", default="1x32,1x100,64x32,64x100", help="NxT, comma-separated")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or this thread's CPU time (use with --threads 1)")  # fmt: skip
    args = ap.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    from laplace import Laplace
    from torch.utils.data import DataLoader, TensorDataset

    train = load_fashion_mnist("train")
    x_fit, y_fit = train.x[: args.fit_images], train.y[: args.fit_images]
    test = load_fashion_mnist("test").x
    net = _net(args.net)
    ours = bayesify.Laplace.from_pretrained(net, (x_fit, y_fit), task="classification",
                                            batch_size=128, predictive="sampled")  # fmt: skip
    probit = bayesify.Laplace.from_pretrained(net, (x_fit, y_fit), task="classification",
                                              batch_size=128)  # fmt: skip
    ref = Laplace(copy.deepcopy(net), "classification", subset_of_weights="last_layer",
                  hessian_structure="kron")  # fmt: skip
    ref.fit(DataLoader(TensorDataset(x_fit, y_fit), batch_size=128))
    ref.optimize_prior_precision(method="marglik")
    gen = torch.Generator().manual_seed(0)

    rows = []
    for cell in args.cells.split(","):
        n, t = (int(v) for v in cell.split("x"))
        x = test[:n]
        cands = {
            "plain pass": lambda x=x: net(x),
            "bayesify sampled": lambda x=x, t=t: ours.predict(x, t, seed=0),
            "laplace-torch sampled": lambda x=x, t=t: ref(
                x, pred_type="nn", link_approx="mc", n_samples=t, generator=gen
            ),
            "bayesify probit": lambda x=x, t=t: probit.predict(x, t, seed=0),
            "laplace-torch probit": lambda x=x: ref(x, pred_type="glm", link_approx="probit"),
            "laplace-torch GLM sampled": lambda x=x, t=t: ref(
                x, pred_type="glm", link_approx="mc", n_samples=t, generator=gen
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in cands}
        with torch.no_grad():
            for f in cands.values():  # warm-up
                f()
            for _ in range(args.repeats):
                for k, f in cands.items():
                    t0 = clock()
                    f()
                    times[k].append(clock() - t0)
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        rows.append((n, t, med, times))
    calls = f"median of {args.repeats} interleaved calls"
    print(f"threads {args.threads}, {args.clock} clock, {calls}, ms (ratio)\n")
    names = list(rows[0][2])
    pairs = [("bayesify sampled", "plain pass"), ("bayesify sampled", "laplace-torch sampled"),
             ("bayesify sampled", "laplace-torch GLM sampled"),
             ("bayesify probit", "laplace-torch probit")]  # fmt: skip
    heads = [f"{a} / {b}" for a, b in pairs]
    print("| N | T | " + " | ".join(names + heads) + " |")
    print("|---|---|" + "---|" * (len(names) + len(heads)))
    for n, t, med, times in rows:
        floor = med["plain pass"]
        cells = [f"{med[k]:.2f} ({med[k] / floor:.2f}×)" for k in names]
        for a, b in pairs:
            r = [p / q for p, q in zip(times[a], times[b], strict=True)]
            q = statistics.quantiles(r, n=4, method="inclusive")
            cells.append(f"{q[1]:.2f} [{q[0]:.2f}, {q[2]:.2f}]")
        print(f"| {n} | {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
