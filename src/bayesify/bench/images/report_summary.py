"""The summary section of the images page: per method its default and best OOD score on each
OOD set, its predict time per 1,000 rows beside the deterministic network's from the same job,
the single-pass target of issue 40 and the Laplace MI-against-entropy check, each stated with
its seeds (mean ± standard error over seeds, as every table of the page)."""

from __future__ import annotations

import math
from typing import Any

from bayesify.bench.images.scores import default_score
from bayesify.bench.summary import mean_se
from bayesify.predictive.ood import OOD_SCORES

#: the OOD sets: the store key of their metrics and their name on the page
OOD_SETS = {"ood": "MNIST", "ood_digits": "digits"}
#: the methods that predict in one pass of the body per row (the members of BatchEnsemble and
#: Packed-Ensembles in one batched pass); every other non-deterministic method samples
SINGLE_PASS = ("ddu", "sngp", "vbll", "evidential-classification", "batch-ensemble",
               "packed-ensemble")  # fmt: skip
AUROC_GAP, TIME_RATIO = 0.01, 1.3
#: names of scores in rows stored before the scores had their OOD names
_STORED_AS = {"mi": "mutual_information"}


def cell(values: list[Any], digits: int = 4) -> str:
    """Mean ± standard error (n − 1 in the standard deviation) of the finite values; the one
    value for one; – for none."""
    m, se = mean_se(values, drop="non-finite")
    if math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if math.isnan(se) else f"{m:.{digits}f} ± {se:.{digits}f}"


def pm(mean_and_se: tuple[float, float], digits: int = 4) -> str:
    """``mean ± se``, or ``mean (one seed)`` where there is no standard error."""
    m, se = mean_and_se
    if math.isnan(se):
        return f"{m:.{digits}f} (one seed)"
    return f"{m:.{digits}f} ± {se:.{digits}f}"


def by_score(ms: list[dict[str, Any]], key: str = "ood") -> dict[str, list[dict[str, float]]]:
    """A method's rows (one per seed) -> score name -> per-seed metrics on the OOD set ``key``,
    for the scores every seed has."""
    per = [{_STORED_AS.get(k, k): v for k, v in m.get(key, {}).items()} for m in ms]
    return {n: [p[n] for p in per] for n in OOD_SCORES if per and all(n in p for p in per)}


def pick(method: str, scores: dict[str, list]) -> tuple[str, str]:
    """(default score, best score by mean AUROC) of a method."""
    default = default_score(method, tuple(scores))
    if default not in scores:
        default = "entropy"
    best = max(scores, key=lambda n: mean_se([p["auroc"] for p in scores[n]], drop="non-finite")[0])
    return default, best


def summary_section(model: str, methods: dict[str, list], labels: dict[str, str]) -> list[str]:
    """The summary table of one model and the sentences under it."""
    sets = [k for k in OOD_SETS if any(by_score(ms, k) for ms in methods.values())]
    head = " | ".join(f"{OOD_SETS[k]} default | {OOD_SETS[k]} best" for k in sets)
    lines = [f"**{model}**", "",
             f"| method | seeds | one pass | error | {head} | ms / 1,000 rows | deterministic "
             "ms / 1,000 (same jobs) | ratio |",
             "| --- | ---: | --- | ---: |" + " ---: | ---: |" * len(sets)
             + " ---: | ---: | ---: |"]  # fmt: skip
    auc: dict[str, dict[str, tuple[str, list[float], str, list[float]]]] = {}
    for method, ms in methods.items():
        cells = []
        for k in sets:
            scores = by_score(ms, k)
            if not scores:
                cells += ["–", "–"]
                continue
            d, b = pick(method, scores)
            da, ba = ([p["auroc"] for p in scores[n]] for n in (d, b))
            auc.setdefault(method, {})[k] = (d, da, b, ba)
            cells += [f"{cell(da)} ({labels[d]})", f"{cell(ba)} ({labels[b]})"]
        timed = [m.get("timed_ms_per_1000") for m in ms]
        det = [m.get("det_ms_per_1000") for m in ms]
        ratio = [m.get("time_ratio") for m in ms]
        one = "yes" if method in SINGLE_PASS else ("baseline" if method == "deterministic"
                                                   else "no")  # fmt: skip
        lines.append(f"| {method} | {len(ms)} | {one} | {cell([m['error'] for m in ms])} | "
                     f"{' | '.join(cells)} | {cell(timed, 1)} | {cell(det, 1)} | "
                     f"{cell(ratio, 2)} |")  # fmt: skip
    lines += ["", *_target(auc, methods, sets), *_laplace(methods), ""]
    return lines


