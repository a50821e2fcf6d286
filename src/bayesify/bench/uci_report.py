"""MCBN vs CUBN over UCI datasets and Teye et al.'s splits -> markdown table, uncertainty–error
figures and a results store.

``bayesify bench uci`` (and the demo) run :func:`run_uci_benchmark`.
"""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import torch
from tqdm.auto import tqdm

from bayesify.bench.machine import machine_description
from bayesify.bench.options import check_choices, option
from bayesify.bench.store import ResultsStore
from bayesify.bench.summary import markdown_table, summarise
from bayesify.bench.uci import UCISettings, run_mcbn_split
from bayesify.data.uci import TEYE_N_SPLITS, UCI_DATASETS
from bayesify.plots.uncertainty import uncertainty_error_plot

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


DEMO_DATASETS = ("bostonHousing", "concrete", "energy")  # small: `bayesify demo` and bench uci


@dataclass(frozen=True)
class UCIOptions:
    """Options of ``bayesify bench uci``."""

    command: ClassVar[str] = "uci"
    datasets: tuple[str, ...] = option(DEMO_DATASETS, "UCI datasets (folder names under uci/).")
    splits: int = option(5, "Teye et al. 80/20 splits per dataset (at most 5).")
    epochs: int = option(300, "Maximum epochs (early stopping on validation).")
    samples: int = option(200, "MC samples T per prediction.")
    batch_sizes: tuple[int, ...] = option((32, 128), "Batch sizes to choose from on validation.")
    out: str = option("benchmarks/uci_mcbn", "Folder for uci_mcbn.md, figures and results.db.")
    threads: int = option(2, "torch CPU threads.")

    def __post_init__(self) -> None:
        check_choices("datasets", self.datasets, UCI_DATASETS)
        if not self.batch_sizes or min(self.batch_sizes) < 2:
            raise ValueError(f"batch sizes must be >= 2, got {self.batch_sizes}")
        for name in ("splits", "epochs", "samples", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.splits > TEYE_N_SPLITS:
            raise ValueError(
                f"Teye et al.'s protocol has {TEYE_N_SPLITS} splits, got {self.splits}"
            )


def run(opts: UCIOptions) -> str:
    """Train and score every (dataset, split) of ``opts``; returns the markdown page."""
    torch.set_num_threads(opts.threads)
    settings = UCISettings(epochs=opts.epochs, samples=opts.samples, batch_sizes=opts.batch_sizes)
    text, _ = run_uci_benchmark(opts.datasets, opts.splits, settings, Path(opts.out))
    return text


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
    replaces its row). Returns the markdown text and the result rows.
    """
    out.mkdir(parents=True, exist_ok=True)
    store = ResultsStore(out / "results.db")
    jobs = [(d, s) for d in datasets for s in range(splits)]
    rows: list[dict] = []  # this run's cells only: the store also holds earlier runs'
    for name, split in tqdm(jobs, desc="UCI splits", disable=not progress):
        run = run_mcbn_split(name, split, settings, seed=seed)
        for method, scores in run.scores.items():
            store.add(EXPERIMENT, name, split, method, scores, asdict(settings))
            rows.append({"dataset": name, "split": split, "method": method, **scores})
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
    text = render_markdown(rows, datasets, splits, settings)
    (out / "uci_mcbn.md").write_text(text)
    return text, rows


def render_markdown(
    rows: list[dict], datasets: Sequence[str], splits: int, settings: UCISettings
) -> str:
    """The benchmark page: command, machine, table, comparison with Teye et al.'s Table 1."""
    summary = summarise(rows, METRICS)
    lines = [
        "# MCBN vs constant uncertainty (CUBN) on UCI regression",
        "",
        f"Command: `{shlex.join(['bayesify', *sys.argv[1:]])}`  ",
        f"Machine: {machine()}  ",
        f"Settings: {asdict(settings)}",
        "",
        "Mean ± standard error over splits; RMSE, PLL and CRPS in original target units. "
        "Normalised scores ×100: 0 = CUBN (constant variance fitted on validation), "
        "100 = per-point optimal variance (Teye et al. 2018 §4.2). τ and the constant variance "
        "are fitted on the validation part separately for PLL and for CRPS.",
        "",
        markdown_table(rows, METRICS, HEADERS),
        "",
        "| dataset | norm. CRPS (ours) | norm. CRPS (Teye Table 1) | norm. PLL (ours) | "
        "norm. PLL (Teye Table 1) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for d in datasets:
        ours = summary.get((d, "MCBN"), {})
        ref = TEYE_TABLE_1.get(d, (float("nan"), float("nan")))
        c, p = ours.get("crps_norm", (float("nan"),)), ours.get("pll_norm", (float("nan"),))
        lines.append(f"| {d} | {c[0]:.2f} | {ref[0]:.2f} | {p[0]:.2f} | {ref[1]:.2f} |")
    lines.append("")
    return "\n".join(lines)
