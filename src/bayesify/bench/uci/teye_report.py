"""MCBN vs CUBN over UCI datasets and Teye et al.'s splits -> markdown table, uncertainty–error
figures and a results store (``bayesify demo`` runs :func:`run_uci_benchmark`), and Teye et al.'s
Table 1 figures that ``bayesify bench uci --protocol teye`` puts beside ours.
"""

from __future__ import annotations

import logging
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from bayesify.atomic import write_text
from bayesify.bench.machine import machine_description
from bayesify.bench.store import ResultsStore
from bayesify.bench.summary import markdown_table, significance
from bayesify.bench.uci.teye import UCISettings, run_mcbn_split
from bayesify.options import NoiseProtocol
from bayesify.plots.uncertainty import uncertainty_error_plot
from bayesify.posthoc.noise import teye_tau_range
from bayesify.progress import progress_bar

log = logging.getLogger(__name__)

EXPERIMENT = "uci-mcbn"
METRICS = ("rmse", "pll", "crps", "pll_norm", "crps_norm")
HEADERS = ("RMSE", "PLL", "CRPS", "norm. PLL", "norm. CRPS")
# Teye et al. 2018, Table 1: normalised CRPS / PLL of MCBN (×100)
TEYE_TABLE_1 = {
    "bostonHousing": (8.50, 10.49),
    "concrete": (3.91, -36.36),
    "energy": (5.75, 10.89),
    "kin8nm": (2.85, 1.68),
    "power-plant": (0.24, 0.33),
    "protein-tertiary-structure": (2.66, 2.56),
    "wine-quality-red": (0.26, 0.19),
    "yacht": (-56.39, 45.58),
}
# Teye et al. 2018, Table 1: normalised CRPS / PLL of MCDO (×100)
TEYE_TABLE_1_MCDO = {
    "bostonHousing": (3.06, 5.51),
    "concrete": (0.93, 10.92),
    "energy": (1.37, -14.28),
    "kin8nm": (1.82, -0.26),
    "power-plant": (-0.44, 3.52),
    "protein-tertiary-structure": (0.99, 6.23),
    "wine-quality-red": (2.00, 2.91),
    "yacht": (21.42, -41.54),
}


# the stars Teye et al. print beside each Table 1 number (CRPS, PLL)
TEYE_STARS = {
    "MCBN": {
        "bostonHousing": ("****", "****"), "concrete": ("****", "**"), "energy": ("****", "****"),
        "kin8nm": ("****", "***"), "power-plant": ("***", "**"),
        "protein-tertiary-structure": ("****", "****"), "wine-quality-red": ("**", "*"),
        "yacht": ("***", "****"),
    },
    "MCDO": {
        "bostonHousing": ("****", "****"), "concrete": ("*", "****"), "energy": ("ns", "*"),
        "kin8nm": ("****", "ns"), "power-plant": ("****", "****"),
        "protein-tertiary-structure": ("****", "****"), "wine-quality-red": ("****", "****"),
        "yacht": ("****", "ns"),
    },
}  # fmt: skip


DEMO_DATASETS = ("bostonHousing", "concrete", "energy")  # small: `bayesify demo`'s


def machine() -> str:
    """One line naming the machine a benchmark ran on."""
    return machine_description("cpu")


def run_uci_benchmark(
    datasets: Sequence[str],
    splits: int,
    settings: UCISettings,
    out: Path,
    *,
    seed: int = 0,
    progress: bool = True,
    on_result: Callable[[str, int, dict], None] | None = None,
) -> tuple[str, list[dict]]:
    """Train and score every (dataset, split); write ``out/uci_mcbn.md``, figures, results.db.

    The report holds this run's cells only; ``results.db`` keeps every run's (a re-run cell
    replaces its row; a cell is the mean over test seeds). Returns the markdown text and the
    result rows.
    """
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(out / "results.db")
    jobs = [(d, s) for d in datasets for s in range(splits)]
    rows: list[dict] = []  # this run's cells only: the store also holds earlier runs'
    seed_rows: list[dict] = []  # one per (split, test seed): the t-test's sample
    start = time.time()
    for name, split in progress_bar(jobs, desc="UCI splits", progress=progress):
        run = run_mcbn_split(name, split, settings, seed=seed)
        for method, scores in run.scores.items():
            store.add(EXPERIMENT, name, split, method, scores, asdict(settings))
            rows.append({"dataset": name, "split": split, "method": method, **scores})
        for per_seed in getattr(run, "seed_scores", None) or [run.scores]:
            for method, scores in per_seed.items():
                seed_rows.append({"dataset": name, "method": method, **scores})
        if on_result is not None:
            on_result(name, split, run.scores)
        if split == 0:
            uncertainty_error_plot(
                run.pred,
                run.split.y_test_original,
                title=f"MCBN on {name} (split 0, test set)",
                path=out / f"uncertainty_error_{name}.png",
            )
    rows.sort(key=lambda r: (r["dataset"], r["method"], r["split"]))
    minutes = (time.time() - start) / 60
    text = render_markdown(rows, datasets, splits, settings, seed_rows=seed_rows, minutes=minutes)
    write_text(out / "uci_mcbn.md", text)
    return text, rows


