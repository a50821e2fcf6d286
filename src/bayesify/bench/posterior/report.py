"""The page of ``bayesify bench posterior``: every method's distances to the reference on f(x)
beside the HMC-against-HMC floor (mean over splits), HMC diagnostics per run, the distances on
the whole predictive, and the 1-D toy's bands side by side."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bayesify.bench.options import command_line, write_report
from bayesify.bench.posterior.checks import (
    NOISE,
    PRIOR,
    check_kind,
    job_check_kind,
    noise_section,
    prior_section,
)
from bayesify.bench.posterior.floor_table import fmt as _f
from bayesify.bench.posterior.floor_table import fx_table, predictive_table
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


STRICT_RHAT, STRICT_ESS = 1.01, 400  # the usual bar for a reference (Vehtari et al. 2021)


def _diagnostics(refs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| problem | split | seed | R-hat max | R-hat median | rank R-hat max | ESS min | "
        "bulk ESS min | bulk ESS median | divergences | accept | steps / draw | HMC s | test LL "
        f"| RMSE / acc. | reference? | R-hat ≤ {STRICT_RHAT}, bulk ESS ≥ {STRICT_ESS}? |",
        "| " + " | ".join(["---"] * 17) + " |",
    ]
    for r in refs:
        m = r["metrics"]
        ok = "yes" if m["reference"] else f"**no** (R-hat {m['rhat_max']:.2f} > 1.05)"
        lines.append(
            f"| {r['dataset']} | {r['split']} | {r['seed']} | {_f(m['rhat_max'])} | "
            f"{_f(m['rhat_median'])} | {_f(m.get('rhat_rank_max'))} | {_f(m['ess_min'], 0)} | "
            f"{_f(m.get('ess_bulk_min'), 0)} | {_f(m.get('ess_bulk_median'), 0)} | "
            f"{m['divergences']} | {_f(m['accept'], 2)} | {_f(m['steps'], 0)} | "
            f"{_f(m['hmc_seconds'], 0)} | {_f(m['ll'])} | "
            f"{_f(m.get('rmse', m.get('accuracy')))} | {ok} | {_strict(m)} |"
        )
    return lines


def _strict(m: dict[str, Any]) -> str:
    """Whether a run meets the usual bar (R-hat ≤ 1.01, the larger of split and rank-normalised
    R-hat, and bulk ESS ≥ 400), and what fails; rows stored before bulk ESS was computed are
    judged on NumPyro's ESS and say so."""
    rhat = max(m["rhat_max"], m.get("rhat_rank_max", m["rhat_max"]))
    bulk = m.get("ess_bulk_min")
    fails = []
    if not rhat <= STRICT_RHAT:
        fails.append(f"R-hat {rhat:.3f}")
    if bulk is None and not m["ess_min"] >= STRICT_ESS:
        fails.append(f"ESS {m['ess_min']:.0f}, not bulk")
    elif bulk is not None and not bulk >= STRICT_ESS:
        fails.append(f"bulk ESS {bulk:.0f}")
    return "yes" if not fails else f"**no** ({', '.join(fails)})"


def _problems(datasets: list[str]) -> str:
    """Problems in words, in order: "the toys" for more than one toy, then the others."""
    found = list(dict.fromkeys(datasets))
    toys = [d for d in found if d.startswith("toy")]
    return " and ".join([*(["the toys"] if len(toys) > 1 else toys),
                         *(d for d in found if d not in toys)])  # fmt: skip


