"""One UCI dataset of ``bayesify bench distill`` (split 0, MC dropout and an ensemble of 5 MLPs,
40 epochs) with the default transfer set (``outliers``: on a table, the one noise copy) and
with one noise copy, in one run (the two should print the same rows):

    python benchmarks/distill_uci.py bostonHousing
"""

from __future__ import annotations

import sys
import time

import torch

from bayesify.bench.distill.command import DistillOptions, _uci_rows

if __name__ == "__main__":
    torch.set_num_threads(1)
    t0 = time.time()
    for augment, copies in (("outliers", 2), ("noise", 1)):
        torch.manual_seed(0)
        opts = DistillOptions(uci_epochs=40, augment=augment, copies=copies)
        rows, notes = _uci_rows(sys.argv[1], opts)
        print(f"## augment {augment}, copies {copies}", *rows, *notes, sep="\n", flush=True)
    print(f"took {time.time() - t0:.0f} s")
