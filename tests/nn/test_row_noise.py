"""RowNoise: the hash against a plain-integer reference, the laws of its uniforms and normals,
chunk invariance, and replay of any range of sample groups with ``select_groups``."""

from __future__ import annotations

import pytest
import torch
from scipy import stats
from torch import nn

from bayesify.nn import (
    NodeNoise,
    RowNoise,
    StochasticScale,
    hash_uniform,
    noisy_training,
    reference_loop,
    repeat_samples,
    sampling,
    select_groups,
)
from bayesify.nn.dropout import MCDropout

CPU = torch.device("cpu")
M = 2**32 - 1


def _mix_reference(x: int) -> int:
    """The 32-bit mixer with Python integers (no overflow tricks)."""
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M
    x ^= x >> 15
    x = (x * 0x846CA68B) & M
    return x ^ (x >> 16)


def _uniform_reference(key: int, row: int, feature: int, features: int, stream: int) -> float:
    counter = row * features + feature
    lo, hi = counter & M, counter >> 32
    h = _mix_reference(lo ^ _mix_reference((key + stream * 0x9E3779B9) & M))
    h = _mix_reference(h ^ _mix_reference(hi ^ key))
    return (h + 0.5) / 2**32


def test_hash_matches_a_plain_integer_reference():
    keys = torch.tensor([0, 12345, 2**32 - 1], dtype=torch.int64)
    rows = torch.tensor([0, 3, 2**33 + 7], dtype=torch.int64)  # a counter beyond 32 bits too
    for stream in (0, 3):
        u = hash_uniform(keys, rows, 5, stream)
        for t, k in enumerate(keys.tolist()):
            for i, r in enumerate(rows.tolist()):
                for j in range(5):
                    assert float(u[t, i, j]) == _uniform_reference(k, r, j, 5, stream)


