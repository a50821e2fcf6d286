"""The markdown page and PNG figures of ``bayesify bench images``, read from the results store.

Every table shows mean ± standard error over seeds (one value for one seed). The OOD tables put
the deterministic network's entropy and max-probability scores first, as the baseline the other
scores must beat.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from bayesify.bench.images.scores import COVERAGE_GRID
from bayesify.bench.machine import machine_description
from bayesify.bench.options import command_line, write_report
from bayesify.bench.store import ResultsStore, RowKey

#: the report's sections, in order (a test checks the page has each)
SECTIONS = (
    "## Accuracy and calibration",
    "## Out-of-distribution detection (MNIST)",
    "## Corruption sweep",
    "## Error–coverage",
    "## Reliability diagrams",
    "## MCBN batch-size sweep",
)
SCORE_NAMES = {"entropy": "entropy", "mi": "mutual information", "max_prob": "1 − max prob",
               "density": "−log feature density"}  # fmt: skip
ERROR_TARGET, AUROC_TARGET = 0.10, 0.95


def _cell(values: list[float], digits: int = 4) -> str:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return "–"
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return f"{m:.{digits}f}"
    sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
    return f"{m:.{digits}f} ± {sd / math.sqrt(len(vals)):.{digits}f}"


def _evidence(seeds: int) -> str:
    """What a claim drawn from rows of ``seeds`` seeds rests on, for the page's sentences."""
    if seeds < 2:
        return " (one seed: one run each, no error bar; not a tested difference)"
    return f" (mean over {seeds} seeds; compare with the standard errors in the table)"


def _mean(values: list[float]) -> float:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else math.nan


def _group(rows: list[dict[str, Any]], jobs: dict[RowKey, Any]) -> dict[str, dict[str, list]]:
    """model -> method -> the metrics of its rows (one per seed), methods in job order."""
    out: dict[str, dict[str, list]] = defaultdict(dict)
    order = list(dict.fromkeys((j.model, j.method) for j in jobs.values()))
    by = defaultdict(list)
    for r in rows:
        job = jobs[RowKey.of(r)]
        by[(job.model, job.method)].append(r["metrics"])
    for model, method in order:
        if by[(model, method)]:
            out[model][method] = by[(model, method)]
    return out


def _accuracy_table(methods: dict[str, list]) -> list[str]:
    keys = ("error", "nll", "ece", "brier")
    lines = ["| method | seeds | error | NLL | ECE | Brier | NLL (TS) | ECE (TS) | temperature "
             "| T | epochs | train s |", "| --- | ---: |" + " ---: |" * 10]  # fmt: skip
    for method, ms in methods.items():
        cells = [_cell([m[k] for m in ms]) for k in keys]
        cells += [_cell([m["scaled"][k] for m in ms]) for k in ("nll", "ece")]
        cells.append(_cell([m["temperature"] for m in ms], 3))
        epochs = "/".join(str(m["training"].get("epochs_run", "?")) for m in ms)
        secs = _cell([m["training"].get("train_seconds") for m in ms], 0)
        lines.append(f"| {method} | {len(ms)} | {' | '.join(cells)} | {ms[0]['samples_drawn']} "
                     f"| {epochs} | {secs} |")  # fmt: skip
    return lines


def _epistemic_share(methods: dict[str, list]) -> str:
    """Each method's epistemic share of its predictive entropy on the test images: mean mutual
    information / mean entropy (mean over seeds)."""
    parts = []
    for method, ms in methods.items():
        test = [m["uncertainty"]["test"] for m in ms]
        entropy = _mean([t.get("entropy") for t in test])
        mi = _mean([t.get("epistemic") for t in test])
        share = mi / entropy if entropy and entropy > 0 and not math.isnan(mi) else math.nan
        parts.append(f"{method} {100 * share:.1f}%" if math.isfinite(share) else f"{method} –")
    return ("Epistemic share of the predictive entropy on the test images (mean mutual "
            "information / mean entropy): " + ", ".join(parts) + ".")  # fmt: skip


