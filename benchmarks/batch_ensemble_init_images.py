"""BatchEnsemble on images.md's Fashion-MNIST jobs with its fast weights drawn ±1
(``init="sign"``) instead of its default N(1, 0.5²): the same ``bench images`` jobs (LeNet,
full size, M = 3, T = 30), with ``bayesify.BatchEnsemble`` replaced in this process by one whose
``init`` is ``"sign"``, so the job function builds it as images.md's rows were built otherwise.

    PYTHONPATH=src OMP_NUM_THREADS=1 python benchmarks/batch_ensemble_init_images.py \\
        --store runs/be_sign.db --base benchmarks/images/rows.jsonl.gz \\
        --out benchmarks/batch_ensemble_init_images.md \\
        --preamble benchmarks/batch_ensemble_init_images/notes.md

The store must not hold images.md's BatchEnsemble rows (they share the job keys): only the
deterministic rows of ``--base`` are imported, for the page's baseline columns. The jobs run
one by one in this process (``--workers 1``: the replacement does not reach worker processes).
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


def comparison(base: str, store: str) -> list[str]:
    """Markdown rows, BatchEnsemble's default (the rows of ``base``) against ``init="sign"``
    (``store``): mean ± standard error over seeds of error, NLL, ECE, MI AUROC on both OOD
    sets, the test set's mean MI over its mean entropy, and the predict-time ratio."""
    with gzip.open(base, "rt") as f:
        default = [r["metrics"] for r in map(json.loads, f) if r["method"] == "batch-ensemble"]
    with ResultsStore(store) as db:
        sign = [r["metrics"] for r in db.records("images") if r["method"] == "batch-ensemble"]
    out = ["| BatchEnsemble fast weights | seeds | error | NLL | ECE | MNIST AUROC (MI) | "
           "digits AUROC (MI) | test MI / entropy | predict time ratio |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for name, rows in (("N(1, 0.5²) (default, images.md)", default), ("±1 (init='sign')", sign)):
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
    parser.add_argument("--base", default="benchmarks/images/rows.jsonl.gz")
    parser.add_argument("--out", default="benchmarks/batch_ensemble_init_images.md")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--preamble", default="", help="markdown put under the page's title")
    args = parser.parse_args()
    bayesify.BatchEnsemble = functools.partial(bayesify.BatchEnsemble, init="sign")  # type: ignore[misc]
    with tempfile.TemporaryDirectory() as tmp:
        export = Path(tmp) / "deterministic.jsonl.gz"
        deterministic_rows(args.base, export)
        opts = ImagesOptions(store=args.store, out=args.out, checkpoints="",
                             methods=("batch-ensemble",), seeds=args.seeds, epochs=30,
                             patience=3, samples=30, workers=1, export=str(export),
                             preamble=args.preamble)  # fmt: skip
        run(opts)
    print("\n".join(comparison(args.base, args.store)))


if __name__ == "__main__":
    main()