def _target(auc: dict[str, dict], methods: dict[str, list], sets: list[str]) -> list[str]:
    """Issue 40's single-pass target per OOD set, by each method's default score: the best
    single-pass method against the best sampling method, with the time ratio."""
    out = []
    for k in sets:
        sampling = {m: mean_se(a[k][1], drop="non-finite") for m, a in auc.items() if k in a
                    and m not in SINGLE_PASS and m != "deterministic"}  # fmt: skip
        single = {
            m: mean_se(a[k][1], drop="non-finite")
            for m, a in auc.items()
            if k in a and m in SINGLE_PASS
        }
        if not sampling or not single:
            out.append(f"- {OOD_SETS[k]}: single-pass target not assessable (no "
                       f"{'sampling' if not sampling else 'single-pass'} rows).")  # fmt: skip
            continue
        top = max(sampling, key=lambda m: sampling[m][0])
        passing, closest = [], []
        for m, (mu, se) in sorted(single.items(), key=lambda t: -t[1][0]):
            r = mean_se([row.get("time_ratio") for row in methods[m]], drop="non-finite")
            gap = mu - sampling[top][0]
            ok = gap >= -AUROC_GAP and r[0] <= TIME_RATIO
            text = f"{m} {pm((mu, se))} (gap {gap:+.4f}, time ratio {pm(r, 2)})"
            (passing if ok else closest).append(text)
        verdict = "**met** by " + "; ".join(passing) if passing else "**not met**"
        out.append(f"- {OOD_SETS[k]}, default scores: best sampling method {top} "
                   f"{pm(sampling[top])}; single-pass target "
                   f"(within {AUROC_GAP} AUROC at ≤ {TIME_RATIO}× the deterministic time, on the "
                   f"means) {verdict}" + (f"; the others: {'; '.join(closest)}" if closest
                                          else "") + ".")  # fmt: skip
    return out


def _laplace(methods: dict[str, list]) -> list[str]:
    """Issue 35's check: the default Laplace's MI AUROC within 0.05 of its entropy AUROC."""
    if "laplace" not in methods:
        return []
    out = []
    for k, name in OOD_SETS.items():
        s = by_score(methods["laplace"], k)
        if "mutual_information" not in s or "entropy" not in s:
            continue
        mi = [p["auroc"] for p in s["mutual_information"]]
        ent = [p["auroc"] for p in s["entropy"]]
        diff = mean_se([a - b for a, b in zip(mi, ent, strict=True)], drop="non-finite")
        side = "above" if diff[0] > 0 else "below" if diff[0] < 0 else "equal to"
        ok = (
            "within 0.05 on the mean"
            if abs(diff[0]) <= 0.05
            else "more than 0.05 above it on the mean: MI is the better OOD score here, not a "
            "degenerate one"
            if diff[0] > 0
            else "**more than 0.05 below** it on the mean"
        )
        out.append(f"- Laplace (default: GLM, drawn logits) on {name}: MI AUROC {cell(mi)}, "
                   f"entropy AUROC {cell(ent)}; MI − entropy, paired over {len(mi)} seed(s): "
                   f"{pm(diff)} (MI {side} entropy), {ok}.")  # fmt: skip
    return out
