"""`bench continual`'s paper preset: the authors' recipe (github.com/nvcuong/variational-continual-
learning, ddm/run_split.py, ddm/run_permuted.py, ddm/alg/cla_models_multihead.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bayesify.bench.experiments.continual import ContinualOptions, _network


def test_paper_preset_is_the_authors_recipe():
    jobs = {(j.method, j.dataset): j for j in ContinualOptions(preset="paper").jobs()}
    split, perm = jobs["vcl-random", "split-mnist"], jobs["vcl-random", "permuted-mnist"]
    assert (split.epochs, split.batch_size, split.coreset_size) == (120, 0, 40)  # 0: full batch
    assert (perm.epochs, perm.batch_size, perm.coreset_size) == (100, 256, 200)
    for job in (split, perm):
        assert job.init == "truncated-normal" and job.lr == 1e-3 and job.samples == 100
        sigma = float(F.softplus(torch.tensor(job.init_rho, dtype=torch.float64)))
        assert math.isclose(sigma, math.exp(-3.0), rel_tol=1e-9)  # log-variance -6


def test_truncated_normal_initialisation():
    torch.manual_seed(0)
    net = _network("split-mnist", "truncated-normal")
    w = net.body[1].weight.detach()  # 256 x 784
    assert w.abs().max() <= 0.2 and abs(float(w.std()) - 0.088) < 0.003  # N(0, 0.1²) cut at 2σ
    assert net.heads[3].bias.detach().abs().max() <= 0.2
    assert net.heads[3].bias.detach().abs().max() > 0.01  # biases drawn too, not zero
    plain = _network("split-mnist")
    assert float(plain.body[1].weight.detach().std()) < 0.03  # torch's default: 1/sqrt(784) scale
