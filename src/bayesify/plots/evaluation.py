"""The regression calibration figure of ``bayesify evaluate``: PIT histogram and coverage."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure
from torch import Tensor

from bayesify.plots._figure import new_figure, save_figure


def pit_coverage_figure(
    pit: Tensor,
    levels: Tensor,
    observed: dict[str, Tensor],
    *,
    path: str | Path | None = None,
    title: str = "",
    bins: int = 20,
    dpi: int = 80,
) -> Figure:
    """Two panels: the histogram of the PIT values ``[N]`` (the predictive CDF at each target;
    flat when calibrated, U-shaped when over-confident) and the observed coverage of each kind
    of interval in ``observed`` (``{name: [L]}``) against the nominal ``levels [L]``."""
    fig, (hist, cov) = new_figure(figsize=(7.0, 3.2), ncols=2)
    values = pit.double().cpu().numpy()
    hist.hist(values, bins=bins, range=(0.0, 1.0), density=True, color="tab:blue",
              edgecolor="k")  # fmt: skip
    hist.axhline(1.0, color="k", ls="--", lw=1)
    hist.set_xlabel("PIT: predictive CDF at the target")
    hist.set_ylabel("density")
    hist.set_title(f"{title} PIT (n={len(values)})".strip(), fontsize=9)
    lv = levels.double().cpu().numpy()
    cov.plot([0, 1], [0, 1], "k--", lw=1)
    for name, obs in observed.items():
        cov.plot(lv, obs.double().cpu().numpy(), label=name)
    cov.set_xlim(0, 1)
    cov.set_ylim(0, 1)
    cov.set_xlabel("nominal level")
    cov.set_ylabel("observed coverage")
    cov.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi)