def test_hash_with_a_row_bound_gives_the_same_numbers():
    """With every counter inside 32 bits the high word is mixed once per group: same numbers as
    the reference; a bound too large for that takes the general path."""
    keys = torch.tensor([1, 99, 2**32 - 5], dtype=torch.int64)
    rows = torch.tensor([0, 1, 17, 2**30 // 3], dtype=torch.int64)
    for bound in (2**30 // 3 + 1, 2**40):
        u = hash_uniform(keys, rows, 3, 2, rows_below=bound)
        torch.testing.assert_close(u, hash_uniform(keys, rows, 3, 2), rtol=0, atol=0)
        for t, k in enumerate(keys.tolist()):
            for i, r in enumerate(rows.tolist()):
                for j in range(3):
                    assert float(u[t, i, j]) == _uniform_reference(k, r, j, 3, 2)


def test_numpy_and_torch_paths_give_the_same_numbers():
    """CPU tensors hash in NumPy uint32, others in torch int64: bit for bit the same (the torch
    path run on CPU here), both for counters inside 32 bits and beyond."""
    from bayesify.nn.row_noise import _hash_uniform_numpy, _hash_uniform_torch

    g = torch.Generator().manual_seed(0)
    keys = torch.randint(0, 2**32, (7,), generator=g, dtype=torch.int64)
    for rows, low_only in ((torch.arange(3, 40), True), (torch.tensor([5, 2**31, 2**34]), False)):
        for stream in (0, 1, 9):
            a = _hash_uniform_numpy(keys, rows, 11, stream, low_only)
            b = _hash_uniform_torch(keys, rows, 11, stream, low_only)
            assert a.dtype == b.dtype == torch.float64 and a.shape == (7, len(rows), 11)
            assert torch.equal(a, b)


def test_uniforms_are_uniform_and_independent():
    u = hash_uniform(torch.tensor([7, 8]), torch.arange(500), 40).flatten()
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    assert stats.kstest(u.numpy(), "uniform").pvalue > 1e-3
    a, b = u[:20000].numpy(), u[20000:].numpy()  # two groups' keys
    assert abs(stats.pearsonr(a, b)[0]) < 0.03
    s1 = hash_uniform(torch.tensor([7]), torch.arange(500), 40, stream=1).flatten().numpy()
    assert abs(stats.pearsonr(a, s1)[0]) < 0.03  # streams are independent too
    # neighbouring rows and features are not correlated
    grid = u[:20000].view(500, 40).numpy()
    assert abs(stats.pearsonr(grid[:-1].ravel(), grid[1:].ravel())[0]) < 0.03
    assert abs(stats.pearsonr(grid[:, :-1].ravel(), grid[:, 1:].ravel())[0]) < 0.03


def test_normals_are_standard_normal():
    noise = RowNoise()
    noise.begin(4, torch.Generator().manual_seed(0))
    z = noise.normal(4 * 5000, 3, CPU).flatten().numpy()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02


def test_select_groups_replays_those_groups_chunk_by_chunk():
    noise = RowNoise()
    noise.begin(7, torch.Generator().manual_seed(1))
    n, f = 6, 4
    full_u = noise.uniform(7 * n, f, CPU, stream=2).view(7, n, f)
    full_z = noise.normal(7 * n, f, CPU).view(7, n, f)
    noise.advance(7 * n)
    for start, stop in ((2, 5), (0, 7), (6, 7), (0, 1)):
        noise.select_groups(start, stop)
        g = stop - start
        assert torch.equal(noise.group_ids(), torch.arange(start, stop))
        parts_u, parts_z = [], []
        for rows in (2, 3, 1):  # chunks of data rows, counted by advance
            parts_u.append(noise.uniform(g * rows, f, CPU, stream=2).view(g, rows, f))
            parts_z.append(noise.normal(g * rows, f, CPU).view(g, rows, f))
            noise.advance(g * rows)
        assert torch.equal(torch.cat(parts_u, 1), full_u[start:stop])
        assert torch.equal(torch.cat(parts_z, 1), full_z[start:stop])
    with pytest.raises(ValueError, match="range"):
        noise.select_groups(3, 8)
    noise.end()
    with pytest.raises(RuntimeError, match="sampling block"):
        noise.select_groups(0, 1)


def _row_normal_reference(key: int, row: int, stream: int, count: int) -> torch.Tensor:
    """Row ``row``'s first ``count`` normals from a fresh NumPy Philox keyed (key + stream
    << 32, row)."""
    import numpy as np

    bits = np.random.Philox(key=np.array([key | stream << 32, row], np.uint64))
    return torch.from_numpy(np.random.Generator(bits).standard_normal(count))


def test_row_normals_are_each_rows_philox_stream():
    """Group t of row i takes normals t*F .. (t+1)*F of row i's own Philox stream: against
    fresh generators, for rows after an offset and for a range of groups."""
    noise = RowNoise()
    noise.begin(5, torch.Generator().manual_seed(3))
    key = int(noise.all_keys[0])
    noise.advance(5 * 4)  # rows 4.. next
    z = noise.row_normal(5 * 3, 2, CPU, stream=1).view(5, 3, 2)
    for i in range(3):
        assert torch.equal(z[:, i], _row_normal_reference(key, 4 + i, 1, 5 * 2).view(5, 2))
    noise.select_groups(2, 4)
    part = noise.row_normal(2 * 3, 2, CPU, stream=1).view(2, 3, 2)
    assert torch.equal(part[:, 0], _row_normal_reference(key, 0, 1, 5 * 2).view(5, 2)[2:4])


def test_row_normals_replay_chunks_ranges_and_a_larger_block():
    """Chunks of rows, ranges of groups and a block of more groups from the same generator
    (whose first key is the same) give exactly the numbers of the whole draw."""
    noise = RowNoise()
    noise.begin(6, torch.Generator().manual_seed(4))
    n, f = 5, 3
    full = noise.row_normal(6 * n, f, CPU).view(6, n, f)
    noise.advance(6 * n)
    for start, stop in ((0, 6), (1, 4), (5, 6)):
        noise.select_groups(start, stop)
        g, parts = stop - start, []
        for rows in (2, 3):
            parts.append(noise.row_normal(g * rows, f, CPU).view(g, rows, f))
            noise.advance(g * rows)
        assert torch.equal(torch.cat(parts, 1), full[start:stop])
    more = RowNoise()
    more.begin(9, torch.Generator().manual_seed(4))
    assert torch.equal(more.row_normal(9 * n, f, CPU).view(9, n, f)[:6], full)
    # float32 draws take half words: a half left over by one call must not reach the next
    singles = []
    for _ in range(2):
        more.begin(3, torch.Generator().manual_seed(4))
        singles.append(more.row_normal(3 * 2, 1, CPU, dtype=torch.float32))
    assert singles[0].dtype == torch.float32 and torch.equal(singles[0], singles[1])
    noise.end()
    with pytest.raises(RuntimeError, match="sampling block"):
        noise.row_normal(6, f, CPU)


def test_row_normals_are_independent_standard_normals_within_one_call():
    """One call's numbers: standard normal (KS), and uncorrelated across neighbouring rows,
    groups and features."""
    noise = RowNoise()
    noise.begin(40, torch.Generator().manual_seed(6))
    z = noise.row_normal(40 * 300, 8, CPU).view(40, 300, 8).numpy()
    assert stats.kstest(z.ravel(), "norm").pvalue > 1e-3
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    for a, b in ((z[:, :-1], z[:, 1:]), (z[:-1], z[1:]), (z[..., :-1], z[..., 1:])):
        assert abs(stats.pearsonr(a.ravel(), b.ravel())[0]) < 0.02


def test_group_normals_are_seeded_by_the_key_and_streams_differ():
    """Stream 0: group t's normals are torch's from a generator seeded with key_t; another
    stream gives other numbers (torch keeps a seed's low 32 bits, so the stream must reach
    them)."""
    noise = RowNoise()
    noise.begin(3, torch.Generator().manual_seed(2))
    z0, z1, z2 = (noise.group_normal(4000, CPU, s) for s in (0, 1, 2))
    for t, key in enumerate(noise.keys.tolist()):
        ref = torch.randn(4000, generator=torch.Generator().manual_seed(key))
        assert torch.equal(z0[t], ref)
    for a, b in ((z0, z1), (z0, z2), (z1, z2)):
        assert abs(stats.pearsonr(a.ravel().numpy(), b.ravel().numpy())[0]) < 0.04
    noise.select_groups(1, 3)
    assert torch.equal(noise.group_normal(4000, CPU, 1), z1[1:])


def test_same_generator_same_numbers_and_keys_from_the_generator():
    a, b, c = RowNoise(), RowNoise(), RowNoise()
    a.begin(3, torch.Generator().manual_seed(5))
    b.begin(3, torch.Generator().manual_seed(5))
    c.begin(3, torch.Generator().manual_seed(6))
    ua, ub, uc = (r.uniform(12, 2, CPU) for r in (a, b, c))
    assert torch.equal(ua, ub) and not torch.equal(ua, uc)


def _noise_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        NodeNoise(5, components=3, mu_init_std=0.5, sigma_init=0.3),
        nn.Linear(5, 8),
        MCDropout(0.3),
        StochasticScale(nn.Linear(8, 4), sigma_init=0.3, stochastic_bias=True),
    ).eval()


def test_group_ranges_of_a_network_equal_the_whole_pass():
    net = _noise_net()
    x = torch.randn(5, 5)
    t = 9
    with torch.no_grad():
        with sampling(net, t, torch.Generator().manual_seed(3)):
            whole = net(repeat_samples(x, t)).view(t, 5, 4)
        with sampling(net, t, torch.Generator().manual_seed(3)):
            ranges = []
            for start, stop in ((0, 4), (4, 8), (8, 9)):
                select_groups(net, start, stop)
                g = stop - start
                rows = [net(repeat_samples(c, g)).view(g, -1, 4) for c in x.split(2)]
                ranges.append(torch.cat(rows, 1))
        loop = reference_loop(net, x, t, torch.Generator().manual_seed(3))
    assert whole.std(0).min() > 0  # every row varies over the samples
    # same draws; only float32 summation order differs with the batch size
    torch.testing.assert_close(torch.cat(ranges), whole, rtol=0, atol=1e-6)
    torch.testing.assert_close(loop, whole, rtol=0, atol=1e-6)


def test_noisy_training_switches_global_rng_noise_and_restores():
    net = _noise_net()
    node, scale = net[0], net[3]
    x = torch.randn(4, 5)
    with torch.no_grad():
        mean = net(x)
        torch.testing.assert_close(net(x), mean, rtol=0, atol=0)  # deterministic outside
        with noisy_training(net):
            assert node.train_noise and scale.train_noise
            torch.manual_seed(1)
            a = net(x)
            torch.manual_seed(1)
            b = net(x)
            c = net(x)
    torch.testing.assert_close(a, b, rtol=0, atol=0)  # the global RNG drives it
    assert (a - c).abs().max() > 0 and (a - mean).abs().max() > 0
    assert not node.train_noise and not scale.train_noise
