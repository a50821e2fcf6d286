"""The UCI page's comparison with Gal's 2018 rerun of MC dropout (:mod:`gal_2018`): its column
beside ours (mean ± standard error over the splits our row covers), the per-split paired table
of our MC dropout and of our best other method against it, the counts and the summary sentence
built from them, and the protocol differences read from our rows' configurations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bayesify.bench.uci.gal import DIFFERENCES_FROM_GAL_2018, GAL_2018_SETTINGS, PRESETS
from bayesify.bench.uci.gal2018_results import Gal2018, Paired, paired_difference
from bayesify.bench.uci.rows import Cell, mean_se, pm
from bayesify.data.uci import UCI_DATASETS

MCDO = "mc-dropout"
LIKS = ("homoscedastic", "heteroscedastic")
BEST_OTHER = "best other"
SE_TEXT = ("the standard error is that of the mean per-split difference, ours − Gal 2018's on "
           "the same split (sample standard deviation of the differences / √n; n = the splits "
           "both have), and z = mean / standard error, the paired t statistic")  # fmt: skip


def per_split(rows: Iterable[dict[str, Any]], key: str) -> dict[int, float]:
    """split -> the metric ``key`` (the mean over a split's rows when it has several seeds)."""
    found: dict[int, list[float]] = {}
    for r in rows:
        if r.get(key) is not None:
            found.setdefault(int(r["split"]), []).append(float(r[key]))
    return {s: sum(v) / len(v) for s, v in found.items()}


def gal_2018_cell(gal: Gal2018 | None, key: str, splits: Iterable[int], digits: int = 2) -> str:
    """Gal 2018's ``key`` as ``mean ± standard error (n)`` over ``splits`` (sample std / √n,
    as our columns)."""
    if gal is None:
        return "–"
    values = getattr(gal, key)
    vals = [values[s] for s in sorted(set(splits)) if 0 <= s < len(values)]
    if not vals:
        return "–"
    return f"{pm(*mean_se(vals), digits)} ({len(vals)})"


@dataclass(frozen=True)
class Comparison:
    """One of our cells against Gal 2018 on one dataset, paired by split."""

    dataset: str
    label: str  # "mc-dropout homoscedastic", ... or BEST_OTHER
    method: str
    likelihood: str
    ll: Paired
    rmse: Paired


def _compare(dataset: str, label: str, cell: Cell, rows: list, gal: Gal2018) -> Comparison:
    return Comparison(dataset, label, cell[1], cell[2],
                      paired_difference(per_split(rows, "ll"), gal.ll),
                      paired_difference(per_split(rows, "rmse"), gal.rmse))  # fmt: skip


def comparisons(table: Mapping[Cell, list], gal2018: Mapping[str, Gal2018]) -> list[Comparison]:
    """Our MC dropout (each likelihood) and the other (method, likelihood) with the highest
    mean test LL, per dataset with Gal 2018 results, on Gal's protocol."""
    out = []
    for d in UCI_DATASETS:
        if d not in gal2018:
            continue
        for lik in LIKS:
            rows = table.get(("gal", MCDO, lik, d))
            if rows:
                out.append(_compare(d, f"{MCDO} {lik}", ("gal", MCDO, lik, d), rows, gal2018[d]))
        others = {c: rows for c, rows in table.items()
                  if c[0] == "gal" and c[3] == d and c[1] != MCDO and rows}  # fmt: skip
        if others:
            best = max(others, key=lambda c: mean_se([r.get("ll") for r in others[c]])[0])
            out.append(_compare(d, BEST_OTHER, best, others[best], gal2018[d]))
    return out


def paired_counts(comps: Sequence[Comparison]) -> dict[str, dict[str, Any]]:
    """Per label: the datasets within one standard error of Gal 2018 or better in LL (higher
    is better) and in RMSE (lower is better), the ones worse, and how many were compared."""
    out: dict[str, dict[str, Any]] = {}
    for c in comps:
        entry = out.setdefault(c.label, {"seen": 0, "ll_within": [], "ll_worse": [],
                                         "rmse_within": [], "rmse_worse": []})  # fmt: skip
        entry["seen"] += 1
        for key, higher in (("ll", True), ("rmse", False)):
            p: Paired = getattr(c, key)
            ok = p.within_one_se(higher)
            entry[f"{key}_within" if ok else f"{key}_worse"].append((c.dataset, p))
    return out


def _names(found: list[tuple[str, Paired]]) -> str:
    return ", ".join(d for d, _ in found) or "none"


def _z_range(worse: list[tuple[str, Paired]]) -> str:
    by_size = sorted(worse, key=lambda dp: abs(dp[1].z))
    (d0, p0), (d1, p1) = by_size[0], by_size[-1]
    if d0 == d1:
        return f"{d0}, z = {p0.z:.1f}"
    return f"z from {p0.z:.1f} on {d0} to {p1.z:.1f} on {d1}"


def _count(entry: dict[str, Any], key: str, what: str = "") -> str:
    """``**K of 9**<what> (datasets), worse on M (z range)`` for LL or RMSE."""
    within, worse = entry[f"{key}_within"], entry[f"{key}_worse"]
    text = f"**{len(within)} of 9**{what} ({_names(within)})"
    if worse:
        text += f", worse on {len(worse)} ({_z_range(worse)})"
    return text + ("" if entry["seen"] == 9 else f", {entry['seen']} compared")


def _grouped(values: Mapping[str, Any]) -> str:
    """``{dataset: value}`` as the most common value, the others named: ``v (w on d3, d4)``."""
    groups: dict[str, list[str]] = {}
    for d, v in values.items():
        groups.setdefault(str(v), []).append(d)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    head, rest = ordered[0][0], ordered[1:]
    if not rest:
        return head
    return head + " (" + "; ".join(f"{v} on {', '.join(ds)}" for v, ds in rest) + ")"


def _setting(rows: Sequence[dict[str, Any]], key: str) -> Any:
    found = {_shown(r.get("config", {}).get(key)) for r in rows}
    return ", ".join(sorted(found)) if found != {"None"} else "?"


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(f"{v:g}" for v in value) + "}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def protocol_differences(table: Mapping[Cell, list], gal2018: Mapping[str, Gal2018]) -> list[str]:
    """How our MC dropout rows' protocol differs from the 2018 rerun: the documented
    differences, then epochs, batch size, rate grid and test samples read from the rows."""
    rows = {d: table.get(("gal", MCDO, "homoscedastic", d), []) for d in gal2018}
    rows = {d: r for d, r in rows.items() if r}
    if not rows:
        return list(DIFFERENCES_FROM_GAL_2018)
    theirs = {d: f"{g.epochs:,}" for d, g in gal2018.items() if d in rows}
    ours = {d: _setting(r, "epochs") for d, r in rows.items()}
    settings = [f"epochs {_grouped(ours)}, the best validation epoch kept, against "
                f"{_grouped(theirs)}"]  # fmt: skip
    for key, name in (("batch_size", "batch size"), ("dropout_rates", "dropout-rate grid"),
                      ("samples", "test samples T")):  # fmt: skip
        mine = {d: _setting(r, key) for d, r in rows.items()}
        settings.append(f"{name} {_grouped(mine)} against {_shown(GAL_2018_SETTINGS[key])}")
    return [*DIFFERENCES_FROM_GAL_2018, *settings]


def preset_of(rows: Sequence[dict[str, Any]]) -> str:
    """The Gal preset (:data:`gal.PRESETS`) whose rate grid, batch size, learning rate and test
    samples every one of ``rows`` has ('' for none or no rows); epochs are left out, which a
    command may set for any preset."""
    keys = ("dropout_rates", "batch_size", "lr", "samples")
    found = {tuple(_shown(r.get("config", {}).get(k)) for k in keys) for r in rows}
    for name, p in PRESETS.items():
        if found == {tuple(_shown(getattr(p, k)) for k in keys)}:
            return name
    return ""


def summary_lines(table: Mapping[Cell, list], gal2018: Mapping[str, Gal2018]) -> list[str]:
    """The page's summary: the counts against Gal 2018 and why the protocols differ."""
    if not gal2018:
        missing = (
            "**Summary:** Gal's 2018 per-split results were not found (`<data>/uci/"
            "<name>/results/`), so our MC dropout is not compared with a reference here."
        )
        return [missing, ""]
    counts = paired_counts(comparisons(table, gal2018))
    mine = [(lik, counts[f"{MCDO} {lik}"]) for lik in LIKS if f"{MCDO} {lik}" in counts]
    best = counts.get(BEST_OTHER)
    per_lik = "; on ".join(_count(e, "ll", f" {lik}") for lik, e in mine) or "none (no rows)"
    preset = preset_of([r for lik in LIKS for d in gal2018
                        for r in table.get(("gal", MCDO, lik, d), [])])  # fmt: skip
    text = ("**Summary** (against Gal's own 2018 rerun of MC dropout on the same splits, paired "
            f"by split): in test LL, our MC dropout{f' ({preset} preset)' if preset else ''} is "
            f"within one standard error of Gal 2018 or better on {per_lik}.")  # fmt: skip
    if best:
        text += (
            " The best of our other methods per dataset (picked on the test LL, so "
            f"optimistic by selection): {_count(best, 'll')}."
        )
    rmse = [f"{len(e['rmse_within'])} of 9 {lik}" for lik, e in mine]
    if best:
        rmse.append(f"{len(best['rmse_within'])} of 9 for the best other method")
    if rmse:
        text += " In test RMSE, within one standard error or better: " + ", ".join(rmse) + "."
    diffs = protocol_differences(table, gal2018)
    text += (f" Here {SE_TEXT}. The protocol differs as follows: "
             + "; ".join(f"({i}) {d}" for i, d in enumerate(diffs, 1)) + ".")  # fmt: skip
    return [text, ""]


def _diff(p: Paired) -> list[str]:
    """Mean difference, SE and z; the difference to the SE's decimals (2 significant digits)."""
    if p.n == 0:
        return ["–", "–", "–"]
    if math.isnan(p.se) or p.se <= 0:
        return [f"{p.mean:+.3g}", "–", "–"]
    digits = max(0, 1 - math.floor(math.log10(p.se)))
    return [f"{p.mean:+.{digits}f}", f"{p.se:.{digits}f}", f"{p.z:.1f}"]


def paired_section(table: Mapping[Cell, list], gal2018: Mapping[str, Gal2018]) -> list[str]:
    """The paired table against Gal 2018 and its counts (LL and RMSE)."""
    comps = comparisons(table, gal2018)
    if not comps:
        return []
    lines = [
        "Paired by split against Gal 2018 (his homoscedastic MC dropout): the mean over splits "
        "of ours − Gal's on the same split, its standard error and z; " + SE_TEXT + ". Higher "
        "LL and lower RMSE are better. 'best other': the (method, likelihood) other than MC "
        "dropout with the highest mean test LL on that dataset (picked on the test figures).",
        "",
        "| dataset | ours | splits | LL diff | SE | z | within 1 SE or better | RMSE diff | SE "
        "| z | within 1 SE or better |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for c in comps:
        who = f"{c.method} {c.likelihood}" + (" (best other)" if c.label == BEST_OTHER else "")
        ok_ll = "yes" if c.ll.within_one_se(True) else "no"
        ok_rmse = "yes" if c.rmse.within_one_se(False) else "no"
        cols = [c.dataset, who, str(c.ll.n), *_diff(c.ll), ok_ll, *_diff(c.rmse), ok_rmse]
        lines.append("| " + " | ".join(cols) + " |")
    counts = paired_counts(comps)
    lines += ["", "Within one standard error of Gal 2018 or better, of the datasets compared:"]
    for label, entry in counts.items():
        lines.append(f"- {label}: LL {len(entry['ll_within'])} of {entry['seen']}, RMSE "
                     f"{len(entry['rmse_within'])} of {entry['seen']}")  # fmt: skip
    return [*lines, ""]
