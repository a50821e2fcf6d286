"""BatchEnsemble on images.md's Fashion-MNIST jobs with its fast weights drawn ±1
(``init="sign"``) at the full learning rate (``fast_lr=1``), against the N(1, 0.5²) fast
weights at the full rate that were images.md's rows until the default became the authors' half
rate: the same ``bench images`` jobs (LeNet, full size, M = 3, T = 30), with
``bayesify.BatchEnsemble`` replaced in this process by one built with those two options, so the
job function builds it as images.md's rows were built otherwise.

    git show 4d79a1a:benchmarks/images/rows.jsonl.gz > /tmp/rows_full_rate.jsonl.gz
    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/batch_ensemble_init_images.py \\
        --store runs/be_sign.db --base /tmp/rows_full_rate.jsonl.gz \\
        --out benchmarks/batch_ensemble_init_images.md \\
        --preamble benchmarks/batch_ensemble_init_images/notes.md

The store must not hold images.md's BatchEnsemble rows (they share the job keys): only the
deterministic rows of ``--base`` are imported, for the page's baseline columns; its
BatchEnsemble rows are the comparison's first row. The jobs run one by one in this process
(``--workers 1``: the replacement does not reach worker processes).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import tempfile
from pathlib import Path

import bayesify
from bayesify.bench.images.command import ImagesOptions, run
from bayesify.bench.store import ResultsStore
from bayesify.bench.summary import mean_se


def deterministic_rows(base: str, into: Path) -> None:
    """The deterministic network's rows of the export ``base``, written to ``into`` (.gz)."""
    with gzip.open(base, "rt") as src, gzip.open(into, "wt") as dst:
        for line in src:
            if json.loads(line).get("method") == "deterministic":
                dst.write(line)


def export_rows(path: str) -> list[dict]:
    """The BatchEnsemble rows' metrics of an images export ``path`` (.jsonl.gz)."""
    with gzip.open(path, "rt") as f:
        return [r["metrics"] for r in map(json.loads, f) if r["method"] == "batch-ensemble"]


def comparison(base: str, store: str, current: str) -> list[str]:
    """Markdown rows, BatchEnsemble's rows of ``base`` (N(1, 0.5²) at the full rate),
    ``init="sign"`` at the full rate (``store``) and the default at half the rate (``current``,
    images.md's export): mean ± standard error over seeds of error, NLL, ECE, MI AUROC on both
    OOD sets, the test set's mean MI over its mean entropy, and the predict-time ratio."""
    with ResultsStore(store) as db:
        sign = [r["metrics"] for r in db.records("images") if r["method"] == "batch-ensemble"]
    out = ["| BatchEnsemble fast weights | seeds | error | NLL | ECE | MNIST AUROC (MI) | "
           "digits AUROC (MI) | test MI / entropy | predict time ratio |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    arms = (("N(1, 0.5²), fast_lr=1", export_rows(base)),
            ("±1 (init='sign'), fast_lr=1", sign),
            ("N(1, 0.5²), fast_lr=0.5 (default, images.md)", export_rows(current)))  # fmt: skip
    for name, rows in arms:
        cols = [
            [r["error"] for r in rows],
            [r["nll"] for r in rows],
            [r["ece"] for r in rows],
            [r["ood"]["mutual_information"]["auroc"] for r in rows],
            [r["ood_digits"]["mutual_information"]["auroc"] for r in rows],
            [r["uncertainty"]["test"]["epistemic"] / r["uncertainty"]["test"]["entropy"]
             for r in rows],
            [r["time_ratio"] for r in rows],
        ]  # fmt: skip
        cells = " | ".join("{:.4f} ± {:.4f}".format(*mean_se(c)) for c in cols)
        out.append(f"| {name} | {len(rows)} | {cells} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--base", required=True, help="images.md's export at commit 4d79a1a")
    parser.add_argument("--current", default="benchmarks/images/rows.jsonl.gz")
    parser.add_argument("--out", default="benchmarks/batch_ensemble_init_images.md")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--preamble", default="", help="markdown put under the page's title")
    args = parser.parse_args()
    sign = functools.partial(bayesify.BatchEnsemble, init="sign", fast_lr=1.0)
    bayesify.BatchEnsemble = sign  # type: ignore[misc]
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "deterministic.jsonl.gz"
        deterministic_rows(args.base, export)
        opts = ImagesOptions(store=args.store, out=args.out, checkpoints="",
                             methods=("batch-ensemble",), seeds=args.seeds, epochs=30,
                             patience=3, samples=30, workers=1, export=str(export),
                             preamble=args.preamble)  # fmt: skip
        run(opts)
    print("\n".join(comparison(args.base, args.store, args.current)))


if __name__ == "__main__":
    main()
