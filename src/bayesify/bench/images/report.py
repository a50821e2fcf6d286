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

from bayesify.bench.images.report_summary import OOD_SETS, by_score, cell, summary_section
from bayesify.bench.images.report_summary import pick as _pick
from bayesify.bench.images.scores import COVERAGE_GRID
from bayesify.bench.machine import machine_description, machine_label
from bayesify.bench.method_defaults import stale_defaults_note
from bayesify.bench.options import command_line, write_report
from bayesify.bench.preamble import read_preamble
from bayesify.bench.store import ResultsStore, RowKey
from bayesify.bench.summary import mean_se
from bayesify.predictive.ood import OOD_SCORES

#: the report's sections, in order (a test checks the page has each)
SECTIONS = (
    "## Summary: OOD AUROC and predict time per method",
    "## Accuracy and calibration",
    "## Out-of-distribution detection (MNIST)",
    "## Out-of-distribution detection (scikit-learn digits)",
    "## Corruption sweep",
    "## Error–coverage",
    "## Reliability diagrams",
    "## MCBN batch-size sweep",
)
SCORE_NAMES = {"entropy": "entropy", "mi": "mutual information", "max_prob": "1 − max prob"}
#: the OOD tables' word for each OOD score (:mod:`bayesify.predictive.ood`)
SCORE_LABELS = {"max_prob": "1 − max prob", "max_logit": "−max logit", "energy": "energy",
                "entropy": "entropy", "mutual_information": "MI", "mahalanobis": "Mahalanobis",
                "density": "−log density"}  # fmt: skip
ERROR_TARGET, AUROC_TARGET = 0.10, 0.95


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
    for r in sorted(rows, key=lambda r: r["seed"]):  # the first row of each method: its lowest seed
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
        cells = [cell([m[k] for m in ms]) for k in keys]
        cells += [cell([m["scaled"][k] for m in ms]) for k in ("nll", "ece")]
        cells.append(cell([m["temperature"] for m in ms], 3))
        epochs = "/".join(str(m["training"].get("epochs_run", "?")) for m in ms)
        secs = cell([m["training"].get("train_seconds") for m in ms], 0)
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


