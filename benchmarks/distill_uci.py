"""One UCI dataset of ``bayesify bench distill`` (split 0, MC dropout and an ensemble of 5 MLPs,
40 epochs) with the noise transfer copy and with the mixup copy, in one run:

    python benchmarks/distill_uci.py bostonHousing
"""

from __future__ import annotations

import sys
import time

import torch

from bayesify.bench.experiments.distill import DistillOptions, _uci_rows

if __name__ == "__main__":
    torch.set_num_threads(1)
    t0 = time.time()
    for augment in ("noise", "mixup"):
        torch.manual_seed(0)
        rows, notes = _uci_rows(sys.argv[1], DistillOptions(uci_epochs=40, augment=augment))
        print(f"## augment {augment}", *rows, *notes, sep="\n", flush=True)
    print(f"took {time.time() - t0:.0f} s")
