"""Drift false alarms and detection delays of the serving monitor on replayed held-out streams.

One small MC-dropout model per dataset is trained with bayesify's API (Fashion-MNIST: an MLP on
5,000 training images, the 10,000 test images are the pool; power-plant (UCI): an MLP on 4,000
rows of a seeded permutation, 3,200 to fit and 800 to fit the noise, inputs and target
standardised on them, the other 5,568 rows are the pool) and predicts its pool once (T = 32).
Each replay then draws, with
its own seed, ``--val`` validation rows from the pool, fits the deferral policy on them (target
coverage 0.9: the baseline figures and moments a calibrated bundle carries) and, for
regression, a split-conformal interval at level 0.9 on the same rows; and feeds a stream of other
pool rows through :class:`bayesify.serve.monitor.Monitor` in feedback requests of 100 rows, as
the server does (record, feedback, refresh), at ``--level``.

* **unshifted**: 1,000 rows. A false alarm at a check is any drift row of the model reading
  "drifting". Reported: the rate at the last check (a full window; one check per replay, so
  replays are independent) with its binomial standard error, and the fraction of replays with an
  alarm at any of their checks.
* **shifted**: 1,000 unshifted rows, then up to ``--shifted-rows`` shifted ones; the delay is the
  shifted rows fed back until the first check with an alarm. Covariate shift: Gaussian noise of
  standard deviation ``--noise`` added to the standardised inputs (2 for Fashion-MNIST, 1 for
  power-plant). Label shift:
  Fashion-MNIST rows resampled so 80 % come from the three classes the model errs on most
  (shirt, pullover, coat on this model); power-plant rows resampled with weight exp(2 y) on the
  standardised target (higher outputs more often).

``python benchmarks/monitoring.py --out benchmarks/monitoring.jsonl`` writes one JSON line per
(dataset, stream, replay) and prints the summary table of ``benchmarks/monitoring.md``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import bayesify
from bayesify.data.idx import load_fashion_mnist
from bayesify.posthoc.conformal import Conformal
from bayesify.posthoc.deferral import DeferralPolicy
from bayesify.predictive import Predictive
from bayesify.serve.drift import WindowPart, drift_rows
from bayesify.serve.figures import (
    Mixture,
    classification_figures,
    classification_terms,
    score_regression,
)
from bayesify.serve.monitor import Monitor

DATA = Path("/work/shared/data")
REQUEST = 100  # outcomes per feedback request (the server's most)
WINDOW, MIN_COUNT, TOLERANCE = 1000, 200, 0.25  # the Monitor's defaults
T = 32


def fashion(noise: float) -> dict:
    """The classifier, its pool predictive (clean and noisy inputs) and labels."""
    torch.manual_seed(0)
    train = load_fashion_mnist("train", root=DATA, limit=6000)
    test = load_fashion_mnist("test", root=DATA)
    x, y = train.x.flatten(1), train.y
    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.2), nn.Linear(256, 10))
    method = bayesify.MCDropout(net, task="classification")
    method.fit((x[:5000], y[:5000]), val=(x[5000:], y[5000:]), epochs=5, batch_size=64,
               progress=False)  # fmt: skip
    pool = test.x.flatten(1)
    g = torch.Generator().manual_seed(1)
    shifted = pool + noise * torch.randn(pool.shape, generator=g)
    return {"task": "classification", "classes": list(test.classes), "y": test.y.numpy(),
            "pred": method.predict(pool, samples=T, seed=0),
            "shifted": method.predict(shifted, samples=T, seed=0)}  # fmt: skip


def power(noise: float) -> dict:
    """The regressor, its pool predictive (clean and noisy inputs) and targets."""
    torch.manual_seed(0)
    root = DATA / "uci" / "power-plant"
    data = np.loadtxt(root / "data.txt")
    feats = np.loadtxt(root / "index_features.txt").astype(int)
    target = int(np.loadtxt(root / "index_target.txt"))
    order = np.random.default_rng(0).permutation(len(data))
    train, test = order[:4000], order[4000:]  # a pool of 5,568 held-out rows
    x, y = data[:, feats], data[:, target]
    mx, sx, my, sy = x[train].mean(0), x[train].std(0), y[train].mean(), y[train].std()
    xs = torch.as_tensor((x - mx) / sx, dtype=torch.float32)
    ys = torch.as_tensor((y - my) / sy, dtype=torch.float32)
    fit_rows, val_rows = train[:-800], train[-800:]
    net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Dropout(0.05), nn.Linear(64, 1))
    method = bayesify.MCDropout(net)
    method.fit((xs[fit_rows], ys[fit_rows]), val=(xs[val_rows], ys[val_rows]), epochs=40,
               batch_size=32, progress=False)  # fmt: skip
    g = torch.Generator().manual_seed(1)
    pool = xs[test]
    shifted = pool + noise * torch.randn(pool.shape, generator=g)
    return {"task": "regression", "classes": None, "y": ys[test].numpy().astype(np.float64),
            "pred": method.predict(pool, samples=T, seed=0),
            "shifted": method.predict(shifted, samples=T, seed=0)}  # fmt: skip


def records(pred: Predictive, rows: np.ndarray, defer: np.ndarray, conformal: Conformal | None):
    """What the server records for ``rows`` of ``pred``: records, sample means [N, T], noise."""
    sub = pred[torch.as_tensor(rows)]
    if pred.task.value == "classification":
        probs = sub.mean.double().numpy()
        return [{"probabilities": p.tolist(), "defer": bool(d)}
                for p, d in zip(probs, defer[rows], strict=True)], None, None  # fmt: skip
    lower, upper = conformal.interval(sub, 0.9) if conformal else sub.interval(0.9)
    mean, std = sub.mean.double().numpy(), sub.std.double().numpy()
    noise = sub.noise_variance.double()
    recs = [{"mean": float(m), "std": float(s), "aleatoric_variance": float(v), "lower": float(lo),
             "upper": float(hi), "defer": bool(d)}
            for m, s, v, lo, hi, d in zip(mean, std, noise.mean(0).numpy(), lower.numpy(),
                                          upper.numpy(), defer[rows], strict=True)]  # fmt: skip
    return recs, sub.samples.double().numpy().T, noise.sqrt().numpy().T


def prepare(ds: dict) -> None:
    """Per-row window terms of every pool row, scored once as the monitor scores it (regression:
    the served mixture's squared error and -log p(y); coverage depends on a replay's interval)."""
    for key in ("pred", "shifted"):
        pred = ds[key]
        if ds["task"] == "classification":
            ds[f"{key}_probs"] = pred.mean.double().numpy()
            continue
        recs, samples, noise = records(pred, np.arange(len(ds["y"])), np.zeros(len(ds["y"]), bool),
                                       None)  # fmt: skip
        scores = [score_regression(Mixture(r["mean"], r["std"],
                                           (samples[i] - r["mean"]).astype(np.float32),
                                           noise[i].astype(np.float32)),
                                   float(ds["y"][i]), 0.0, 0.0, 0.9, False)
                  for i, r in enumerate(recs)]  # fmt: skip
        ds[f"{key}_sq"] = np.asarray([s.sq_error for s in scores])
        ds[f"{key}_nll"] = -np.asarray([s.log_prob for s in scores])


def direct(ds: dict, window: list[tuple[str, int, int]], covered: dict, defer: dict,
           validation: dict, args: argparse.Namespace) -> list[dict]:  # fmt: skip
    """The drift rows of a window of (pool, row, request) as the monitor computes them."""
    keys = np.asarray([k for k, _, _ in window])
    rows = np.asarray([r for _, r, _ in window])
    groups = np.asarray([g for _, _, g in window])
    figs, parts = {}, {}
    for part in ("all", "accepted"):
        mask = np.ones(len(rows), bool)
        if part == "accepted":
            mask = ~np.asarray([defer[k][r] for k, r in zip(keys, rows, strict=True)])
        ks, rs = keys[mask], rows[mask]
        if not mask.any():
            figs[part], parts[part] = {"n": 0}, WindowPart([], None, {}, groups[mask])
            continue
        if ds["task"] == "classification":
            probs = np.stack([ds[f"{k}_probs"][r] for k, r in zip(ks, rs, strict=True)])
            labels = ds["y"][rs].astype(np.int64)
            terms = classification_terms(probs, labels)
            figs[part] = classification_figures(terms)
            parts[part] = WindowPart(probs, labels, terms, groups[mask])
            continue
        sq = np.asarray([ds[f"{k}_sq"][r] for k, r in zip(ks, rs, strict=True)])
        nll = np.asarray([ds[f"{k}_nll"][r] for k, r in zip(ks, rs, strict=True)])
        cov = np.asarray([covered[k][r] for k, r in zip(ks, rs, strict=True)], dtype=np.float64)
        terms = {"error": sq[:, None], "nll": nll[:, None],
                 "interval_coverage": np.stack([cov, np.full(len(cov), 0.9)], 1)}  # fmt: skip
        figs[part] = {"n": len(sq), "error": math.sqrt(sq.mean()), "nll": nll.mean(),
                      "interval_coverage": cov.mean(), "interval_level": 0.9}  # fmt: skip
        parts[part] = WindowPart(None, None, terms, groups[mask])
    return drift_rows(figs, parts, validation, ds["task"], validation["error_metric"], MIN_COUNT,
                      TOLERANCE, args.level)  # fmt: skip


def replay(ds: dict, stream: str, seed: int, args: argparse.Namespace, via: str,
           every_check: bool) -> dict:  # fmt: skip
    """One replay: a fresh validation draw, its policy, and a stream whose drift rows are
    computed at each check by a Monitor fed as the server feeds it (``via="monitor"``, and the
    direct computation checked equal to it) or directly from the pool's scored rows."""
    rng = np.random.default_rng(seed)
    y_all, pred = ds["y"], ds["pred"]
    order = rng.permutation(len(y_all))
    val, rest = order[: args.val], order[args.val :]
    pv, yv = pred[torch.as_tensor(val)], torch.as_tensor(y_all[val])
    score = "mi" if ds["task"] == "classification" else "std"
    policy = DeferralPolicy.fit(pv, yv, score=score, target_coverage=0.9)
    conformal = Conformal.fit(pv, yv) if ds["task"] == "regression" else None
    defer = {k: policy.decide(ds[k])[0].numpy() for k in ("pred", "shifted")}
    covered = {}
    if conformal is not None:
        for k in ("pred", "shifted"):
            lo, hi = conformal.interval(ds[k], 0.9)
            covered[k] = (lo.double().numpy() <= y_all) & (y_all <= hi.double().numpy())
    pools = [("pred", rest[:1000])]
    if stream != "unshifted":
        pools.append(("shifted", shifted_rows(ds, stream, rest[1000:], rng, args.shifted_rows)))
    mon = None
    if via == "monitor":
        mon = Monitor(ds["task"], ds["classes"], policy.validation, drift_level=args.level,
                      max_feedback_rows=REQUEST, min_count=MIN_COUNT, tolerance=TOLERANCE,
                      window=WINDOW)  # fmt: skip
    window: list[tuple[str, int, int]] = []
    checks, fed, request = [], 0, 0
    for key, rows in pools:
        for start in range(0, len(rows), REQUEST):
            part = rows[start : start + REQUEST]
            request += 1
            window = (window + [(key, int(r), request) for r in part])[-WINDOW:]
            fed += len(part)
            last = key == pools[-1][0] and start + REQUEST >= len(rows)
            if mon is not None:
                recs, samples, noise = records(ds[key], part, defer[key], conformal)
                _, ids = mon.record_request(recs, samples=samples, noise_std=noise, level=0.9)
                for i, v in zip(ids, y_all[part], strict=True):
                    mon.feedback(i, int(v) if ds["task"] == "classification" else float(v))
                mon.refresh()
                drift = mon.figures()["drift"]
                same = direct(ds, window, covered, defer, policy.validation, args)
                assert [(r["drifting"], r["n"]) for r in drift] == [
                    (r["drifting"], r["n"]) for r in same], (drift, same)  # fmt: skip
                for a, b in zip(drift, same, strict=True):
                    assert (a["p_value"] is None) == (b["p_value"] is None)
                    assert a["p_value"] is None or math.isclose(
                        a["p_value"], b["p_value"], rel_tol=1e-6, abs_tol=1e-12
                    )
            elif every_check or last or key == "shifted":
                drift = direct(ds, window, covered, defer, policy.validation, args)
            else:
                continue
            alarms = sorted(f"{r['figure']}_{r['part']}" for r in drift if r["drifting"])
            checks.append({"rows": fed, "shifted": fed - 1000 if key == "shifted" else 0,
                           "alarms": alarms})  # fmt: skip
            if key == "shifted" and alarms:
                break
    return {"dataset": args.dataset_name, "stream": stream, "seed": seed, "level": args.level,
            "val": args.val, "via": via, "every_check": every_check or via == "monitor",
            "checks": checks}  # fmt: skip