def ood_section(model: str, methods: dict[str, list], key: str = "ood") -> list[str]:
    """The page lines of one model's OOD tables on the OOD set ``key`` (a key of OOD_SETS) and
    the sentence under them."""
    table = {method: by_score(ms, key) for method, ms in methods.items()}
    names = [n for n in OOD_SCORES if any(n in s for s in table.values())]
    head = " | ".join(SCORE_LABELS[n] for n in names)
    lines = [f"**{model}**", "", "AUROC by score (OOD = positive; – where the method cannot "
             "give the score):", "",
             f"| method | default score | AUROC (default) | best score | AUROC (best) | {head} |",
             "| --- | --- | ---: | --- | ---: |" + " ---: |" * len(names)]  # fmt: skip
    picks = {}
    for method, scores in table.items():
        if not scores:
            continue
        default, best = picks[method] = _pick(method, scores)
        auc = {n: cell([p["auroc"] for p in per]) for n, per in scores.items()}
        cells = " | ".join(auc.get(n, "–") for n in names)
        lines.append(f"| {method} | {SCORE_LABELS[default]} | {auc[default]} "
                     f"| {SCORE_LABELS[best]} | {auc[best]} | {cells} |")  # fmt: skip
    lines += ["", "The default and the best score of each method in full (mean score: on "
              f"Fashion-MNIST test / {OOD_SETS[key]}):", "",
              "| method | score | AUROC | AUPR (OOD +) | FPR95 | mean score in | mean score out |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for method, (default, best) in picks.items():
        for n in dict.fromkeys((default, best)):
            per = table[method][n]
            cells = [cell([p.get(k) for p in per]) for k in ("auroc", "aupr", "fpr95",
                                                               "mean_in", "mean_out")]  # fmt: skip
            lines.append(f"| {method} | {SCORE_LABELS[n]} | {' | '.join(cells)} |")
    return [*lines, "", _verdict(table, picks, methods, OOD_SETS[key]), ""]


def _verdict(table: dict[str, dict], picks: dict[str, tuple[str, str]],
             methods: dict[str, list], ood_set: str = "MNIST") -> str:  # fmt: skip
    """The sentence under the tables: the best score overall, the baseline against the
    Bayesian methods' default scores, and the AUROC target."""
    if not picks:
        return "No OOD scores stored."

    def auroc(method: str, name: str) -> float:
        return _mean([p["auroc"] for p in table[method][name]])

    def shown(method: str, name: str) -> str:
        return cell([p["auroc"] for p in table[method][name]])

    top = max(picks, key=lambda m: auroc(m, picks[m][1]))
    best = auroc(top, picks[top][1])
    text = (f"Best score by mean AUROC: {top}'s {SCORE_LABELS[picks[top][1]]} "
            f"({shown(top, picks[top][1])}); a best score is picked on these {ood_set} images, "
            "so it is an upper bound, not a tuned detector.")  # fmt: skip
    bayes = [m for m in picks if m != "deterministic"]
    seeds = min(len(ms) for ms in methods.values())
    if "deterministic" in picks and bayes:
        lead = max(bayes, key=lambda m: auroc(m, picks[m][0]))
        base = table["deterministic"][picks["deterministic"][0]]
        verb = _above(table[lead][picks[lead][0]], base, seeds)
        text += (f" By its default score the best other method, {lead} "
                 f"({SCORE_LABELS[picks[lead][0]]}, {shown(lead, picks[lead][0])}), {verb} "
                 f"the deterministic baseline ({SCORE_LABELS[picks['deterministic'][0]]}, "
                 f"{shown('deterministic', picks['deterministic'][0])}).")  # fmt: skip
    ok = "met" if best >= AUROC_TARGET else "**not met**"
    return text + f" Target AUROC ≥ {AUROC_TARGET} (best mean): {ok}{_evidence(seeds)}."


def _above(ours: list[dict], base: list[dict], seeds: int) -> str:
    """How one mean AUROC stands against another, claiming no more than the rows show: "beats"
    only with two or more seeds and a gap above the two standard errors combined."""
    (m, se), (mb, seb) = (mean_se([p["auroc"] for p in ps], drop="none") for ps in (ours, base))
    if m <= mb:
        return "is not above"
    if seeds >= 2 and m - mb > math.hypot(se, seb):
        return "beats, by more than the two standard errors combined,"
    return "is above, on the mean,"


def _coverage_table(methods: dict[str, list]) -> list[str]:
    at = {c: i for i, c in enumerate(COVERAGE_GRID)}
    lines = ["| method | score | AURC | error at 100% | at 90% | at 80% | at 50% |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for method, ms in methods.items():
        for s in ("max_prob", "entropy") if method == "deterministic" else ("entropy", "mi"):
            cov = [m["coverage"][s] for m in ms]
            cells = [cell([c["aurc"] for c in cov])]
            cells += [cell([c["error"][at[f]] for c in cov]) for f in (1.0, 0.9, 0.8, 0.5)]
            lines.append(f"| {method} | {SCORE_NAMES[s]} | {' | '.join(cells)} |")
    return lines


SUMMARY_NOTE = (
    "Per method: its test error; its default and best OOD score's AUROC on each OOD set (the "
    "score in brackets; a best score is picked on the OOD set itself, an upper bound); its "
    "predict time per 1,000 rows with its T samples, beside an untrained deterministic "
    "network of the same model timed interleaved with it in the same job (median of 3 rounds "
    "after a warm-up on 500 test images, one torch thread), and their ratio (mean ± standard "
    "error over seeds of the per-job ratios). one pass: the method is one of issue 40's "
    "single-pass families (its body runs once per row; BatchEnsemble and Packed-Ensembles run "
    "their M members in one batched pass over M×N rows); the others sample T networks or batch "
    "statistics, and bayesify runs a network's deterministic prefix once, so MC dropout before "
    "the last linear layer costs little more than one pass: the ratio column, not the family, "
    "gives the cost. Below the tables, issue 40's target (a one-pass "
    "method within 0.01 AUROC of the best sampling method at ≤ 1.3× the deterministic time, "
    "by default scores, on the means) and issue 35's Laplace check, with their errors.",
)


def _digits_note(n_ood: int) -> list[str]:
    """The page's paragraph on how the digits are made MNIST-like."""
    from bayesify.bench.images import digits as dg

    return [f"Digits (the second OOD set): scikit-learn's `load_digits`, 1,797 8×8 images with "
            f"values 0–16 ({f'{n_ood} drawn without replacement' if 0 < n_ood < 1797 else 'all'}"
            f"), shipped with scikit-learn: values / 16 to [0, 1], bilinear upsampling to "
            f"{dg.BOX}×{dg.BOX} (the box MNIST's digits fill), {dg.PAD} black pixels of padding "
            "on each side to 28×28, then normalised with the Fashion-MNIST mean and standard "
            "deviation as the MNIST OOD images are.", ""]  # fmt: skip


def _seeds_note(seeds: int) -> str:
    """The header's word on seeds: one seed is said to be one run per row."""
    if seeds < 2:
        return (" (every row is one trained network: no error bars, and no difference between "
                "rows on this page is a tested one)")  # fmt: skip
    return " (± is the standard error over seeds)"


def _other_methods_note() -> str:
    """The header's word on the methods not built with their defaults (``jobs._build``)."""
    from bayesify.bench.images.jobs import SWAG_EPOCHS, SWAG_TRAIN_ROWS, TTA_TRANSFORMS

    return ("BBB: the last two layers Bayesian (the ResNet's last one), initial ρ −6; IBNN: 4 "
            "components, 2 training samples, prior std 0.3, on the network without batch norm; "
            "StochasticNorm and SNGP on the network without batch norm; TTA and MC dropout + "
            f"TTA: the deterministic / MC dropout network, not retrained, transforms "
            f"{TTA_TRANSFORMS}; the Laplace rows post-hoc on the deterministic network "
            "(laplace-torch: its own object, last-layer KFAC, probit); SWAG and MultiSWAG from "
            f"the deterministic network, {SWAG_EPOCHS} epochs of SGD over {SWAG_TRAIN_ROWS:,} "
            "training rows per trajectory; the others with their defaults "
            "(bayesify.<Method>(lenet)).")  # fmt: skip


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
    preamble = read_preamble(opts.preamble, opts.out).strip()
    lines = [
        "# Fashion-MNIST: accuracy, calibration and out-of-distribution detection per method",
        "",
        *([preamble, ""] if preamble else []),
        f"Command: `{command_line(opts)}`{_niceness()}.  ",
        f"{machine_label(bool(summary.finished))}: {machine_description()}.  ",
        f"This call: {summary}, {wall / 60:.1f} min wall; job time in the store (sum over "
        f"these {len(rows)} rows): {job_seconds / 60:.1f} min.  ",
        *stale_defaults_note((r["method"], r["metrics"]) for r in rows),
        f"Preset `{opts.preset}`: models {', '.join(p.models)}; methods {', '.join(p.methods)}; "
        f"{p.seeds} seed(s){_seeds_note(p.seeds)}; at most {p.epochs} epochs, early stopping "
        f"on the validation loss (patience {p.patience}; the best epoch is kept); Adam lr "
        f"{first.lr}, batch {first.batch_size}; T = {p.samples} samples.  ",
        f"Data: Fashion-MNIST training images minus a random validation part of {first.n_val} "
        f"(early stopping; the temperature is fitted on {p.n_calib} of them); the Fashion-MNIST "
        f"test set{f' (a stratified {first.n_test})' if first.n_test else ' (all 10,000)'}; "
        f"MNIST test images as the first OOD set ({p.n_ood or 'all 10,000'}), scikit-learn's "
        f"digits as the second; corruptions of the first {p.n_corrupt} test images.  ",
        "Methods: deterministic = the batch-norm network with its running statistics; MCBN = "
        f"the same network, a bank of {first.bank_size} training mini-batches of "
        f"{first.batch_size}; MC dropout = p {first.dropout} before the last linear layer; "
        f"ensemble = {p.members} deterministic networks (seeds s, s+1000, …), its first member "
        f"is the deterministic network; BatchEnsemble and Packed-Ensembles (α 2, γ 1) have "
        f"{p.members} members each, trained from scratch, their fast weights / packed weights "
        "drawn with the job's seed; " + _other_methods_note(),
        "",
        *_digits_note(p.n_ood),
        SECTIONS[0],
        "",
        *SUMMARY_NOTE,
        "",
    ]
    for model, methods in grouped.items():
        lines += summary_section(model, methods, SCORE_LABELS)
    lines += [
        SECTIONS[1],
        "",
        "Test error, NLL, ECE (15 bins), Brier score of the mean prediction; (TS): after "
        "temperature scaling, the temperature fitted on validation images. T: samples drawn "
        "(the deep ensemble, BatchEnsemble and Packed-Ensembles draw their M deterministic "
        "members once each; the deterministic net is one "
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
    lines += [SECTIONS[2], "",
              "OOD = positive class; a higher score means more likely OOD. Every score a method "
              "gives (bayesify.OOD_SCORES): the maximum softmax probability, max-logit and energy "
              "(where the outputs are logits), entropy, mutual information, Mahalanobis on the "
              "penultimate features (fitted on the training images) and the method's own "
              "feature density where it has one. A method's default score: its density where it "
              "has one, else MI (entropy for laplace-torch, whose T samples are equal), the "
              "deterministic network's 1 − max prob (the baseline).",
              ""]  # fmt: skip
    for model, methods in grouped.items():
        lines += ood_section(model, methods)
    lines += [SECTIONS[3], "", "The same scores against scikit-learn's digits (see Data above).",
              ""]  # fmt: skip
    for model, methods in grouped.items():
        lines += ood_section(model, methods, "ood_digits")
    lines += [SECTIONS[4], "",
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
    lines += [SECTIONS[5], "",
              "Error on the retained test images against the fraction retained, rejecting the "
              "most uncertain first (Shekhovtsov & Flach Fig. A.3); AURC is the area under the "
              "whole curve (lower is better).", ""]  # fmt: skip
    for model, methods in grouped.items():
        name = f"coverage_{model}.png"
        figs.coverage_figure(methods, fig_dir / name)
        lines += [f"![error–coverage, {model}]({rel}/{name})", "", *_coverage_table(methods), ""]
    firsts = {min(r["seed"] for r in rows if keys[RowKey.of(r)].method == m)
              for ms in grouped.values() for m in ms}  # fmt: skip
    shown_seed = f"seed {firsts.pop()}" if len(firsts) == 1 else "each method's lowest seed"
    lines += [SECTIONS[6], "", f"Test set, 15 bins, {shown_seed}; per-bin counts below each panel.",
              ""]  # fmt: skip
    for model, methods in grouped.items():
        name = f"reliability_{model}.png"
        figs.reliability_figure(methods, fig_dir / name)
        lines += [f"![reliability, {model}]({rel}/{name})", ""]
    lines += [SECTIONS[7], "",
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
            col = {k: cell([sw[i][k] for sw in sweeps]) for k in ("mi_in", "mi_out", "auroc",
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
