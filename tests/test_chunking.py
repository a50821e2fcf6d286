"""The memory bound of one-pass prediction: ``max_rows`` chunks over N (and over T), invisibly.

For every registered method: chunked samples equal one chunk for a large T·N (the per-group
randomness must not depend on where a chunk starts), and with the default ``max_rows`` no forward
call ever sees more than the default ``max_rows`` rows, however large T·N is. When T alone exceeds
``max_rows`` the sample groups are split into ranges too, with the same samples.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import bayesify
from bayesify.methods import METHODS, Method, resolve_max_rows
from bayesify.models import mlp

N_TRAIN, D = 96, 5


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N_TRAIN, D, generator=g)
    return x, x[:, 0].sin() + 0.1 * torch.randn(N_TRAIN, generator=g)


def _fitted(name: str) -> Method:
    """A briefly trained method on an MLP with batch norm and dropout (VCL refuses batch norm,
    which its prior cannot keep: its MLP has dropout alone)."""
    torch.manual_seed(0)
    net = mlp(D, 1, (16, 16), norm="none" if name == "vcl" else "batch", dropout=0.1)
    if name == "distilled":  # a student is made by distilling a teacher, not by fit
        return bayesify.distill(_fitted("mc-dropout"), _data(), epochs=1, progress=False)
    # table rows: the one augmentation of TTA that applies to them; the flow's ELBO fit short
    # (its 1000 default steps took 17 s; the samples' chunking does not depend on the fit)
    options = {"tta": {"transforms": "noise:0.1"}, "flow": {"elbo_steps": 20},
               "laplace-all": {"subset": "all"}}.get(name, {})  # fmt: skip
    cls = METHODS["laplace" if name == "laplace-all" else name]
    data = _data()
    if name == "evidential-classification":  # class scores and labels: 3 classes of the target
        net = mlp(D, 3, (16, 16), norm="batch", dropout=0.1)
        data = (data[0], torch.bucketize(data[1], torch.tensor([-0.5, 0.5])))
    try:
        method = cls(net, **options)
    except (TypeError, ValueError) as e:  # a method that needs options we do not know here
        pytest.skip(f"{name} cannot wrap a plain MLP with default options: {e}")
    x, y = data
    if name != "evidential-classification" and method.config.task.value == "classification":
        torch.manual_seed(0)  # a classification-only method: 2 classes
        method = cls(mlp(D, 2, (16, 16), norm="batch", dropout=0.1), **options)
        y = (y > 0).long()
    method.fit((x, y), epochs=1, batch_size=16, progress=False)
    return method


# every method with its defaults, and all-layer Laplace (its GLM pass runs the network once)
@pytest.fixture(scope="module", params=[*sorted(METHODS), "laplace-all"])
def method(request: pytest.FixtureRequest) -> Method:
    return _fitted(request.param)


def test_chunked_equals_one_chunk_for_large_t_n(method: Method) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(700, D, generator=g)  # T·N = 28,000 rows
    t = 40
    whole = method.sample(x, t, seed=3, max_rows=None)
    default = method.sample(x, t, seed=3)  # max_rows="auto": 1024 // 40 = 25 rows a chunk
    odd = method.sample(x, t, seed=3, max_rows=t * 37 + 5)  # chunks of 37 rows, a ragged tail
    assert whole.shape[:2] == (method.sample_count(t), len(x))
    torch.testing.assert_close(default, whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(odd, whole, rtol=1e-5, atol=1e-5)


def _rows_per_call(method: Method) -> tuple[dict[str, list[int]], list]:
    """Rows each module of the network sees per forward call (every module is hooked, so
    methods that run their members functionally, e.g. with ``torch.func``, are counted too)."""
    seen: dict[str, list[int]] = {}
    handles = []
    for name, module in method.net.named_modules():

        def hook(_module: nn.Module, args: tuple, name: str = name) -> None:
            if args and isinstance(args[0], torch.Tensor):
                seen.setdefault(name, []).append(int(args[0].shape[0]))

        handles.append(module.register_forward_pre_hook(hook))
    return seen, handles


def test_huge_t_n_is_never_one_forward(method: Method) -> None:
    x = torch.randn(2000, D)
    t = 100  # T·N = 200,000 rows; one pass would hold them all at once
    seen, handles = _rows_per_call(method)
    try:
        out = method.sample(x, t, seed=0)
    finally:
        for h in handles:
            h.remove()
    assert out.shape[:2] == (method.sample_count(t), len(x))
    assert seen, "no forward call was seen"
    biggest = max(max(rows) for rows in seen.values())
    assert biggest <= resolve_max_rows("auto", x) == 1024, f"a forward saw {biggest} rows"
    # every input row went through the net (a method may forward fewer than T·N rows when its
    # samples are equal, e.g. an ensemble of plain networks runs each member once over N rows)
    assert max(sum(rows) for rows in seen.values()) >= len(x)


def test_max_rows_none_is_one_forward(method: Method) -> None:
    x = torch.randn(50, D)
    seen, handles = _rows_per_call(method)
    try:
        method.sample(x, 8, seed=0, max_rows=None)
    finally:
        for h in handles:
            h.remove()
    # SWAG recomputes batch norm per sample in a pass of its own over the training rows it
    # keeps (``bn_inputs``): those calls are not the prediction's
    kept = getattr(method.net, "bn_inputs", None)
    if kept is not None and len(kept):
        seen = {k: [r for r in rows if r != len(kept)] for k, rows in seen.items()}
        seen = {k: rows for k, rows in seen.items() if rows}
    assert seen and all(len(rows) == 1 for rows in seen.values()), seen


def test_more_samples_than_max_rows_is_chunked_over_samples(method: Method) -> None:
    x = torch.randn(3, D, generator=torch.Generator().manual_seed(2))
    t, max_rows = 40, 16
    whole = method.sample(x, t, seed=5, max_rows=None)
    seen, handles = _rows_per_call(method)
    try:
        chunked = method.sample(x, t, seed=5, max_rows=max_rows)
    finally:
        for h in handles:
            h.remove()
    assert whole.shape[:2] == (method.sample_count(t), len(x))
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-6)
    biggest = max(max(rows) for rows in seen.values())
    if type(method)._draw_samples is not Method._draw_samples:  # its own pass
        if biggest > max_rows:
            pytest.xfail(f"{type(method).__name__} chunks on its own (over N only)")
        return
    assert biggest <= max_rows, f"a forward saw {biggest} rows"
    # 40 groups in ranges of 16, 16 and 8, each over the 3 rows one at a time
    assert max(len(rows) for rows in seen.values()) == 3 * 3


def test_odd_max_rows_above_and_below_t_give_the_same_samples(method: Method) -> None:
    x = torch.randn(11, D, generator=torch.Generator().manual_seed(4))
    t = 23
    whole = method.sample(x, t, seed=7, max_rows=None)
    for max_rows in (1, 5, 22, 23, 24, 70):
        torch.testing.assert_close(
            method.sample(x, t, seed=7, max_rows=max_rows), whole, rtol=1e-6, atol=1e-6
        )


def test_auto_max_rows_scales_with_the_input_size() -> None:
    assert resolve_max_rows("auto", torch.zeros(3, 8)) == 1024  # capped: 2**17 // 8 > 1024
    assert resolve_max_rows("auto", torch.zeros(3, 1, 28, 28)) == 2**17 // 784  # 167 images
    assert resolve_max_rows("auto", torch.zeros(3, 3, 224, 224)) == 64  # floor
    assert resolve_max_rows(None, torch.zeros(3, 8)) is None
    assert resolve_max_rows(0, torch.zeros(3, 8)) is None
    assert resolve_max_rows(50, torch.zeros(3, 8)) == 50
    with pytest.raises(ValueError, match="max_rows"):
        resolve_max_rows("big", torch.zeros(3, 8))  # type: ignore[arg-type]