def noise_protocol_text(settings: UCISettings) -> str:
    """One sentence saying how τ and the constant baseline were fitted."""
    if settings.noise_protocol == NoiseProtocol.TEYE:
        return (
            "τ protocol **teye** (Teye et al.): one τ per model, fitted by the validation CRPS "
            "inside the authors' per-dataset τ range and used for both PLL and CRPS; the "
            "constant baseline's variance (CUBN/CUDO) also fitted by CRPS and used for both."
        )
    return (
        "τ protocol **bayesify**: τ and the constant baseline's variance fitted on validation "
        "data separately for PLL (σ² = MSE for the baseline) and for CRPS, τ⁻¹ searched over "
        "e⁻²⁰…e³ × MSE."
    )


def _cell(values: list[float]) -> str:
    if not values:
        return "–"
    _, stars = significance(values)
    mean = sum(values) / len(values)
    return f"{mean:.2f} {stars}" if stars != "n/a" else f"{mean:.2f}"


def render_markdown(
    rows: list[dict],
    datasets: Sequence[str],
    splits: int,
    settings: UCISettings,
    *,
    seed_rows: list[dict] | None = None,
    minutes: float | None = None,
) -> str:
    """The benchmark page: command, machine, settings, table, comparison with Teye et al.'s
    Table 1 with one-sided one-sample t-test stars over (split, seed) values."""
    seed_rows = rows if seed_rows is None else seed_rows
    methods = sorted({r["method"] for r in rows})
    search = (
        f"{settings.cv_folds}-fold cross-validation on the training part"
        if settings.cv_folds
        else "one hold-out (last 20% of the training part)"
    )
    lines = [
        "# MCBN vs constant uncertainty (CUBN) on UCI regression",
        "",
        f"Command: `{shlex.join(['bayesify', *sys.argv[1:]])}`  ",
        f"Machine: {machine()}  ",
        *([f"Wall time: {minutes:.1f} min  "] if minutes is not None else []),
        f"Preset: **{settings.preset}**; hyper-parameters chosen by validation RMSE with {search}. "
        f"Settings: {asdict(settings)}",
        "",
        noise_protocol_text(settings),
        "",
        "Mean ± standard error over splits (each split: mean over its test seeds; ± – where "
        "one split ran, n = 1, so there is no standard error); RMSE, PLL and "
        "CRPS in original target units. Normalised scores ×100: 0 = the constant-variance "
        "baseline, 100 = per-point optimal variance (Teye et al. 2018 §4.2).",
        "",
        markdown_table(rows, METRICS, HEADERS),
        "",
        "Normalised scores beside Teye et al.'s Table 1. Stars: one-sided one-sample t-test that "
        "the mean over all (split, test seed) values exceeds 0 (* p < 0.05, ** < 0.01, "
        "*** < 0.001, **** < 0.0001, ns otherwise); the paper's stars in its column.",
        "",
    ]
    pairs = [("MCBN", TEYE_TABLE_1)] + ([("MCDO", TEYE_TABLE_1_MCDO)] if "MCDO" in methods else [])
    head = ["dataset"]
    for m, _ in pairs:
        head += [f"{m} norm. CRPS", "Teye", f"{m} norm. PLL", "Teye"]
    lines += ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for d in datasets:
        cells = [d]
        for m, table in pairs:
            vals = [r for r in seed_rows if r["dataset"] == d and r["method"] == m]
            ref = table.get(d, (float("nan"), float("nan")))
            cells += [
                _cell([r["crps_norm"] for r in vals]), f"{ref[0]:.2f} {TEYE_STARS[m][d][0]}",
                _cell([r["pll_norm"] for r in vals]), f"{ref[1]:.2f} {TEYE_STARS[m][d][1]}",
            ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *_noise_lines(rows, datasets, settings), ""]
    return "\n".join(lines)


def _noise_lines(rows: list[dict], datasets: Sequence[str], settings: UCISettings) -> list[str]:
    """τ⁻¹ (used for PLL) per dataset and method in original target units², and whether it sits
    on the lower end of the search range (Teye's rule: τ⁻¹ = 1/τ_max)."""
    lo = {d: 1.0 / teye_tau_range(d)[1] for d in datasets}
    out = [
        "τ⁻¹ used for PLL and the constant variance (original target units²; mean over "
        "splits); † = τ⁻¹ at the lower end of the search range (1/τ_max of Teye's range).",
        "",
        "| dataset | method | τ⁻¹ | constant variance |",
        "| --- | --- | ---: | ---: |",
    ]
    for d in datasets:
        for r_method in sorted({r["method"] for r in rows if "noise_var" in r}):
            vals = [r for r in rows if r["dataset"] == d and r["method"] == r_method]
            if not vals:
                continue
            nv = sum(r["noise_var"] for r in vals) / len(vals)
            cv = sum(r["constant_var"] for r in vals) / len(vals)
            teye = settings.noise_protocol == NoiseProtocol.TEYE
            mark = " †" if teye and any(r["noise_var"] <= lo[d] * 1.0001 for r in vals) else ""
            out.append(f"| {d} | {r_method} | {nv:.4g}{mark} | {cv:.4g} |")
    return out
