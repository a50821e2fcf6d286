"""What each torchrun "node" of ``tests/test_torchrun.py`` runs, in one rendezvous:
``bayesify train`` for MCBN and for MC dropout on one table (``argv``: table, output folder,
then the options both commands share), then a fit whose training rows differ on rank 1, whose
refusal each rank writes to ``refusal-RANK.txt`` in the output folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from torch import nn

import bayesify
from bayesify.cli import app
from bayesify.train.distributed import DDP

table, out, shared = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
for method, extra in (("mcbn", []), ("mc-dropout", ["--norm", "none"])):
    args = ["train", "--method", method, "--data", table, "--target", "y",
            "--out", str(out / method), *shared, *extra]  # fmt: skip
    code = app(args, standalone_mode=False)
    if code:
        sys.exit(code)

rank = int(os.environ["RANK"])
x = torch.full((16, 2), 1.0 + rank)
method = bayesify.get_method("deterministic")(nn.Sequential(nn.Linear(2, 1)))
try:
    method.fit((x, x.sum(1)), epochs=1, batch_size=8, progress=False, strategy=DDP())
except ValueError as e:
    (out / f"refusal-{rank}.txt").write_text(str(e))