def shifted_rows(ds: dict, stream: str, rest: np.ndarray, rng: np.random.Generator,
                 count: int) -> np.ndarray:  # fmt: skip
    """Pool rows of the shifted part of a stream (drawn with replacement for label shift)."""
    if stream == "covariate":
        return rest[:count]
    y = ds["y"][rest]
    if ds["task"] == "classification":
        hard = np.isin(y, [6, 2, 4])  # shirt, pullover, coat
        w = np.where(hard, 0.8 / hard.sum(), 0.2 / (~hard).sum())
    else:
        w = np.exp(2 * y)
        w /= w.sum()
    return rng.choice(rest, size=count, p=w)


def summary(rows: list[dict]) -> str:
    """The page's two tables."""
    out = ["| dataset | replays | alarms at the last check (full window) | rate ± s.e. | level "
           "| replays checked after every request | with an alarm at any check | checks with "
           "an alarm (of checks with ≥ 200 rows) |", "|---" * 8 + "|"]  # fmt: skip
    for ds in sorted({r["dataset"] for r in rows}):
        un = [r for r in rows if r["dataset"] == ds and r["stream"] == "unshifted"]
        if not un:
            continue
        hits = sum(bool(r["checks"][-1]["alarms"]) for r in un)
        last = hits / len(un)
        se = math.sqrt(last * (1 - last) / len(un))
        every = [r for r in un if r["every_check"]]
        anywhere = sum(any(c["alarms"] for c in r["checks"]) for r in every)
        checks = [c for r in every for c in r["checks"] if c["rows"] >= 200]
        alarmed = sum(bool(c["alarms"]) for c in checks)
        out.append(f"| {ds} | {len(un)} | {hits} | {last:.4f} ± {se:.4f} | {un[0]['level']} | "
                   f"{len(every)} | {anywhere} | {alarmed} of {len(checks)} |")  # fmt: skip
    out += ["", "| dataset | shift | replays | detected | delay, rows of shifted feedback: "
            "median (quartiles) | first alarms |", "|---|---|---|---|---|---|"]  # fmt: skip
    for ds in sorted({r["dataset"] for r in rows}):
        for stream in ("covariate", "label"):
            sh = [r for r in rows if r["dataset"] == ds and r["stream"] == stream]
            if not sh:
                continue
            delays = [next((c["shifted"] for c in r["checks"] if c["shifted"] and c["alarms"]),
                           None) for r in sh]  # fmt: skip
            found = [d for d in delays if d is not None]
            first: dict[str, int] = {}
            for r in sh:
                for c in r["checks"]:
                    if c["shifted"] and c["alarms"]:
                        for a in c["alarms"]:
                            first[a] = first.get(a, 0) + 1
                        break
            q = np.percentile(found, [50, 25, 75]) if found else None
            delay = f"{q[0]:.0f} ({q[1]:.0f}–{q[2]:.0f})" if q is not None else "–"
            names = ", ".join(f"{k} {v}" for k, v in sorted(first.items(), key=lambda i: -i[1]))
            out.append(f"| {ds} | {stream} | {len(sh)} | {len(found)}/{len(sh)} | {delay} | "
                       f"{names} |")  # fmt: skip
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--replays", type=int, default=400, help="unshifted replays per dataset")
    ap.add_argument("--delay-replays", type=int, default=40, help="replays per shift")
    ap.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="unshifted replays are seeds first-seed .. replays - 1 (to extend a run)",
    )
    ap.add_argument("--val", type=int, default=142, help="validation rows per replay")
    ap.add_argument("--level", type=float, default=0.01)
    ap.add_argument(
        "--noise",
        default="fashion-mnist=2,power-plant=1",
        help="covariate shift: input noise sd per dataset (standardised units)",
    )
    ap.add_argument("--shifted-rows", type=int, default=2000)
    ap.add_argument(
        "--monitor-replays",
        type=int,
        default=5,
        help="unshifted replays fed through a Monitor (the rest: its computation)",
    )
    ap.add_argument(
        "--every-check",
        type=int,
        default=200,
        help="unshifted replays checked after every request (the rest: at the end)",
    )
    ap.add_argument("--datasets", default="fashion-mnist,power-plant")
    ap.add_argument("--out", type=Path, default=None, help="JSON lines, one per replay")
    ap.add_argument(
        "--summary",
        nargs="+",
        type=Path,
        default=None,
        help="only summarise these JSON-lines files (a seed repeated: the first)",
    )
    args = ap.parse_args()
    if args.summary:
        seen: dict[tuple, dict] = {}
        for path in args.summary:
            for line in path.read_text().splitlines():
                r = json.loads(line)
                seen.setdefault((r["dataset"], r["stream"], r["seed"]), r)
        print(summary(list(seen.values())))
        return
    torch.set_num_threads(1)
    logging.getLogger("bayesify").setLevel(logging.ERROR)  # the monitor logs every alarm
    rows: list[dict] = []
    sink = args.out.open("w") if args.out else None
    for name in args.datasets.split(","):
        t0 = time.time()
        noise = dict(kv.split("=") for kv in args.noise.split(","))
        ds = (fashion if name == "fashion-mnist" else power)(float(noise[name]))
        args.dataset_name = name
        print(f"{name}: trained and predicted in {time.time() - t0:.0f} s", flush=True)
        prepare(ds)
        plan = [("unshifted", s, "monitor" if s < args.monitor_replays else "direct",
                 s < args.every_check) for s in range(args.first_seed, args.replays)]  # fmt: skip
        plan += [(st, 10_000 + s, "monitor" if s < 2 else "direct", True)
                 for st in ("covariate", "label") for s in range(args.delay_replays)]  # fmt: skip
        for stream, seed, via, every in plan:
            row = replay(ds, stream, seed, args, via, every)
            rows.append(row)
            if sink:
                sink.write(json.dumps(row) + "\n")
                sink.flush()
        print(f"{name}: {len(plan)} replays in {time.time() - t0:.0f} s", flush=True)
    print(summary(rows))


if __name__ == "__main__":
    main()
