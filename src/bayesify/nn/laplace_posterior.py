"""Gaussian Laplace posteriors over one layer's weights ``W [out, in]`` and bias ``b [out]``.

The posterior precision is ``P = s·H + δ·I``: ``H`` the generalised Gauss-Newton (GGN) of the
log-likelihood at the MAP weights, ``s`` its scale (1/σ² for homoscedastic regression, else 1)
and ``δ`` the prior precision. Three structures of ``H``, each kept in eigen-decomposed form so
that changing ``δ`` or ``s`` costs nothing:

* :class:`FullBlock`: the whole ``[P, P]`` matrix over ``θ = (vec W row-major, b)`` (laplace-
  torch's parameter order), ``P = out·(in + 1)``;
* :class:`KronBlock`: Kronecker factors, ``H_W ≈ G ⊗ A`` and ``H_b ≈ G`` (weight and bias
  blocks apart, no cross term: laplace-torch's KFAC with curvlinops), ``G [out, out]`` the summed
  output curvature and ``A [in, in]`` the summed input second moment divided by N;
* :class:`DiagBlock`: the diagonal of ``H``.

Each block draws weights ``θ + P^{-1/2} z`` for sample groups (the :class:`~bayesify.nn.
sampled_linear.WeightPosterior` protocol; all-layer Laplace), gives the eigenvalues of ``H``
(the marginal likelihood's log-determinant), ``J Σ Jᵀ`` for last-layer features (the linearised
predictive) and scales standard normals to draws from it (``output_noise``: the last layer's
samples, drawn per row in output space by :class:`LaplaceLinear`).
Every tensor is a buffer, so a block travels in the network's ``state_dict`` (bundles).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bayesify.nn.row_noise import RowNoise
from bayesify.nn.sampled_linear import SampledLinear, draw_on
from bayesify.nn.stochastic import StochasticModule


class LaplaceBlock(nn.Module):
    """Shared state: the mean (the MAP weights), ``δ`` and ``s``."""

    mean_weight: Tensor
    mean_bias: Tensor
    prior_precision: Tensor
    scale: Tensor

    def __init__(self, out_features: int, in_features: int, bias: bool) -> None:
        super().__init__()
        self.out_features, self.in_features, self.has_bias = out_features, in_features, bias
        self.register_buffer("mean_weight", torch.zeros(out_features, in_features))
        self.register_buffer("mean_bias", torch.zeros(out_features if bias else 0))
        self.register_buffer("prior_precision", torch.tensor(1.0))
        self.register_buffer("scale", torch.tensor(1.0))

    @property
    def num_params(self) -> int:
        return self.out_features * (self.in_features + int(self.has_bias))

    def set_mean(self, weight: Tensor, bias: Tensor | None) -> None:
        self.mean_weight = weight.detach().clone().to(self.mean_weight.dtype)
        if bias is not None:
            self.mean_bias = bias.detach().clone().to(self.mean_bias.dtype)

    def mean_sq_norm(self) -> Tensor:
        """``||θ_MAP||²`` (the marginal likelihood's scatter term over δ)."""
        return self.mean_weight.double().square().sum() + self.mean_bias.double().square().sum()

    def eigenvalues(self) -> Tensor:
        """Eigenvalues of ``H`` (unscaled), float64 ``[P]``."""
        raise NotImplementedError

    def deltas(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """Draws of ``θ − θ_MAP ~ N(0, P⁻¹)``: ``([G, out, in], [G, out])`` float64."""
        raise NotImplementedError

    def draw(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
        """``groups`` posterior weight draws ``([G, out, in], [G, out] or None)``."""
        dw, db = self.deltas(groups, generator)
        dw = dw.to(self.mean_weight.device)
        w = (self.mean_weight.double() + dw).to(self.mean_weight.dtype)
        if not self.has_bias:
            return w, None
        b = (self.mean_bias.double() + db.to(self.mean_bias.device)).to(self.mean_bias.dtype)
        return w, b

    def output_covariance(self, features: Tensor) -> Tensor:
        """``J Σ Jᵀ`` of the layer's outputs for inputs ``features [N, in]``: ``[N, out, out]``
        float64 (the linearised predictive's covariance over logits or means)."""
        raise NotImplementedError

    def output_variance(self, features: Tensor) -> Tensor:
        """The diagonal of :meth:`output_covariance`: ``[N, out]`` float64."""
        return self.output_covariance(features).diagonal(dim1=-2, dim2=-1)

    def output_noise(self, features: Tensor, z: Tensor) -> Tensor:
        """Standard normals ``z [G, N, out]`` scaled to draws of the outputs' deviation from
        the mean, ``N(0, J Σ Jᵀ)`` for each row of ``features [N, in]``: ``[G, N, out]`` in
        ``features``' dtype (here by the symmetric square root of :meth:`output_covariance`,
        in float64)."""
        vals, vecs = torch.linalg.eigh(self.output_covariance(features))  # [N, out(, out)]
        root = (vecs * vals.clamp_min(0).sqrt().unsqueeze(1)) @ vecs.transpose(1, 2)
        return torch.einsum("nck,gnk->gnc", root, z.double()).to(features.dtype)

    def drawn_outputs(self, features: Tensor, mean: Tensor, z: Tensor) -> Tensor:
        """``mean [N, out] + output_noise(features, z)``: every group's drawn outputs
        ``[G, N, out]`` (a block may fuse the two)."""
        return mean + self.output_noise(features, z)


class FullBlock(LaplaceBlock):
    """The full GGN over the layer, eigen-decomposed: ``H = V diag(λ) Vᵀ``."""

    def __init__(self, out_features: int, in_features: int, bias: bool) -> None:
        super().__init__(out_features, in_features, bias)
        p = self.num_params
        self.register_buffer("eigvecs", torch.zeros(p, p, dtype=torch.float64))
        self.register_buffer("eigvals", torch.zeros(p, dtype=torch.float64))

    def set_curvature(self, h: Tensor) -> None:
        """``h [P, P]``: the GGN in laplace-torch's parameter order."""
        vals, vecs = torch.linalg.eigh(h.double())
        self.eigvals, self.eigvecs = vals.clamp_min(0), vecs

    def eigenvalues(self) -> Tensor:
        return self.eigvals

    def _inv_sqrt(self) -> Tensor:
        return (self.scale.double() * self.eigvals + self.prior_precision.double()).rsqrt()

    def deltas(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        z = draw_on(generator, (groups, self.num_params)).to(self.eigvecs.device)
        theta = (z * self._inv_sqrt()) @ self.eigvecs.T  # [G, P]
        return self._split(theta)

    def _split(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        n_w = self.out_features * self.in_features
        w = theta[..., :n_w].unflatten(-1, (self.out_features, self.in_features))
        return w, theta[..., n_w:]

    def output_covariance(self, features: Tensor) -> Tensor:
        vw, vb = self._split(self.eigvecs.T)  # [P, out, in], [P, out]
        jv = torch.einsum("nd,pcd->ncp", features.double(), vw)  # J V: [N, out, P]
        if self.has_bias:
            jv = jv + vb.T.unsqueeze(0)
        inv = self._inv_sqrt().square()
        return (jv * inv) @ jv.transpose(1, 2)


class KronBlock(LaplaceBlock):
    """Kronecker-factored GGN: ``H_W = G ⊗ A``, ``H_b = G`` (eigen-decomposed factors)."""

    def __init__(self, out_features: int, in_features: int, bias: bool) -> None:
        super().__init__(out_features, in_features, bias)
        f64 = torch.float64
        self.register_buffer("q_out", torch.zeros(out_features, out_features, dtype=f64))
        self.register_buffer("l_out", torch.zeros(out_features, dtype=f64))
        self.register_buffer("q_in", torch.zeros(in_features, in_features, dtype=f64))
        self.register_buffer("l_in", torch.zeros(in_features, dtype=f64))

    def set_curvature(self, g: Tensor, a: Tensor) -> None:
        """``g [out, out]``: Σ_n of the output curvature; ``a [in, in]``: Σ_n x xᵀ / N."""
        self.l_out, self.q_out = (t for t in torch.linalg.eigh(g.double()))
        self.l_in, self.q_in = (t for t in torch.linalg.eigh(a.double()))
        self.l_out, self.l_in = self.l_out.clamp_min(0), self.l_in.clamp_min(0)

    def _prec_w(self) -> Tensor:
        """Posterior precision of the rotated weights ``[out, in]``."""
        s, d = self.scale.double(), self.prior_precision.double()
        return s * torch.outer(self.l_out, self.l_in) + d

    def _prec_b(self) -> Tensor:
        return self.scale.double() * self.l_out + self.prior_precision.double()

    def eigenvalues(self) -> Tensor:
        w = torch.outer(self.l_out, self.l_in).flatten()
        return torch.cat([w, self.l_out]) if self.has_bias else w

    def rotated_deltas(
        self, groups: int, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        """Draws of the weights' deviation in the factors' eigenbases, ``Q_outᵀ ΔW Q_in``
        ``[G, out, in]`` (independent, variance 1/precision), and of the bias ``Δb [G, out]``."""
        dev = self.q_out.device
        z = draw_on(generator, (groups, self.out_features, self.in_features + 1)).to(dev)
        db = (z[..., -1] * self._prec_b().rsqrt()) @ self.q_out.T
        return z[..., :-1] * self._prec_w().rsqrt(), db

    def deltas(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        rotated, db = self.rotated_deltas(groups, generator)
        return self.q_out @ rotated @ self.q_in.T, db

    def _rotated_variance(self, features: Tensor) -> Tensor:
        """The outputs' covariance in ``G``'s eigenbasis is diagonal: ``m [N, out]`` with
        ``J Σ Jᵀ = Q_out diag(m_n) Q_outᵀ`` for row n."""
        psi2 = (features.double() @ self.q_in).square()  # [N, in]
        m = psi2 @ self._prec_w().reciprocal().T  # [N, out]
        return m + self._prec_b().reciprocal() if self.has_bias else m

    def output_covariance(self, features: Tensor) -> Tensor:
        m = self._rotated_variance(features)
        return (self.q_out * m.unsqueeze(1)) @ self.q_out.T  # Q diag(m_n) Qᵀ

    def output_variance(self, features: Tensor) -> Tensor:
        return self._rotated_variance(features) @ self.q_out.square().T

    def output_noise(self, features: Tensor, z: Tensor) -> Tensor:
        """``Q_out (√m_n ⊙ z)``: the draw in ``G``'s eigenbasis, rotated back; in
        ``features``' dtype with the factors cast to it once (:meth:`_factors`)."""
        scaled, q_out_t = self._scaled_normals(features, z)
        return scaled @ q_out_t

    def drawn_outputs(self, features: Tensor, mean: Tensor, z: Tensor) -> Tensor:
        """``mean + Q_out (√m_n ⊙ z)`` in one batched product (a call over one image runs
        a dozen small operations, each a sizeable share of its cost)."""
        scaled, q_out_t = self._scaled_normals(features, z)
        return torch.baddbmm(mean, scaled, q_out_t.expand(len(scaled), -1, -1))

    def _scaled_normals(self, features: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
        """``√m_n ⊙ z`` ``[G, N, out]`` (m: the rows' variances in ``G``'s eigenbasis) and
        ``Q_outᵀ``, in ``features``' dtype (``z`` may be overwritten)."""
        q_in, inv_w, inv_b, q_out_t = self._factors(features.dtype, features.device)
        proj = (features @ q_in).square_()
        m = proj @ inv_w if inv_b is None else torch.addmm(inv_b, proj, inv_w)  # [N, out]
        return z.to(features.dtype).mul_(m.sqrt_()), q_out_t

    def _factors(
        self, dtype: torch.dtype, device: torch.device
    ) -> tuple[Tensor, Tensor, Tensor | None, Tensor]:
        """``Q_in``, ``1 / precision`` of the rotated weights transposed ``[in, out]`` and
        bias ``[out]`` (or None), ``Q_outᵀ``, in ``dtype`` on ``device``: computed in float64
        and cast once, then reused while the buffers they come from are the same tensors,
        unmodified (a new fit, ``δ`` or ``s`` changed in place, ``.to()``: made again)."""
        b = self._buffers  # (not six nn.Module.__getattr__ calls on every prediction)
        sources = (b["q_in"], b["l_in"], b["l_out"], b["q_out"], b["prior_precision"],
                   b["scale"])  # fmt: skip
        hit = self.__dict__.get("_factor_cache")
        if (
            hit is not None
            and hit[0] == (dtype, device)
            and all(a is b and v == b._version for (a, v), b in zip(hit[1], sources, strict=True))
        ):
            return hit[2]
        inv_b = self._prec_b().reciprocal() if self.has_bias else None
        parts = (self.q_in, self._prec_w().reciprocal().T, inv_b, self.q_out.T)
        made = tuple(None if t is None else t.to(device, dtype) for t in parts)
        self.__dict__["_factor_cache"] = ((dtype, device), [(t, t._version) for t in sources], made)
        return made  # type: ignore[return-value]


class DiagBlock(LaplaceBlock):
    """The diagonal of the GGN: ``h_W [out, in]`` and ``h_b [out]``."""

    def __init__(self, out_features: int, in_features: int, bias: bool) -> None:
        super().__init__(out_features, in_features, bias)
        f64 = torch.float64
        self.register_buffer("h_weight", torch.zeros(out_features, in_features, dtype=f64))
        self.register_buffer("h_bias", torch.zeros(out_features if bias else 0, dtype=f64))

    def set_curvature(self, h_weight: Tensor, h_bias: Tensor | None) -> None:
        self.h_weight = h_weight.double().clamp_min(0)
        if h_bias is not None:
            self.h_bias = h_bias.double().clamp_min(0)

    def eigenvalues(self) -> Tensor:
        return torch.cat([self.h_weight.flatten(), self.h_bias])

    def _var(self, h: Tensor) -> Tensor:
        return (self.scale.double() * h + self.prior_precision.double()).reciprocal()

    def deltas(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        dev = self.h_weight.device
        z = draw_on(generator, (groups, self.out_features, self.in_features + 1)).to(dev)
        db = z[..., -1] * self._var(self.h_bias).sqrt() if self.has_bias else z[..., -1]
        return z[..., :-1] * self._var(self.h_weight).sqrt(), db

    def output_variance(self, features: Tensor) -> Tensor:
        v = features.double().square() @ self._var(self.h_weight).T  # [N, out]
        return v + self._var(self.h_bias) if self.has_bias else v

    def output_covariance(self, features: Tensor) -> Tensor:
        return torch.diag_embed(self.output_variance(features))

    def output_noise(self, features: Tensor, z: Tensor) -> Tensor:
        """Independent outputs: ``√var ⊙ z``."""
        return (z.double() * self.output_variance(features).sqrt()).to(features.dtype)


BLOCKS: dict[str, type[LaplaceBlock]] = {"full": FullBlock, "kfac": KronBlock, "diag": DiagBlock}


class LaplaceLinear(SampledLinear):
    """The last layer of a Laplace network. While sampling, each row's outputs are drawn in
    output space (the local reparameterisation trick of Kingma et al. 2015, exact here: the
    layer is linear in its weights, so the outputs of a row with features φ are Gaussian,
    ``N(W φ + b, J Σ Jᵀ)``): C standard normals per (sample group, row), from the row's own
    stream (:meth:`~bayesify.nn.row_noise.RowNoise.row_normal`: one counter-based generator
    reset per row, not a hash per number), so a row's samples do not depend on how the call's
    rows are chunked or on the other rows. Rows of one group are independent draws, not one
    shared weight draw. Weights handed in by a :class:`~bayesify.nn.stochastic.SamplingPlan`
    are used as a :class:`SampledLinear` uses them. With ``probit=True`` nothing is drawn:
    every sample group gets the probit-scaled logits ``f / sqrt(1 + π/8 · diag(J Σ Jᵀ))``
    (MacKay 1992), whose softmax is the probit approximation of the predictive class
    probabilities."""

    posterior: LaplaceBlock

    def __init__(self, linear: nn.Linear, posterior: LaplaceBlock, probit: bool = False) -> None:
        super().__init__(linear, posterior)
        self.probit = probit
        self.noise = RowNoise()  # the per-row keys of output-space draws

    @property
    def _output_draws(self) -> bool:
        """Whether this sampling block draws outputs per row (its keys are drawn)."""
        return self.noise.active

    def begin_sampling(self, plan) -> None:  # noqa: ANN001 - SamplingPlan
        if plan.draw_for(self) is not None:
            super().begin_sampling(plan)  # weights per group, handed in
            return
        StochasticModule.begin_sampling(self, plan)
        if not self.probit:
            self.noise.begin(plan.samples, plan.generator)

    def select_groups(self, start: int, stop: int) -> None:
        if self._block is not None:
            super().select_groups(start, stop)
            return
        StochasticModule.select_groups(self, start, stop)
        if self._output_draws:
            self.noise.select_groups(start, stop)

    def end_sampling(self) -> None:
        super().end_sampling()
        self.noise.end()

    def group_bytes(self) -> int:
        """One int64 key per group (none for the probit predictive)."""
        return 0 if self.probit else 8

    def forward(self, x: Tensor) -> Tensor:
        if self.stochastic and self.probit and self._block is None:
            groups = self.groups
            rows = x.reshape(groups, -1, self.in_features)[0]  # every group: the same rows
            return probit_logits(self, rows).repeat(groups, 1).reshape(*x.shape[:-1], -1)
        if self.stochastic and self._output_draws:
            flat = x.reshape(-1, self.in_features)  # [G*n, in]: each row its own draw
            if len(flat) % self.groups:
                raise ValueError(f"{len(flat)} rows do not split into {self.groups} sample groups")
            out = self._drawn_outputs(flat, len(flat) // self.groups)
            return out.reshape(*x.shape[:-1], self.out_features)
        return super().forward(x)

    def group_outputs(self, rows: Tensor) -> Tensor:
        """Every group's outputs for the same ``rows [n, in]`` (inside a sampling block, all
        of its groups selected): ``[G, n, out]``, the rows' moments computed once, not once
        per group (what a forward over the ``[G*n, in]`` repeated rows gives, without the
        repeat)."""
        if self.probit and self._block is None:
            return probit_logits(self, rows).unsqueeze(0).expand(self.groups, -1, -1)
        if self._output_draws:
            n = rows.shape[0]
            return self._drawn_outputs(rows, n).view(self.groups, n, self.out_features)
        if self._draw is None:
            raise RuntimeError("group_outputs needs an active sampling block")
        return super().forward(rows.repeat(self.groups, 1)).unflatten(0, (self.groups, -1))

    def _drawn_outputs(self, rows: Tensor, n: int) -> Tensor:
        """Outputs ``[G*n, out]`` (group-major) for feature rows ``rows [m, in]``: every
        group's own rows (``m = G*n``) or rows every group shares (``m = n``). The moments in
        the rows' dtype, once per row of ``rows``; C standard normals per (group, data row)."""
        total = self.groups * n
        z = self.noise.row_normal(total, self.out_features, rows.device, dtype=rows.dtype)
        self.noise.advance(total)
        z = z.view(-1, rows.shape[0], self.out_features)  # [G or 1, m, out]
        mean = nn.functional.linear(rows, self.weight, self.bias)
        out = self.posterior.drawn_outputs(rows, mean, z)  # [G or 1, m, out]
        return out.reshape(total, self.out_features)


def probit_logits(layer: LaplaceLinear, features: Tensor) -> Tensor:
    """``f / sqrt(1 + π/8 · var)`` for ``features [N, in]``: ``[N, out]``."""
    f = nn.functional.linear(features, layer.weight, layer.bias)
    var = layer.posterior.output_variance(features)
    return (f.double() / (1 + math.pi / 8 * var).sqrt()).to(f.dtype)
