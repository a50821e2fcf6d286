"""The page's table of predict times per 1,000 rows (:mod:`~bayesify.bench.uci.predict_time`):
per cell whose rows hold them, the method's and the deterministic network's, and their ratio."""

from __future__ import annotations

from collections.abc import Sequence

from bayesify.bench.uci.rows import Cell, mean_se, pm
from bayesify.data.uci import UCI_DATASETS


def predict_time_section(table: dict[Cell, list], protocol: str,
                         variants: Sequence[tuple[str, str]]) -> list[str]:  # fmt: skip
    """The page's table: per cell with timed rows, the method's and the deterministic
    network's ms per 1,000 rows and their per-job ratio, mean ± standard error over splits."""
    lines: list[str] = []
    for d in UCI_DATASETS:
        for m, lik in variants:
            keys = ("predict_ms_per_1000", "det_predict_ms_per_1000")
            rows = [r for r in table.get((protocol, m, lik, d), []) if all(r.get(k) for k in keys)]
            if not rows:
                continue
            ours = [r["predict_ms_per_1000"] for r in rows]
            det = [r["det_predict_ms_per_1000"] for r in rows]
            ratio = [a / b for a, b in zip(ours, det, strict=True)]
            samples = sorted({int(r.get("predict_samples") or 0) for r in rows})
            lines.append(f"| {d} | {m} | {lik} | {len(rows)} | "
                         f"{', '.join(str(s) for s in samples)} | {pm(*mean_se(ours), 2)} | "
                         f"{pm(*mean_se(det), 2)} | {pm(*mean_se(ratio), 1)} |")  # fmt: skip
    if not lines:
        return []
    return [
        "Predict time per 1,000 rows (the test rows repeated), milliseconds, beside the "
        "deterministic network of the same shape (Gal's MLP, one pass through the same "
        "`predict` call, one sample) timed in the same job, right after scoring: each the "
        "median of 5 interleaved calls after a warm-up; ratio: the method's over the "
        "deterministic network's, per job; mean ± standard error over splits; T: the samples "
        "the method drew. Only rows scored since these timings were stored have them (the "
        "runs that made them are named above); one torch thread.",
        "",
        "| dataset | method | likelihood | splits | T | predict ms / 1,000 rows | "
        "deterministic ms / 1,000 rows | ratio |",
        "| --- | --- | --- | ---: | --- | ---: | ---: | ---: |",
        *lines,
    ]
