"""One UCI dataset of ``bayesify bench distill`` (split 0, seed 0, MC dropout and an ensemble of
5 MLPs, 40 epochs) with the default transfer set (``outliers``: on a table, the one noise copy)
and with one noise copy, in one run (the two should print the same figures):

    python benchmarks/distill_uci.py bostonHousing
"""

from __future__ import annotations

import sys
import time

import torch

from bayesify.bench.distill.uci import UCIDistillJob, score_uci_job

if __name__ == "__main__":
    torch.set_num_threads(1)
    t0 = time.time()
    for augment, copies in (("outliers", 2), ("noise", 1)):
        print(f"## augment {augment}, copies {copies}")
        for method, members in (("mc-dropout", 0), ("ensemble", 5)):
            job = UCIDistillJob(method=method, dataset=sys.argv[1], split=0, seed=0, epochs=40,
                                members=members, augment=augment, copies=copies)  # fmt: skip
            m = score_uci_job(job)
            for who in ("teacher", "student"):
                figures = ", ".join(f"{k} {v:.4f}" for k, v in m[who].items())
                print(f"{method} {who}: {figures}", flush=True)
    print(f"took {time.time() - t0:.0f} s")
