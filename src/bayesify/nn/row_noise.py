"""Per-row randomness that is independent of chunking and replayable per sample group.

Every stochastic layer that draws noise per row (MC dropout masks, Bayes-by-Backprop
pre-activation noise and flipout signs, IBNN node noise, stochastic-normalisation scales) takes
it from a :class:`RowNoise`, a counter-based generator: the random number for (sample group t,
data row i, element j, stream s) is a hash of (key_t, i, j, s). The per-group keys ``[T]`` are
drawn from the caller's generator in ``begin_sampling``, once per sampling block. Hence

* the same generator gives the same numbers;
* chunking the N rows (``max_rows``) does not change them: the layer counts the data rows it has
  seen (:meth:`RowNoise.advance`, once per forward), so row i keeps its index in every chunk;
* a contiguous range of groups replays exactly with ``select_groups(start, stop)`` (keys
  ``start .. stop-1``, row count restarted); the reference loop of T passes is the range
  ``(t, t + 1)`` in pass t, and ``Method.sample`` runs ranges when T alone exceeds ``max_rows``.
  The layer knows the global index of every active group (:meth:`RowNoise.group_ids`), so
  per-group choices such as IBNN's mixture component t mod K survive a range.

:meth:`RowNoise.row_normal` gives the same guarantees from one Philox stream per data row
(keyed by the block's first group key and the row's index) at a fraction of the hash's cost on
few rows; Laplace's output-space draws use it.
A noise layer must be called once per forward pass (no weight sharing of the same instance).

Outside sampling, :class:`RowNoise` is unused. Layers derived from :class:`TrainingNoiseModule`
then draw from torch's global RNG inside :func:`noisy_training` (the training objective) and are
deterministic otherwise; MC dropout and the Bayes layers follow ``.train()`` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from bayesify.nn.stochastic import SamplingPlan, StochasticModule, generator_device

_M32 = 0xFFFFFFFF
_V = TypeVar("_V")


def _mul32(x: Tensor, c: int) -> Tensor:
    """``(x * c) mod 2**32`` for int64 ``x`` in ``[0, 2**32)`` without int64 overflow."""
    if c < 2**31:  # the product stays below 2**63
        y = x * c
        y &= _M32
        return y
    y = x * (c >> 16)  # the high half of c only matters in the low 16 bits of its product
    y &= 0xFFFF
    y <<= 16
    y += x * (c & 0xFFFF)
    y &= _M32
    return y


def _mix32(x: Tensor) -> Tensor:
    """A bijective 32-bit integer mixer (xor-shift-multiply), on int64 values in [0, 2**32).
    (In-place steps on fresh tensors: on large draws the passes over memory are the cost.)"""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x ^= x >> 15
    x = _mul32(x, 0x846CA68B)
    x ^= x >> 16
    return x


def hash_uniform(
    keys: Tensor, rows: Tensor, features: int, stream: int = 0, *, rows_below: int | None = None
) -> Tensor:
    """Uniforms in (0, 1) ``[T, n, features]`` from group keys ``[T]`` and row indices ``[n]``.

    Deterministic in (key, row, feature, stream): the counter-based generator behind
    :class:`RowNoise`. ``rows_below``: a bound on the row indices when the caller knows one; if
    every counter ``row * features + feature`` then fits in 32 bits, the high counter word is
    zero and its mixing is done once per group instead of once per element (same numbers).
    On CPU the integer steps run in NumPy's uint32 (wrapping products, a fraction of torch's
    per-operation cost on small draws); elsewhere in torch's int64. The numbers are the same.
    """
    low_only = rows_below is not None and rows_below * features <= 2**32
    if rows.device.type == "cpu":
        return _hash_uniform_numpy(keys, rows, features, stream, low_only)
    return _hash_uniform_torch(keys, rows, features, stream, low_only)


def _hash_uniform_torch(
    keys: Tensor, rows: Tensor, features: int, stream: int, low_only: bool
) -> Tensor:
    """:func:`hash_uniform` in torch int64 (any device)."""
    j = torch.arange(features, device=rows.device, dtype=torch.int64)
    counter = rows.view(-1, 1) * features + j  # [n, F], unique per (row, feature)
    k = keys.view(-1, 1, 1)  # [T, 1, 1]
    lo = counter if low_only else counter & _M32
    h = _mix32(lo ^ _mix32((k + stream * 0x9E3779B9) & _M32))  # [T, n, F]
    h ^= _mix32(k if low_only else ((counter >> 32) & _M32) ^ k)
    h = _mix32(h)
    return (h.double() + 0.5) * 2.0**-32  # strictly inside (0, 1)


def _mix32_numpy(x: np.ndarray) -> np.ndarray:
    """:func:`_mix32` on a uint32 array, in place (uint32 products wrap modulo 2**32)."""
    x ^= x >> 16
    x *= 0x7FEB352D
    x ^= x >> 15
    x *= 0x846CA68B
    x ^= x >> 16
    return x


def _hash_uniform_numpy(
    keys: Tensor, rows: Tensor, features: int, stream: int, low_only: bool
) -> Tensor:
    """:func:`hash_uniform` in NumPy uint32 (CPU tensors): the same numbers as the torch path."""
    counter = rows.numpy()[:, None] * features + np.arange(features)  # [n, F] int64
    return _hash_counters_numpy(keys.numpy(), counter, stream, low_only)


def _hash_counters_numpy(k: np.ndarray, counter: np.ndarray, stream: int, low_only: bool) -> Tensor:
    """The NumPy hash of keys ``k [T]`` (int64 in [0, 2**32)) and element counters ``counter
    [n, F]`` (int64, ``row * F + feature``): uniforms ``[T, n, F]`` float64."""
    if low_only:  # both per-key mixes in one pass over a [2, T] array
        key_mix, k_mix = _mix32_numpy(np.stack((k + stream * 0x9E3779B9, k)).astype(np.uint32))
    else:
        key_mix = _mix32_numpy((k + stream * 0x9E3779B9).astype(np.uint32))  # mod 2**32
    h = counter.astype(np.uint32)[None] ^ key_mix[:, None, None]  # the low counter word
    _mix32_numpy(h)
    if low_only:
        h ^= k_mix[:, None, None]
    else:
        high = (counter >> 32).astype(np.uint32)
        h ^= _mix32_numpy(high[None] ^ k.astype(np.uint32)[:, None, None])
    u = _mix32_numpy(h).astype(np.float64)
    u += 0.5
    u *= 2.0**-32  # strictly inside (0, 1)
    return torch.from_numpy(u)


class RowNoise:
    """Per-row random numbers for ``T`` sample groups, invariant to chunking (see module doc)."""

    def __init__(self) -> None:
        self.keys: Tensor | None = None  # [G] int64 in [0, 2**32), the groups now in use
        self.all_keys: Tensor | None = None  # [T] every group's key of this sampling block
        self.start = 0  # global index of the first group now in use
        self.offset = 0  # data rows already seen since the groups were selected
        self._philox: np.random.Generator | None = None  # row_normal's, reset per row

    @property
    def active(self) -> bool:
        """Whether a sampling block has drawn keys."""
        return self.keys is not None

    def begin(self, samples: int, generator: torch.Generator | None) -> None:
        """Draw one key per sample group from ``generator``; all groups in use."""
        dev = generator_device(generator)
        keys = torch.randint(
            0, 2**32, (samples,), generator=generator, dtype=torch.int64, device=dev
        )
        self.keys = keys.cpu()
        self.all_keys, self.start, self.offset = self.keys, 0, 0

    def end(self) -> None:
        self.keys, self.all_keys, self.start, self.offset = None, None, 0, 0

    def select_groups(self, start: int, stop: int) -> None:
        """Use only groups ``start .. stop-1`` of the block (keys sliced, row count restarted)."""
        if self.all_keys is None:
            raise RuntimeError("select_groups needs an active sampling block")
        if not 0 <= start < stop <= len(self.all_keys):
            raise ValueError(
                f"group range [{start}, {stop}) is not inside the {len(self.all_keys)} groups"
            )
        self.keys, self.start, self.offset = self.all_keys[start:stop], start, 0

    def group_ids(self, device: torch.device | None = None) -> Tensor:
        """Global index of every group in use ``[G]``."""
        if self.keys is None:
            raise RuntimeError("RowNoise used outside a sampling block")
        return torch.arange(self.start, self.start + len(self.keys), device=device)

    def _data_rows(self, total_rows: int) -> int:
        """n, the data rows of a pass over ``total_rows = G*n`` rows (refused outside a
        sampling block or when the G groups in use do not divide them)."""
        if self.keys is None:
            raise RuntimeError("RowNoise used outside a sampling block")
        groups = self.keys.shape[0]
        if total_rows % groups:
            raise ValueError(f"{total_rows} rows do not split into {groups} sample groups")
        return total_rows // groups

    def _rows(self, total_rows: int, device: torch.device) -> Tensor:
        n = self._data_rows(total_rows)
        return torch.arange(self.offset, self.offset + n, device=device)

    def uniform(
        self, total_rows: int, features: int, device: torch.device, stream: int = 0
    ) -> Tensor:
        """Uniforms ``[G*n, features]`` (float64) for a pass over ``G*n`` rows."""
        if device.type == "cpu" and self.keys is not None and not total_rows % len(self.keys):
            # the counters row * F + feature of rows offset.. straight in NumPy: the numbers of
            # hash_uniform's CPU path without building the row indices as a tensor first
            n = total_rows // len(self.keys)
            lo, hi = self.offset * features, (self.offset + n) * features
            counter = np.arange(lo, hi, dtype=np.int64).reshape(n, features)
            u = _hash_counters_numpy(self.keys.numpy(), counter, stream, hi <= 2**32)
            return u.reshape(total_rows, features)
        rows = self._rows(total_rows, device)
        below = self.offset + len(rows)
        u = hash_uniform(self.keys.to(device), rows, features, stream, rows_below=below)
        return u.reshape(total_rows, features)

    def normal(
        self, total_rows: int, features: int, device: torch.device, stream: int = 0
    ) -> Tensor:
        """Standard normals ``[G*n, features]`` (float64): the normal quantile function of one
        stream of uniforms (half the hashing of Box-Muller's two streams, which it replaced)."""
        return torch.special.ndtri(self.uniform(total_rows, features, device, 2 * stream + 1))

    def row_normal(
        self,
        total_rows: int,
        features: int,
        device: torch.device,
        stream: int = 0,
        *,
        dtype: torch.dtype = torch.float64,
    ) -> Tensor:
        """Standard normals ``[G*n, features]`` in ``dtype`` (float32: NumPy's single-precision
        draws, other numbers than float64's) with one stream per data row. On CPU
        the stream is NumPy's standard normals from Philox (a counter-based generator, Salmon
        et al. 2011) keyed by the block's first group key, ``stream`` and the row's index;
        group t of a row takes its normals ``t·F .. (t+1)·F - 1``. So chunks of rows, ranges
        of groups and a larger T replay the same numbers, as with :meth:`normal`, but the cost
        is one generator reset per row instead of hashing every element in tens of array
        operations (one row of 32 groups and 10 features: about 25 µs against 80). Elsewhere
        (CUDA) it is :meth:`normal` on the device, whose numbers differ from the CPU's (the same
        distribution); a loop over rows would cost more there."""
        if device.type != "cpu":
            return self.normal(total_rows, features, device, stream).to(dtype)
        n = self._data_rows(total_rows)
        assert self.keys is not None and self.all_keys is not None  # (set together in begin)
        groups = self.keys.shape[0]
        stop = self.start + groups
        single = dtype == torch.float32
        z = np.empty((n, stop * features), np.float32 if single else np.float64)
        gen = self.__dict__.get("_philox")  # (absent in a RowNoise pickled before it existed)
        if gen is None:  # made once: a new one reads the OS's entropy (~30 µs)
            gen = self._philox = np.random.Generator(np.random.Philox(key=0))
        bits = gen.bit_generator
        state = bits.state
        state["state"]["key"][0] = int(self.all_keys.numpy()[0]) | stream << 32
        for r in range(n):
            state["state"]["key"][1] = self.offset + r
            state["state"]["counter"][:] = 0
            state["buffer_pos"] = 4  # the buffer is empty: the next word is counter 0's
            state["has_uint32"] = 0  # and no half word is left over (float32 draws use halves)
            bits.state = state
            gen.standard_normal(dtype=z.dtype, out=z[r])
        # [n, G, F] -> [G, n, F]: group-major as every pass's rows
        z = z[:, self.start * features :].reshape(n, groups, features).transpose(1, 0, 2)
        out = torch.from_numpy(z).reshape(total_rows, features)
        return out if single or dtype == torch.float64 else out.to(dtype)

    def group_normal(self, features: int, device: torch.device, stream: int = 0) -> Tensor:
        """Standard normals ``[G, features]`` (float32), one set per group in use and the same
        for every data row: a per-group draw (e.g. a weight sample) that chunks and ranges of
        groups replay exactly. Group t's numbers come from torch's generator seeded with
        key_t (stream 0) or key_t xor a 32-bit mix of ``stream``: torch's CPU generator keeps
        only the low 32 bits of a seed, so the stream must change those. One vectorised draw
        per group, far cheaper than hashing every element when ``features`` is large."""
        if self.keys is None:
            raise RuntimeError("RowNoise used outside a sampling block")
        out = torch.empty(len(self.keys), features)
        gen = torch.Generator()
        salt = 0
        if stream:
            salt = int(_mix32_numpy(np.array([stream * 0x9E3779B9 & _M32], np.uint32))[0])
        for row, key in zip(out, self.keys.tolist(), strict=True):
            gen.manual_seed(key ^ salt)
            torch.randn(features, generator=gen, out=row)
        return out.to(device)

    def advance(self, total_rows: int) -> None:
        """Count the data rows of a finished pass (call once per forward)."""
        if self.keys is not None:
            self.offset += total_rows // len(self.keys)


class RowNoiseModule(StochasticModule):
    """A stochastic layer whose per-row randomness comes from a :class:`RowNoise` (``noise``)."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = RowNoise()
        self._range_cache: dict[str, tuple[Any, Any]] = {}

    @property
    def sampling_active(self) -> bool:
        """Inside a sampling block with this layer switched on."""
        return self.stochastic and self.noise.active

    def begin_sampling(self, plan: SamplingPlan) -> None:
        super().begin_sampling(plan)
        self.noise.begin(plan.samples, plan.generator)
        self._range_cache.clear()

    def end_sampling(self) -> None:
        super().end_sampling()
        self.noise.end()
        self._range_cache.clear()

    def range_cached(self, name: str, make: Callable[[], _V], per_range: bool = True) -> _V:
        """``make()``, made once and reused by every row chunk of the sampling block: once per
        range of groups in use (``per_range``: per-group draws such as weight samples built from
        :meth:`RowNoise.group_normal`, ``[G, ...]``), or once per block (a value every group
        shares, such as σ = softplus(ρ)). Forgotten when the block ends."""
        key = (self.noise.start, len(self.noise.keys)) if per_range else None
        hit = self._range_cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = make()
        self._range_cache[name] = (key, value)
        return value

    def select_groups(self, start: int, stop: int) -> None:
        """Behave as groups ``start .. stop-1`` of the current sampling block, alone."""
        self.noise.select_groups(start, stop)
        super().select_groups(start, stop)

    def group_bytes(self) -> int:
        """One int64 key per group (:meth:`RowNoise.begin`)."""
        return 8 + super().group_bytes()


class TrainingNoiseModule(RowNoiseModule):
    """A row-noise layer whose standard normal noise per row comes from :class:`RowNoise` while
    sampling, from torch's global RNG inside :func:`noisy_training`, and is off otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.train_noise = False

    def standard_normal(self, rows: int, width: int, ref: Tensor) -> Tensor | None:
        """Standard normals ``[rows, width]`` in ``ref``'s dtype and device, or None when the
        layer is deterministic now. Call once per forward (it counts the rows while sampling)."""
        if self.sampling_active:
            eps = self.noise.normal(rows, width, ref.device)
            self.noise.advance(rows)
            return eps.to(ref.dtype)
        if self.train_noise:
            return torch.randn(rows, width, device=ref.device, dtype=ref.dtype)
        return None


@contextmanager
def noisy_training(
    model: nn.Module, layers: Sequence[TrainingNoiseModule] | None = None
) -> Iterator[None]:
    """Within the block, :class:`TrainingNoiseModule` layers draw per-row noise from the global
    RNG (outside a sampling block). ``layers``: the model's noise layers when the caller keeps
    them (saves a walk over the modules every training step)."""
    if layers is None:
        layers = [m for m in model.modules() if isinstance(m, TrainingNoiseModule)]
    previous = [m.train_noise for m in layers]
    for m in layers:
        m.train_noise = True
    try:
        yield
    finally:
        for m, was in zip(layers, previous, strict=True):
            m.train_noise = was