def _ood_rows(methods: dict[str, list]) -> list[tuple[str, str, dict[str, float], list]]:
    """(method, score, mean metrics, per-seed metrics): the deterministic baseline first."""
    out = []
    for method, ms in methods.items():
        scores = ("entropy", "max_prob") if method == "deterministic" else ("mi", "entropy")
        if method == "ddu":  # deterministic: its epistemic score is the feature density
            scores = ("density", "entropy")
        for s in scores:
            per_seed = [m["ood"][s] for m in ms]
            mean = {k: _mean([p[k] for p in per_seed]) for k in ("auroc", "aupr", "fpr95")}
            out.append((method, s, mean, per_seed))
    return out


def _ood_section(model: str, methods: dict[str, list]) -> list[str]:
    rows = _ood_rows(methods)
    lines = [
        f"**{model}**",
        "",
        "| method | score | AUROC | AUPR (OOD +) | FPR95 | mean score in | mean score out |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for method, s, _, per_seed in rows:
        ms = methods[method]
        label = f"{method} (baseline)" if method == "deterministic" else method
        unc = {"entropy": "entropy", "mi": "epistemic"}.get(s)
        mean_in = _cell([m["uncertainty"]["test"][unc] for m in ms]) if unc else "–"
        mean_out = _cell([m["uncertainty"]["ood"][unc] for m in ms]) if unc else "–"
        auc = [_cell([p[k] for p in per_seed]) for k in ("auroc", "aupr", "fpr95")]
        lines.append(f"| {label} | {SCORE_NAMES[s]} | {' | '.join(auc)} | {mean_in} | {mean_out} |")
    best = max(rows, key=lambda r: r[2]["auroc"])
    base = max((r for r in rows if r[0] == "deterministic"), key=lambda r: r[2]["auroc"],
               default=None)  # fmt: skip
    bayes = [r for r in rows if r[0] != "deterministic"]
    lines.append("")
    text = (f"Best score by AUROC: {best[0]}'s {SCORE_NAMES[best[1]]} "
            f"({best[2]['auroc']:.4f}); ")  # fmt: skip
    if base is not None and bayes:
        top = max(bayes, key=lambda r: r[2]["auroc"])
        if base[2]["auroc"] >= top[2]["auroc"]:
            text += (f"the deterministic baseline ({SCORE_NAMES[base[1]]}, "
                     f"{base[2]['auroc']:.4f}) is at least as good as every Bayesian score "
                     f"(best {top[0]} {SCORE_NAMES[top[1]]}, {top[2]['auroc']:.4f}).")  # fmt: skip
        else:
            text += (
                f"it beats the deterministic baseline's best ({SCORE_NAMES[base[1]]}, "
                f"{base[2]['auroc']:.4f}) by {top[2]['auroc'] - base[2]['auroc']:.4f}."
            )
    mi_best = max((r for r in bayes if r[1] == "mi"), key=lambda r: r[2]["auroc"], default=None)
    en_best = max((r for r in bayes if r[1] == "entropy"), key=lambda r: r[2]["auroc"],
                  default=None)  # fmt: skip
    if mi_best and en_best:
        winner = "mutual information" if mi_best[2]["auroc"] > en_best[2]["auroc"] else "entropy"
        text += (f" Among the Bayesian methods, {winner} wins (best by MI: {mi_best[0]} "
                 f"{mi_best[2]['auroc']:.4f}; best by entropy: {en_best[0]} "
                 f"{en_best[2]['auroc']:.4f}).")  # fmt: skip
    ok = "met" if best[2]["auroc"] >= AUROC_TARGET else "**not met**"
    seeds = min(len(ms) for ms in methods.values())
    text += f" Target AUROC ≥ {AUROC_TARGET}: {ok}{_evidence(seeds)}."
    return [*lines, text, ""]


def _coverage_table(methods: dict[str, list]) -> list[str]:
    at = {c: i for i, c in enumerate(COVERAGE_GRID)}
    lines = ["| method | score | AURC | error at 100% | at 90% | at 80% | at 50% |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for method, ms in methods.items():
        scores = ("max_prob", "entropy") if method == "deterministic" else ("entropy", "mi")
        for s in ("entropy", "density") if method == "ddu" else scores:
            cov = [m["coverage"][s] for m in ms]
            cells = [_cell([c["aurc"] for c in cov])]
            cells += [_cell([c["error"][at[f]] for c in cov]) for f in (1.0, 0.9, 0.8, 0.5)]
            lines.append(f"| {method} | {SCORE_NAMES[s]} | {' | '.join(cells)} |")
    return lines


def _seeds_note(seeds: int) -> str:
    """The header's word on seeds: one seed is said to be one run per row."""
    if seeds < 2:
        return (" (every row is one trained network: no error bars, and no difference between "
                "rows on this page is a tested one)")  # fmt: skip
    return " (± is the standard error over seeds)"


def _niceness() -> str:
    """How this process was scheduled, for the page: its nice value where it was lowered."""
    n = os.nice(0)
    return f" (run under `nice -n {n}`)" if n > 0 else ""


def write_images_report(opts: Any, jobs: list[Any], summary: Any, wall: float) -> str:
    """Write ``opts.out`` and its figures from the store rows of ``jobs``; returns the text."""
    from bayesify.bench.images import figures as figs
    from bayesify.bench.runner import job_key, stored_rows

    keys = {job_key("images", j): j for j in jobs}
    rows = stored_rows(opts.store, "images", jobs)
    grouped = _group(rows, keys)
    out = Path(opts.out)
    fig_dir = out.parent / out.stem
    rel = fig_dir.name
    p = opts.settings()
    job_seconds = sum(r["seconds"] or 0.0 for r in rows)
    first = next(iter(keys.values()))
    lines = [
        "# Fashion-MNIST: accuracy, calibration and out-of-distribution detection per method",
        "",
        f"Command: `{command_line(opts)}`{_niceness()}.  ",
        f"Machine: {machine_description()}.  ",
        f"This call: {summary}, {wall / 60:.1f} min wall; job time in the store (sum over "
        f"these {len(rows)} rows): {job_seconds / 60:.1f} min.  ",
        f"Preset `{opts.preset}`: models {', '.join(p.models)}; methods {', '.join(p.methods)}; "
        f"{p.seeds} seed(s){_seeds_note(p.seeds)}; at most {p.epochs} epochs, early stopping "
        f"on the validation loss (patience {p.patience}; the best epoch is kept); Adam lr "
        f"{first.lr}, batch {first.batch_size}; T = {p.samples} samples.  ",
        f"Data: Fashion-MNIST training images minus a random validation part of {first.n_val} "
        f"(early stopping; the temperature is fitted on {p.n_calib} of them); the Fashion-MNIST "
        f"test set{f' (a stratified {first.n_test})' if first.n_test else ' (all 10,000)'}; "
        f"MNIST test images as the OOD set ({p.n_ood or 'all 10,000'}); corruptions of the "
        f"first {p.n_corrupt} test images.  ",
        "Methods: deterministic = the batch-norm network with its running statistics; MCBN = "
        f"the same network, a bank of {first.bank_size} training mini-batches of "
        f"{first.batch_size}; MC dropout = p {first.dropout} before the last linear layer; "
        f"ensemble = {p.members} deterministic networks (seeds s, s+1000, …), its first member "
        "is the deterministic network.",
        "",
        SECTIONS[0],
        "",
        "Test error, NLL, ECE (15 bins), Brier score of the mean prediction; (TS): after "
        "temperature scaling, the temperature fitted on validation images. T: samples drawn "
        "(ensembles round T up to a multiple of the members; the deterministic net is one "
        "sample). epochs: epochs run (early stopping keeps the best); train s: training time of "
        "the network(s) behind the row (MCBN's is the deterministic network's, the ensemble's "
        "the sum over its members).",
        "",
    ]
    for model, methods in grouped.items():
        lines += [f"**{model}**", "", *_accuracy_table(methods), "", _epistemic_share(methods), ""]
        if "deterministic" in methods and model == "lenet":
            err = min(_mean([m["error"] for m in ms]) for ms in methods.values())
            ok = "met" if err <= ERROR_TARGET else "**not met**"
            seeds = min(len(ms) for ms in methods.values())
            lines += [f"Best LeNet test error {err:.4f}; target ≤ {ERROR_TARGET}: {ok}"
                      f"{_evidence(seeds)}.", ""]  # fmt: skip
    lines += [SECTIONS[1], "",
              "OOD = positive class; a higher score means more likely OOD. The deterministic "
              "network's entropy and max-probability rows are the baseline. Mean score in/out: "
              "mean entropy (or MI) on Fashion-MNIST test / MNIST.", ""]  # fmt: skip
    for model, methods in grouped.items():
        lines += _ood_section(model, methods)
    lines += [SECTIONS[2], "",
              "Mean predictive entropy on corrupted test images, split into its aleatoric part "
              "(expected entropy) and epistemic part (mutual information), as in Trinh et al. "
              "Fig. 8. Gaussian: x̂ = (1 − γ)x + γε, ε ~ N(0, I), in the network's normalised "
              "input units; salt-and-pepper: each pixel black or white with probability p.",
              ""]  # fmt: skip
    for model, methods in grouped.items():
        name = f"corruption_{model}.png"
        figs.corruption_figure(methods, fig_dir / name)
        lines += [
            f"![corruption sweep, {model}]({rel}/{name})",
            "",
            *figs.corruption_table(methods),
            "",
        ]
    lines += [SECTIONS[3], "",
              "Error on the retained test images against the fraction retained, rejecting the "
              "most uncertain first (Shekhovtsov & Flach Fig. A.3); AURC is the area under the "
              "whole curve (lower is better).", ""]  # fmt: skip
    for model, methods in grouped.items():
        name = f"coverage_{model}.png"
        figs.coverage_figure(methods, fig_dir / name)
        lines += [f"![error–coverage, {model}]({rel}/{name})", "", *_coverage_table(methods), ""]
    lines += [SECTIONS[4], "", "Test set, 15 bins, seed 0; per-bin counts below each panel.", ""]
    for model, methods in grouped.items():
        name = f"reliability_{model}.png"
        figs.reliability_figure(methods, fig_dir / name)
        lines += [f"![reliability, {model}]({rel}/{name})", ""]
    lines += [SECTIONS[5], "",
              "MCBN with the statistics bank refilled with mini-batches of size b (bank of T "
              "batches) on the trained network (Mukhoti et al. Fig. 1): mean mutual information "
              f"on {p.n_corrupt} Fashion-MNIST test and {p.n_corrupt} MNIST images, OOD AUROC by "
              "MI, and the test error on those images. `bayesify bench mcbn-collapse` adds the "
              "Gaussian statistics model and retraining at each b.", ""]  # fmt: skip
    for model, methods in grouped.items():
        if "mcbn" not in methods:
            continue
        name = f"mcbn_sweep_{model}.png"
        sweeps = [m["mcbn_sweep"] for m in methods["mcbn"]]
        figs.mcbn_sweep_figure(sweeps, fig_dir / name)
        lines += [f"**{model}**", "", "| b | MI in | MI out | AUROC (MI) | error |",
                  "| ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
        for i, b in enumerate(s["b"] for s in sweeps[0]):
            col = {k: _cell([sw[i][k] for sw in sweeps]) for k in ("mi_in", "mi_out", "auroc",
                                                                    "error")}  # fmt: skip
            lines.append(f"| {b} | {col['mi_in']} | {col['mi_out']} | {col['auroc']} "
                         f"| {col['error']} |")  # fmt: skip
        lines += ["", f"![MCBN batch-size sweep, {model}]({rel}/{name})", ""]
    failed = [r for r in _failed(opts.store, keys)]
    if failed:
        lines += ["## Failed jobs", "", *[f"- {k}: {e}" for k, e in failed], ""]
    return write_report(out, "\n".join(lines))


def _failed(store: str, keys: dict[RowKey, Any]) -> list[tuple[str, str]]:
    with ResultsStore(store) as db:
        rows = [r for r in db.records("images", status="failed") if RowKey.of(r) in keys]
    return [(str(RowKey.of(r)), (r["error"] or "").strip().splitlines()[-1]) for r in rows]
