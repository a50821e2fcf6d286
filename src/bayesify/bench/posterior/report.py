"""The page of ``bayesify bench posterior``: HMC diagnostics per run, every method's distances
to the reference per problem (mean over splits), and the 1-D toy's bands side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bayesify.bench.options import command_line, write_report
from bayesify.bench.runner import stored_rows

EXPERIMENT = "posterior"
PUBLISHED = [
    "## Published HMC figures",
    "",
    "None is quoted: the papers in `../shared/papers` report no HMC runs, and the HMC test "
    "log-likelihoods of Bui et al. 2016 (arXiv 1602.04133, which compares HMC for BNNs on UCI) "
    "and Izmailov et al. 2021 could not be found in any text reachable here (searches returned "
    "their abstracts only; a second search of stored pages and documentation reached the "
    "abstract and introduction of 1602.04133, never its results tables), so no table or page "
    "of theirs is cited. What was checked: the "
    "prior variance 1/5 is the one Izmailov et al. 2021 list for HMC in their Table 3 "
    "(CIFAR-10 and CIFAR-100 ResNet-20; 1/40 for the IMDB CNN-LSTM); they state none for MLPs, "
    "and we use 1/5 unchanged.",
    "",
]


def _f(v: Any, digits: int = 3) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else (
        f"{v:.{digits}f}")  # fmt: skip


STRICT_RHAT, STRICT_ESS = 1.01, 400  # the usual bar for a reference (Vehtari et al. 2021)


def _mean(values: list[Any]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _diagnostics(refs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| problem | split | R-hat max | R-hat median | ESS min | ESS median | divergences | "
        "accept | steps / draw | HMC s | test LL | RMSE / acc. | reference? "
        f"| R-hat ≤ {STRICT_RHAT}, ESS ≥ {STRICT_ESS}? |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in refs:
        m = r["metrics"]
        ok = "yes" if m["reference"] else f"**no** (R-hat {m['rhat_max']:.2f} > 1.05)"
        lines.append(
            f"| {r['dataset']} | {r['split']} | {_f(m['rhat_max'])} | {_f(m['rhat_median'])} | "
            f"{_f(m['ess_min'], 0)} | {_f(m['ess_median'], 0)} | {m['divergences']} | "
            f"{_f(m['accept'], 2)} | {_f(m['steps'], 0)} | {_f(m['hmc_seconds'], 0)} | "
            f"{_f(m['ll'])} | {_f(m.get('rmse', m.get('accuracy')))} | {ok} | {_strict(m)} |"
        )
    return lines


def _strict(m: dict[str, Any]) -> str:
    """Whether a run meets the usual bar (R-hat ≤ 1.01 and ESS ≥ 400), and what fails."""
    fails = []
    if not m["rhat_max"] <= STRICT_RHAT:
        fails.append(f"R-hat {m['rhat_max']:.3f}")
    if not m["ess_min"] >= STRICT_ESS:
        fails.append(f"ESS {m['ess_min']:.0f}")
    return "yes" if not fails else f"**no** ({', '.join(fails)})"


def _limitations(refs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    """What the page cannot show, with the counts of this store."""
    strict = [r for r in refs if _strict(r["metrics"]) == "yes"]
    rhat_ok = sum(r["metrics"]["rhat_max"] <= STRICT_RHAT for r in refs)
    ess_low = sum(r["metrics"]["ess_min"] < STRICT_ESS for r in refs)
    seeds = {(r["dataset"], r["split"], r["method"]) for r in rows}
    one_run = len(seeds) == len(rows)
    return [
        "## Limitations",
        "",
        "- **Distances on the whole predictive only.** W2 and the std ratios compare "
        "predictives with their noise term: they cannot tell a matching weight posterior from a "
        "collapsed one whose fitted noise is wider. Distances on f(x), the network output "
        "before noise, are not computed yet.",
        "- **No HMC-against-HMC floor.** No second reference with another seed is run, so no "
        "difference in W2, TV or agreement here is known to exceed what two HMC runs of the "
        "same posterior would show (two 1,000-draw samples of one N(0, 0.8²) differ by about "
        "0.06 in W2).",
        f"- **Convergence.** A run is used when its largest R-hat is at most 1.05; {rhat_ok} of "
        f"{len(refs)} runs meet R-hat ≤ {STRICT_RHAT}, {ess_low} of {len(refs)} have a smallest "
        f"ESS below {STRICT_ESS}, and {len(strict)} meet both (last column of the diagnostics "
        "table; ESS is NumPyro's `effective_sample_size`, not the rank-normalised bulk ESS).",
        "- **Seeds and splits.** "
        + ("Every row is one run (one seed) per split; " if one_run else "")
        + "the method tables are means over the splits of the diagnostics table, without "
        "standard errors, so no difference between methods here is a tested one.",
        "- **Modelling choices.** σ is fixed at the MAP network's validation RMSE on UCI, and "
        "the prior variance 1/5 is Izmailov et al.'s setting for a CIFAR ResNet-20; neither is "
        "justified for these MLPs by a sensitivity run.",
        "- **Toy-2d agreement.** Agreement and TV are over all test inputs; inputs in the data "
        "are easy (HMC's class probabilities there are near 0 or 1), so the spread between "
        "methods comes from the gap points, where HMC is near p = 0.5 and a method's class can "
        "flip between reruns. They are not reported apart yet.",
        "",
    ]


def gal_rows(csv: Path, dataset: str, splits: set[int]) -> dict[str, float]:
    """Mean homoscedastic test LL per method of ``bench uci --protocol gal`` on ``splits`` of
    ``dataset``, from its CSV of rows (empty when the file or rows are absent; a method is left
    out unless it has exactly one row on each split)."""
    import csv as csv_module

    if not csv.is_file():
        return {}
    found: dict[str, dict[int, list[float]]] = {}
    with csv.open() as f:
        for row in csv_module.DictReader(f):
            keep = row["protocol"] == "gal" and row["likelihood"] == "homoscedastic"
            if keep and row["dataset"] == dataset and int(row["split"]) in splits and row["ll"]:
                found.setdefault(row["method"], {}).setdefault(int(row["split"]), []).append(
                    float(row["ll"])
                )
    # a method with several configurations on a split (e.g. reruns at other epochs) is ambiguous
    return {m: sum(v[0] for v in per.values()) / len(per) for m, per in found.items()
            if len(per) == len(splits) and all(len(v) == 1 for v in per.values())}  # fmt: skip


def _table(
    dataset: str, refs: list[dict], rows: list[dict], methods: list[str], gal: dict[str, float]
) -> list[str]:
    classification = any("accuracy" in r["metrics"] for r in refs)
    ref_ok = all(r["metrics"]["reference"] for r in refs)
    gap = any(r["metrics"].get("std_ratio_gap") is not None for r in rows)
    head = ["method", *(["agreement", "TV"] if classification else ["W2 (all)"]),
            *([] if classification or not gap else ["W2 (gap)"]), "std ratio (data)",
            *(["std ratio (gap)"] if gap else []), "test LL",
            *(["LL in uci.md"] if gal else []), "runs"]  # fmt: skip
    note = "" if ref_ok else " — **not a reference** (some split has R-hat > 1.05)"
    lines = [f"### {dataset}{note}", "", "| " + " | ".join(head) + " |",
             "| " + " | ".join("---" for _ in head) + " |"]  # fmt: skip
    ll = _mean([r["metrics"]["ll"] for r in refs])
    cells = ["**HMC**", *(["1", "0"] if classification else ["0"]),
             *([] if classification or not gap else ["0"]), "1", *(["1"] if gap else []),
             _f(ll), *(["–"] if gal else []), str(len(refs))]  # fmt: skip
    lines.append("| " + " | ".join(cells) + " |")
    for method in methods:
        mine = [r["metrics"] for r in rows if r["method"] == method]
        if not mine:
            continue

        def avg(key: str, metrics: list[dict[str, Any]] = mine) -> str:
            return _f(_mean([m.get(key) for m in metrics]))

        cells = [method, *([avg("agreement"), avg("tv")] if classification else [avg("w2")]),
                 *([] if classification or not gap else [avg("w2_gap")]), avg("std_ratio_data"),
                 *([avg("std_ratio_gap")] if gap else []), avg("ll"),
                 *([_f(gal.get(method))] if gal else []), str(len(mine))]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _figure(ref: dict[str, Any], rows: list[dict[str, Any]], path: Path) -> None:
    """One panel per method: HMC's predictive band (mean ± 2 std) and the method's."""
    import torch

    from bayesify.bench.posterior.problems import load_problem
    from bayesify.plots import new_figure, save_figure

    problem = load_problem("toy-1d", ref["split"])
    grid = problem.x_test[:, 0]
    cols = min(3, len(rows)) or 1
    nrows = max(1, math.ceil(len(rows) / cols))
    fig, axes = new_figure(figsize=(3.0 * cols, 2.3 * nrows), nrows=nrows, ncols=cols,
                           squeeze=False, sharex=True, sharey=True)  # fmt: skip
    hm, hs = torch.tensor(ref["metrics"]["grid_mean"]), torch.tensor(ref["metrics"]["grid_std"])
    for ax, row in zip(axes.flat, rows, strict=False):
        ax.fill_between(grid, hm - 2 * hs, hm + 2 * hs, color="0.75", label="HMC ±2 std")
        ax.plot(grid, hm, color="black", lw=1)
        mm, ms = torch.tensor(row["metrics"]["grid_mean"]), torch.tensor(row["metrics"]["grid_std"])
        ax.plot(grid, mm, color="C3", lw=1)
        ax.plot(grid, mm - 2 * ms, color="C3", lw=1, ls="--", label=f"{row['method']} ±2 std")
        ax.plot(grid, mm + 2 * ms, color="C3", lw=1, ls="--")
        ax.scatter(problem.x_train[:, 0], problem.y_train, s=4, color="C0", zorder=3)
        ax.axvspan(-0.8, 0.8, color="C2", alpha=0.08)
        ax.set_title(row["method"], fontsize=9)
        ax.set_ylim(-3, 3)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="lower left")
    for ax in axes.flat[len(rows) :]:
        ax.set_visible(False)
    fig.supxlabel("x (shaded: the gap between the two clusters of inputs)", fontsize=8)
    save_figure(fig, path, dpi=90)


def report(opts: Any, jobs: list[Any], summary: str, wall: float, page: Path) -> str:
    """Write the page (and the toy figure in a folder named after it) from the store's rows of
    ``jobs``."""
    from bayesify.bench.machine import machine_description

    rows = stored_rows(opts.store, EXPERIMENT, jobs)
    refs = [r for r in rows if r["method"] == "hmc"]
    scored = [r for r in rows if r["method"] != "hmc"]
    methods = list(dict.fromkeys(j.method for j in jobs if j.method != "hmc"))
    datasets = list(dict.fromkeys(j.dataset for j in jobs))
    seconds = sum(r["seconds"] or 0.0 for r in rows)
    lines = [
        "# How close is each method to the posterior? (HMC reference)",
        "",
        f"`{command_line(opts)}`",
        "",
        f"{machine_description()}; this call: {summary} ({wall:.0f} s wall); job time of "
        f"these rows in the store: {seconds:.0f} s.",
        "",
        "## HMC diagnostics per run",
        "",
        "R-hat and ESS of the predictive (regression: the network's output; classification: "
        "each class probability) per test input, split R-hat over the chains; a run is a "
        "reference only when the largest R-hat is at most 1.05, a looser bar than the usual "
        f"R-hat ≤ {STRICT_RHAT} and ESS ≥ {STRICT_ESS}: the last column marks the runs that "
        "fail that one.",
        "",
        *_diagnostics(refs),
        "",
        "## Each method against the reference (mean over splits)",
        "",
        "W2: 2-Wasserstein distance between the method's and HMC's predictive distribution per "
        "test input (standardised target units for UCI; by 1000 draws of each), averaged over "
        "inputs. TV: total variation of the class probabilities; agreement: fraction of inputs "
        "with HMC's most probable class. std ratio: mean predictive std of the method / HMC's "
        "(classification: std of the class probabilities over samples), on test inputs in the "
        "data and in the gap between clusters. Test LL on inputs in the data (UCI: original "
        "units). LL in uci.md: the same method's homoscedastic test LL on the same Gal splits "
        "in `benchmarks/uci.md` (`bench uci --protocol gal`: its own grids and epochs, "
        "trained on the same 80% of the training split), for comparison. W2 and the std "
        "ratios include the noise term (see Limitations).",
        "",
    ]
    for d in datasets:
        mine = [r for r in refs if r["dataset"] == d]
        gal = gal_rows(page.parent / "uci" / "rows.csv", d, {r["split"] for r in mine})
        lines += _table(d, mine, [r for r in scored if r["dataset"] == d], methods, gal)
    toy = [r for r in refs if r["dataset"] == "toy-1d"]
    if toy:
        figure = page.with_suffix("") / "toy_1d.png"
        mine = [r for r in scored if r["dataset"] == "toy-1d" and r["split"] == toy[0]["split"]]
        _figure(toy[0], mine, figure)
        link = f"{figure.parent.name}/{figure.name}"
        lines += [f"![HMC's predictive band and each method's on the 1-D toy]({link})", ""]
    lines += _limitations(refs, scored)
    return write_report(page, "\n".join([*lines, *PUBLISHED]))
