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
sampled_linear.WeightPosterior` protocol), gives the eigenvalues of ``H`` (the marginal
likelihood's log-determinant) and ``J Σ Jᵀ`` for last-layer features (the linearised predictive).
Every tensor is a buffer, so a block travels in the network's ``state_dict`` (bundles).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from bayesify.nn.sampled_linear import SampledLinear, draw_on


class LaplaceBlock(nn.Module):
    """Shared state: the mean (the MAP weights), ``δ`` and ``s``."""

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

    def output_covariance(self, features: Tensor) -> Tensor:
        psi2 = (features.double() @ self.q_in).square()  # [N, in]
        m = psi2 @ self._prec_w().reciprocal().T  # [N, out] in G's eigenbasis
        if self.has_bias:
            m = m + self._prec_b().reciprocal()
        return (self.q_out * m.unsqueeze(1)) @ self.q_out.T  # Q diag(m_n) Qᵀ

    def output_variance(self, features: Tensor) -> Tensor:
        psi2 = (features.double() @ self.q_in).square()
        m = psi2 @ self._prec_w().reciprocal().T
        if self.has_bias:
            m = m + self._prec_b().reciprocal()
        return m @ self.q_out.square().T


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


BLOCKS: dict[str, type[LaplaceBlock]] = {"full": FullBlock, "kfac": KronBlock, "diag": DiagBlock}


class LaplaceLinear(SampledLinear):
    """The last layer of a Laplace network: a :class:`SampledLinear` drawing from its
    :class:`LaplaceBlock`, or, with ``probit=True``, no draws at all: every sample group gets
    the probit-scaled logits ``f / sqrt(1 + π/8 · diag(J Σ Jᵀ))`` (MacKay 1992), whose softmax
    is the probit approximation of the predictive class probabilities."""

    posterior: LaplaceBlock

    def __init__(self, linear: nn.Linear, posterior: LaplaceBlock, probit: bool = False) -> None:
        super().__init__(linear, posterior)
        self.probit = probit

    @property
    def _rotated(self) -> bool:
        """KFAC draws applied in the factors' eigenbases (no weight matrix per group)."""
        return isinstance(self.posterior, KronBlock) and not self.probit

    def begin_sampling(self, plan) -> None:  # noqa: ANN001 - SamplingPlan
        self._rotated_draws = False
        if not (self.probit or self._rotated) or plan.draw_for(self) is not None:
            super().begin_sampling(plan)  # weights per group (given, or drawn whole)
            return
        super(SampledLinear, self).begin_sampling(plan)  # the groups; draws below
        if self._rotated:
            self._block = self._draw = self.posterior.rotated_deltas(plan.samples, plan.generator)
            self._rotated_draws = True

    def select_groups(self, start: int, stop: int) -> None:
        if not self.probit:
            super().select_groups(start, stop)
            return
        super(SampledLinear, self).select_groups(start, stop)

    def group_bytes(self) -> int:
        return 0 if self.probit else super().group_bytes()

    def forward(self, x: Tensor) -> Tensor:
        if self.stochastic and self.probit:
            groups = self.groups
            rows = x.reshape(groups, -1, self.in_features)[0]  # every group: the same rows
            return probit_logits(self, rows).repeat(groups, 1).reshape(*x.shape[:-1], -1)
        if self.stochastic and getattr(self, "_rotated_draws", False) and self._draw is not None:
            return self._rotated_forward(x)
        return super().forward(x)

    def group_outputs(self, rows: Tensor) -> Tensor:
        """Every group's outputs for the same ``rows [n, in]`` (inside a sampling block, all
        of its groups selected): ``[G, n, out]``, the rows multiplied once, not once per group
        (what a forward over the ``[G*n, in]`` repeated rows gives, without the repeat)."""
        if self.probit:
            return probit_logits(self, rows).unsqueeze(0).expand(self.groups, -1, -1)
        if self._draw is None:
            raise RuntimeError("group_outputs needs an active sampling block")
        w, b = self._draw  # [G, out, in] (rotated or whole weights), [G, out]
        groups = w.shape[0]
        if getattr(self, "_rotated_draws", False):
            return self._rotated_rows(rows, groups).to(rows.dtype)
        # one product over every group's weights, as SampledLinear's float64 product
        flat = rows.double() @ w.double().reshape(-1, self.in_features).T  # [n, G*out]
        out = flat.unflatten(1, (groups, self.out_features)).transpose(0, 1)
        if b is not None:
            out = out + b.double().unsqueeze(1)
        return out.to(rows.dtype)

    def _rotated_rows(self, base: Tensor, groups: int) -> Tensor:
        """The rotated forward (:meth:`_rotated_forward`) of rows shared by every group
        (``base [n, in]``) or of each group's own (``base [G, n, in]``): float64 ``[G, n, out]``."""
        zs, db = self._draw  # [G, out, in], [G, out] float64
        block: KronBlock = self.posterior
        base = base.double()
        mean = base @ self.weight.double().T  # [(G,) n, out]
        if self.bias is not None:
            mean = mean + self.bias.double()
        psi = base @ block.q_in  # [(G,) n, in]
        if base.dim() == 2:  # one product over every group's draws: [n, in] @ [in, G*out]
            flat = psi @ zs.reshape(groups * self.out_features, self.in_features).T
            rot = flat.unflatten(1, (groups, self.out_features)).transpose(0, 1)  # [G, n, out]
        else:
            rot = torch.bmm(psi, zs.transpose(1, 2))
        out = mean + rot @ block.q_out.T  # [G, n, out]
        return out if self.bias is None else out + db.unsqueeze(1)

    def _rotated_forward(self, x: Tensor) -> Tensor:
        """``W φ + b + Q_out (Z_t ⊙ S)(Q_inᵀ φ) + Δb_t`` per group t: the input is rotated once
        per row (once per data row when every group holds the same rows, as behind a
        deterministic body), then each group costs ``out × in`` per row, as a plain product."""
        groups = self._draw[0].shape[0]
        rows = x.reshape(groups, -1, self.in_features)  # [G, n, in]
        shared = groups == 1 or torch.equal(rows, rows[:1].expand_as(rows))
        out = self._rotated_rows(rows[0] if shared else rows, groups)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def probit_logits(layer: LaplaceLinear, features: Tensor) -> Tensor:
    """``f / sqrt(1 + π/8 · var)`` for ``features [N, in]``: ``[N, out]``."""
    f = nn.functional.linear(features, layer.weight, layer.bias)
    var = layer.posterior.output_variance(features)
    return (f.double() / (1 + math.pi / 8 * var).sqrt()).to(f.dtype)
