"""MCBN's bank rows are drawn once per call and shared by every row of it (benchmarks/deferral.md):
below the bank size a call's scores move together with its seed; at the bank size they do not."""

from __future__ import annotations

import torch

import bayesify
from bayesify.models import lenet


def fitted(bank_size: int = 8) -> tuple[bayesify.MCBN, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (128,), generator=g)
    method = bayesify.MCBN(lenet(norm="batch"), task="classification", bank_size=bank_size)
    method.fit((x[:96], y[:96]), epochs=1, batch_size=16, progress=False)
    return method, x[96:]


def mutual_information(method: bayesify.MCBN, x: torch.Tensor, samples: int, seed: int):
    return method.to_predictive(method.sample(x, samples, seed=seed)).mutual_information


def test_every_row_of_a_call_uses_the_same_bank_rows():
    method, x = fitted()
    rows = method.draw_rows(4, torch.Generator().manual_seed(3))
    whole = method.sample(x, 4, seed=3)
    for i in (0, 17, 31):  # one row alone, same seed: the same 4 bank rows, the same samples
        assert torch.allclose(method.sample(x[i : i + 1], 4, seed=3)[:, 0], whole[:, i], atol=1e-5)
    assert len(set(rows.tolist())) == 4


def test_at_the_bank_size_a_rows_score_does_not_depend_on_the_seed():
    method, x = fitted(bank_size=8)
    half = [mutual_information(method, x, 4, seed) for seed in (0, 1, 2)]
    assert any(not torch.allclose(half[0], h, rtol=1e-3) for h in half[1:])  # draws differ
    full = [mutual_information(method, x, method.bank_size, seed) for seed in (0, 1, 2)]
    for f in full[1:]:
        assert torch.allclose(full[0], f, rtol=1e-4, atol=1e-7)
