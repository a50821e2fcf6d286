"""Dynamic int8 quantisation of a method's linear layers (MC dropout, MCBN, deep ensembles).

Weights of every ``nn.Linear`` are stored as int8 and activations quantised on the fly per batch
(``torch.ao.quantization.quantize_dynamic``); convolutions, batch norm and the methods' own
stochastic layers stay in float32, so the sampling is unchanged. The change in latency, error,
NLL and ECE is measured by ``bayesify bench serve`` (``benchmarks/serve.md``), not assumed.

``torch.ao.quantization`` is deprecated in favour of torchao; on this CPU build torchao's int8
dynamic linear was measured slower than float32 (48 vs 29 ms for a 784-512-10 MLP on 256 rows)
while ``quantize_dynamic`` ran in 10 ms, so the deprecated API is used, its warning silenced here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from bayesify.methods.core.base import Method

#: methods whose randomness lives outside the linear layers' weights
INT8_METHODS = ("mc-dropout", "mcbn", "ensemble")


def quantize_int8(method: Method) -> Method:
    """Quantise ``method.net``'s ``nn.Linear`` layers to int8 in place (CPU); returns ``method``."""
    if method.name not in INT8_METHODS:
        raise ValueError(f"--int8 supports {', '.join(INT8_METHODS)}, not {method.name!r} (its "
                         "weights are random or it has no linear layers to quantise)")  # fmt: skip
    if method.device.type != "cpu":
        raise ValueError("int8 dynamic quantisation runs on CPU; load the bundle on CPU")
    if not any(isinstance(m, nn.Linear) for m in method.net.modules()):
        raise ValueError("the network has no nn.Linear layers to quantise")
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=".*deprecated.*")
        quantize_dynamic(method.net, {nn.Linear}, dtype=torch.qint8, inplace=True)
    for member in getattr(method, "member_methods", []):  # ensembles: members share the modules
        member.net.eval()
    method.net.eval()
    return method
