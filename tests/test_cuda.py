"""Every method on CUDA (skipped where no GPU is present): the device follows the model.

A method fitted on CPU and moved to the GPU gives the same samples for the same seed (the
per-group draws come from the same CPU generator), and a generator living on the GPU works.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_chunking import D, _fitted

from bayesify.methods import METHODS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_runs_on_cuda_with_the_same_samples_as_on_cpu(name: str) -> None:
    method = _fitted(name)
    x = torch.randn(7, D)
    cpu = method.sample(x, 12, seed=4)
    gpu_method = copy.deepcopy(method)
    gpu_method.net.to("cuda")
    gpu = gpu_method.sample(x.cuda(), 12, seed=4)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-4, atol=1e-4)
    g = torch.Generator(device="cuda").manual_seed(1)
    pred = gpu_method.predict(x.cuda(), 12, generator=g)
    assert pred.samples.shape[:2] == (method.sample_count(12), 7)  # a mixture's T rounds
    assert torch.isfinite(pred.samples).all()