def _limitations(refs: list[dict[str, Any]], rows: list[dict[str, Any]],
                 prior: list[str] | None = None, noise: int = 0) -> list[str]:  # fmt: skip
    """What the page cannot show, with the counts of this store (``prior``: the problems the
    prior check covers; the toy-2d item only where toy-2d has rows)."""
    on = _problems(prior or [])
    sigmas = {1: "one other σ", 2: "two other σ"}.get(noise, f"{noise} other σ")
    strict = sum(_strict(r["metrics"]) == "yes" for r in refs)
    loose = sum(bool(r["metrics"]["reference"]) for r in refs)
    cells = {(r["dataset"], r["split"], r["method"]) for r in rows}
    runs = sorted({sum((r["dataset"], r["split"], r["method"]) == c for r in rows) for c in cells})
    apart = any("agreement_data" in r["metrics"] for r in rows)
    toy_2d = [
        "- **Toy-2d agreement.** Inputs in the data are easy (HMC's class probabilities there "
        "are near 0 or 1); the gap points, where HMC is near p = 0.5, are where a method's "
        "class can flip between runs. "
        + (
            "The whole-predictive table reports agreement and TV for the two apart."
            if apart
            else "Agreement and TV are over all test inputs, not reported apart."
        )
    ] if any(r["dataset"] == "toy-2d" for r in (*refs, *rows)) else []  # fmt: skip
    return [
        "## Limitations",
        "",
        "- **One floor per split.** The floor is one second reference per problem and split, "
        "subsampled once to the method's draws: it is itself a noisy estimate of what two HMC "
        "runs differ by, and a method just above or below it is not known to differ from it. "
        "Both references share the fixed σ and the sampler's settings, so the floor says "
        "nothing about errors the two runs share (a mode neither chain reached).",
        f"- **Convergence.** {loose} of {len(refs)} runs pass the page's bar (largest split "
        f"R-hat ≤ 1.05); {strict} of {len(refs)} meet R-hat ≤ {STRICT_RHAT} and bulk ESS ≥ "
        f"{STRICT_ESS} (last column of the diagnostics table). Distances to a run that fails "
        "the stricter bar carry its Monte Carlo error too, which the floor (two such runs) "
        "includes.",
        "- **Seeds and splits.** Each method ran "
        + "/".join(map(str, runs))
        + " time(s) per problem and split (method seeds), against the one reference of the "
        "split. On a problem with one split the standard errors are the methods' "
        "seed-to-seed spread; with several, the split-to-split spread of the split means "
        "(each over its seeds), so they include how much the data and the reference move "
        "a score. Neither is the reference's Monte Carlo error alone, which the floor stands "
        "for. A difference between two methods smaller than their standard errors together "
        "is not one this page can tell.",
        "- **Modelling choices.** σ is fixed at the MAP network's validation RMSE on UCI, and "
        "the prior variance 1/5 is Izmailov et al.'s setting for a CIFAR ResNet-20. "
        + {
            (True, True): f"The prior sensitivity section checks one other prior on {on} (not "
            f"on UCI), the noise sensitivity section {sigmas} on UCI.",
            (True, False): f"The prior sensitivity section checks one other prior on {on}; "
            "neither choice is checked on UCI.",
            (False, True): f"The noise sensitivity section checks {sigmas} on UCI; the prior "
            "is not checked.",
            (False, False): "Neither is justified for these MLPs by a sensitivity run.",
        }[(bool(prior), bool(noise))],
        *toy_2d,
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


def _covered(refs: list[dict[str, Any]]) -> str:
    splits: dict[str, set[int]] = {}
    for r in refs:
        splits.setdefault(r["dataset"], set()).add(r["split"])
    return "; ".join(f"{d} split {', '.join(map(str, sorted(v)))}" for d, v in splits.items())


def report(
    opts: Any, jobs: list[Any], summary: str, wall: float, page: Path, ran: bool = True
) -> str:
    """Write the page (and the toy figure in a folder named after it) from the store's rows of
    ``jobs`` (``ran``: whether this call ran any job)."""
    from bayesify.bench.machine import machine_description, machine_label

    rows = stored_rows(opts.store, EXPERIMENT, jobs)
    # the checks' references have their own sections, not the page's reference's place
    checks = [r for r in rows if check_kind(r["method"], r["config"])]
    refs = [r for r in rows if r["method"] == "hmc" and not check_kind(r["method"], r["config"])]
    main = [r for r in refs if r["seed"] == 0]
    scored = [r for r in rows if r["method"] != "hmc"]
    methods = list(dict.fromkeys(j.method for j in jobs if j.method != "hmc"))
    datasets = list(dict.fromkeys(j.dataset for j in jobs))
    seconds = sum(r["seconds"] or 0.0 for r in rows)
    lines = [
        "# How close is each method to the posterior? (HMC reference)",
        "",
        f"`{command_line(opts)}`",
        "",
        f"{'' if ran else machine_label(ran) + ': '}{machine_description()}; this call: "
        f"{summary} ({wall:.0f} s wall); job time of "
        f"these rows in the store: {seconds:.0f} s.",
        "",
        f"Problems and splits on this page: {_covered(refs)} (reference: seed 0; floor: seed 1).",
        "",
        "## Distances on f(x), beside the HMC-against-HMC floor",
        "",
        "f(x) is the network's output before the noise: for regression each draw's mean, for "
        "classification each draw's class probabilities. W2 f(x): the 1-D 2-Wasserstein "
        "distance between the method's draws of f(x) and the reference's at each test input "
        "(the L2 distance of their quantile functions; standardised target units for UCI; "
        "classification: averaged over classes), averaged over inputs. std ratio f(x): the "
        "method's std of f(x) over draws / the reference's (the epistemic std ratio), averaged "
        "over inputs in the data or in the gap between clusters. draws: the method's draws of "
        "f(x) per input. Floor: the same score of a second HMC run (another chain seed, the "
        "same posterior and σ) against the reference, its draws subsampled at random to the "
        "method's count so that both carry the same Monte Carlo error. A method's cells: mean ± "
        "standard error; on one split over its method seeds (each its own initialisation, "
        "batches and draws, all against the split's one reference), on several over the "
        "split means (each the mean over that split's seeds); runs: splits × seeds. The "
        "floor: its mean over the runs (a split's seeds share it). Within floor: the runs "
        "where the method's W2 f(x) is at or below the floor's.",
        "",
    ]
    for d in datasets:
        mine = [r for r in scored if r["dataset"] == d]
        gap = any(r["metrics"].get("std_ratio_f_gap") is not None for r in mine)
        lines += fx_table(d, mine, methods, gap)
    lines += [
        "## HMC diagnostics per run",
        "",
        "R-hat and ESS of f(x) (regression: the network's output; classification: each class "
        "probability) per test input. R-hat: split R-hat over the chains; rank R-hat and bulk "
        "ESS: rank-normalised (Vehtari et al. 2021); ESS: NumPyro's `effective_sample_size`. A "
        "run is a reference only when its largest split R-hat is at most 1.05, a looser bar "
        f"than the usual R-hat ≤ {STRICT_RHAT} and bulk ESS ≥ {STRICT_ESS}: the last column "
        "marks the runs that fail that one. Seed 1 is the floor's second run.",
        "",
        *_diagnostics(refs),
        "",
        "## The whole predictive against the reference (secondary)",
        "",
        "W2: 2-Wasserstein distance between the method's and HMC's predictive distribution per "
        "test input (noise included; by 1000 draws of each), averaged over inputs. TV: total "
        "variation of the mean class probabilities; agreement: fraction of inputs with HMC's "
        "most probable class (within floor: at or above the floor's). std ratio: predictive std of "
        "the method / HMC's, noise included. Test LL on inputs in the data (UCI: original "
        "units). LL in uci.md: the same method's homoscedastic test LL on the same Gal splits "
        "in `benchmarks/uci.md` (`bench uci --protocol gal`: its own grids and epochs, "
        "trained on the same 80% of the training split), for comparison. These scores cannot "
        "tell a matching weight posterior from a collapsed one with a wider fitted noise: the "
        "f(x) tables above can.",
        "",
    ]
    for d in datasets:
        mine = [r for r in main if r["dataset"] == d]
        gal = gal_rows(page.parent / "uci" / "rows.csv", d, {r["split"] for r in mine})
        lines += predictive_table(d, mine, [r for r in scored if r["dataset"] == d], methods,
                                  gal)  # fmt: skip
    toy = [r for r in main if r["dataset"] == "toy-1d"]
    if toy:
        figure = page.with_suffix("") / "toy_1d.png"
        mine = [
            r
            for r in scored
            if r["dataset"] == "toy-1d"
            and r["split"] == toy[0]["split"]
            and not r["config"].get("method_seed")
        ]  # one band per method: seed 0's
        _figure(toy[0], mine, figure)
        link = f"{figure.parent.name}/{figure.name}"
        alt = "HMC's predictive band and each method's (method seed 0) on the 1-D toy"
        lines += [f"![{alt}]({link})", ""]
    check_jobs = [j for j in jobs if job_check_kind(j)]
    lines += prior_section(EXPERIMENT, check_jobs, checks, refs)
    lines += noise_section(EXPERIMENT, check_jobs, checks, refs)
    prior = [r["dataset"] for r in checks if check_kind(r["method"], r["config"]) == PRIOR]
    factors = {r["config"].get("noise_scale") for r in checks
               if check_kind(r["method"], r["config"]) == NOISE}  # fmt: skip
    lines += _limitations(refs, scored, prior=prior, noise=len(factors))
    return write_report(page, "\n".join([*lines, *PUBLISHED]))
