"""The Laplace approximation (MacKay 1992; Ritter et al. 2018; Daxberger et al. 2021,
"Laplace Redux"): a Gaussian ``N(θ*, (s·H + δ·I)⁻¹)`` around the trained weights θ*, with ``H``
the generalised Gauss-Newton matrix of the training log-likelihood.

* ``subset="last-layer"`` (the default for classification): the last ``nn.Linear`` becomes a
  :class:`~bayesify.nn.laplace_posterior.LaplaceLinear`; the body runs once per input row and the
  T draws of the last layer share it. ``hessian`` full, kfac (default) or diag. For a last
  layer the linearised (GLM) and the sampled predictives are the same Gaussian over outputs
  (the layer is linear in its weights), ``N(W φ + b, J Σ Jᵀ)`` for features φ, so both are
  drawn in output space: C normals per sample and row from the row's own key (rows are
  independent draws; the samples of a row do not depend on chunking). Classification draws
  the logits so by default (``link="mc"``), so the samples disagree and carry the mutual
  information; ``link="probit"`` (laplace-torch's default) draws nothing and gives every sample
  the probit-scaled logits, whose softmax is the probit approximation (mutual information 0).
* ``subset="all"`` (the default for regression, where the last layer's spread is nearly the
  same for every input: its variance is σ² times the input's leverage in a linear regression
  on the features): every ``nn.Linear`` and ``nn.Conv2d`` (hessian kfac or diag; batch norm in
  eval mode, its scale and shift kept at their MAP values). ``predictive="glm"`` draws
  ``f(x) + J(x) Δ_t`` by forward-mode differentiation (``torch.func.jvp``), ``"sampled"`` runs
  ``f(x; θ* + Δ_t)``; both vectorised over the T draws (``torch.func.vmap``).
* The prior precision δ maximises the marginal likelihood (closed form in δ, bisection on
  log δ; :mod:`.laplace_prior`) or the validation NLL over a grid. Homoscedastic regression's
  noise σ² also scales the posterior (``s = 1/σ²``): the marginal likelihood's, or with
  validation data (``noise_fit="validation"``, the default) the one whose posterior and noise
  score best there, δ refitted at each. Heteroscedastic regression (``likelihood=
  "heteroscedastic"``) uses the Fisher of (mean, variance) as the output curvature.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from bayesify.methods.core.base import Method
from bayesify.methods.core.inputs import check_samples
from bayesify.methods.laplace.config import LaplaceConfig
from bayesify.methods.laplace.curvature import (
    DataTerm,
    PosteriorLayer,
    all_layer_curvature,
    last_layer_curvature,
    layer_shape,
    posterior_layers,
)
from bayesify.methods.laplace.layers import all_layer_deltas, all_layer_forward
from bayesify.methods.laplace.prior import Evidence, fit_evidence, log_marglik
from bayesify.methods.laplace.validation import fit_noise as validation_noise
from bayesify.methods.laplace.validation import grid_prior
from bayesify.nn import check_sample_bytes, chunk_plan, sampling
from bayesify.nn.laplace_posterior import BLOCKS, LaplaceBlock, LaplaceLinear
from bayesify.nn.modes import eval_mode
from bayesify.nn.net_facts import prefix_of
from bayesify.nn.sampled_linear import last_linear
from bayesify.options import (
    LaplaceNoise,
    LaplaceSubset,
    PriorFit,
    Task,
)
from bayesify.train import Data, as_loader


class Laplace(Method):
    """Laplace approximation around a trained network: ``Laplace.from_pretrained(net, train,
    task="classification")`` fits the posterior on ``train`` (the network is copied)."""

    name = "laplace"
    Config = LaplaceConfig
    config: LaplaceConfig

    def _prepare(self, net: nn.Module) -> None:
        cfg = self.config
        block_cls = BLOCKS[cfg.hessian.value]
        self.evidence: Evidence | None = None
        if cfg.subset is LaplaceSubset.LAST_LAYER:
            parent, name, linear = last_linear(net)
            block = block_cls(linear.out_features, linear.in_features, linear.bias is not None)
            block.set_mean(linear.weight, linear.bias)
            new = LaplaceLinear(linear, block, probit=cfg.probit)
            new = new.to(linear.weight.device).train(linear.training)
            setattr(parent, name, new)
            self.layer: LaplaceLinear | None = new
            self.blocks: list[tuple[PosteriorLayer, LaplaceBlock]] = [(new, new.posterior)]
        else:
            self.layer = None
            self.blocks = []
            for layer in posterior_layers(net):
                block = block_cls(*layer_shape(layer)).to(layer.weight.device)
                block.set_mean(layer.weight.reshape(layer.weight.shape[0], -1), layer.bias)
                layer.laplace = block  # a child of the layer: in its state_dict, not its forward
                self.blocks.append((layer, block))
            if not self.blocks:
                raise ValueError("subset='all' needs nn.Linear or nn.Conv2d layers; found none")

    @property
    def spread_hint(self) -> str:  # type: ignore[override]
        if self.config.probit:
            return "use link='mc' (the probit link gives every sample the same probabilities)"
        return (f"set a lower prior_precision (now {self.prior_precision:.3g}) or "
                "subset='all'")  # fmt: skip

    # ------------------------------------------------------------------ fitting
    def _from_pretrained(
        self,
        train: Data | None,
        val: Data | None,
        *,
        batch_size: int | None,
        seed: int,
        progress: bool,
    ) -> None:
        """Fit the posterior on ``train`` (GGN and prior precision), then τ⁻¹ on ``val`` for
        regression; ``prior_fit="grid"`` chooses δ on ``val``."""
        if train is None:
            raise ValueError(
                "Laplace.from_pretrained needs the training data (train=...): the posterior's "
                "curvature is a sum over it"
            )
        train = self._checked_data(train, "training inputs")
        self.fit_posterior(train, batch_size=batch_size, val=val, seed=seed)
        self._fit_noise_on(val, seed)
        if val is not None:
            self.check_spread_on(val, seed=seed)

    def fit(self, train: Data, val: Data | None = None, **kwargs: Any) -> Laplace:
        """Train the network (the MAP, as :meth:`Method.fit`), then fit the posterior on
        ``train`` (``prior_fit="grid"`` chooses δ on ``val``)."""
        self._fit_val = val
        try:
            return super().fit(train, val, **kwargs)
        finally:
            self._fit_val = None

    def _after_fit(self, train: Data, batch_size: int, seed: int) -> None:
        self.fit_posterior(train, batch_size=batch_size, val=getattr(self, "_fit_val", None),
                           seed=seed)  # fmt: skip

    def fit_posterior(
        self, train: Data, *, batch_size: int | None = None, val: Data | None = None, seed: int = 0
    ) -> Laplace:
        """The GGN over ``train`` at the current weights, then δ (and σ²) by ``prior_fit``."""
        cfg = self.config
        if cfg.prior_fit is PriorFit.GRID and cfg.prior_precision is None and val is None:
            raise ValueError("prior_fit='grid' chooses the prior precision on validation data: "
                             "pass val=...")  # fmt: skip
        loader = as_loader(train, batch_size or 256, shuffle=False, seed=seed)
        for layer, block in self.blocks:
            block.set_mean(layer.weight.reshape(layer.weight.shape[0], -1), layer.bias)
        het = cfg.heteroscedastic
        if self.layer is not None:
            term = last_layer_curvature(self.net, self.layer, self.layer.posterior, loader,
                                        cfg.task, het, self.device)  # fmt: skip
        else:
            term = all_layer_curvature(self.net, self.blocks, loader, cfg.task, het, self.device)
        self._term = term
        self._fit_prior(term, val, seed)
        return self

    @property
    def _gaussian_noise(self) -> bool:
        return self.config.task is Task.REGRESSION and not self.config.heteroscedastic

    def eigenvalues(self) -> Tensor:
        """Eigenvalues of the (unscaled) GGN over every block: ``[P]`` float64."""
        return torch.cat([b.eigenvalues().cpu() for _, b in self.blocks])

    def _sq_norm(self) -> float:
        return float(sum(b.mean_sq_norm().cpu() for _, b in self.blocks))

    def _set(self, prior_precision: float, noise_variance: float | None) -> None:
        for _, block in self.blocks:
            block.prior_precision.fill_(prior_precision)
            block.scale.fill_(1.0 if noise_variance is None else 1.0 / noise_variance)
        if noise_variance is not None:
            self.noise_variance = noise_variance

    def _fit_prior(self, term: DataTerm, val: Data | None, seed: int) -> None:
        cfg = self.config
        eig, sq = self.eigenvalues(), self._sq_norm()
        gaussian = self._gaussian_noise
        ev = fit_evidence(term, eig, sq, gaussian)
        if cfg.prior_precision is not None:
            d = cfg.prior_precision
            ev = Evidence(d, ev.noise_variance, log_marglik(term, eig, sq, d, ev.noise_variance))
        self._set(ev.prior_precision, ev.noise_variance)
        if cfg.prior_fit is PriorFit.GRID and cfg.prior_precision is None:
            assert val is not None  # fit_posterior refuses the grid without it
            d = grid_prior(self, *self._tensors(val), seed)
            ev = Evidence(d, ev.noise_variance, log_marglik(term, eig, sq, d, ev.noise_variance))
            self._set(d, ev.noise_variance)
        self.evidence = ev

    def _fit_noise_variance(self, means: Tensor, xv: Tensor, yv: Tensor, seed: int) -> Tensor:
        """σ² scales the posterior too (``s = 1/σ²``): see :func:`.validation.fit_noise`."""
        if self.config.noise_fit is LaplaceNoise.MARGLIK:
            return means  # the marginal likelihood's σ², set with the posterior
        return validation_noise(self, xv, yv, seed)

    def log_marginal_likelihood(
        self, prior_precision: float | None = None, noise_variance: float | None = None
    ) -> float:
        """The Laplace log marginal likelihood of the training data at δ (default: the fitted
        one) and σ² (homoscedastic regression; default: the fitted one)."""
        term = getattr(self, "_term", None)
        if term is None:
            raise RuntimeError("fit the posterior first (from_pretrained, fit or fit_posterior)")
        d = self.prior_precision if prior_precision is None else prior_precision
        var = None
        if self._gaussian_noise:
            var = noise_variance
            if var is None:
                assert self.evidence is not None  # fitted with _term
                var = self.evidence.noise_variance
        return log_marglik(term, self.eigenvalues(), self._sq_norm(), d, var)

    @property
    def prior_precision(self) -> float:
        """The prior precision δ in use."""
        return float(self.blocks[0][1].prior_precision)

    # ------------------------------------------------------------------ GLM moments
    def glm(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The last layer's linearised predictive in closed form: mean ``[N, C]`` and
        covariance ``[N, C, C]`` of the outputs (logits, or regression means; float64)."""
        if self.layer is None:
            raise ValueError("glm() is the last-layer closed form; subset='all' samples it")
        x = self._check_inputs(x)
        feats: list[Tensor] = []
        handle = self.layer.register_forward_pre_hook(lambda _m, a: feats.append(a[0]))
        try:
            with eval_mode(self.net), torch.no_grad():
                mean = self.net(x)
        finally:
            handle.remove()
        phi = feats[-1].reshape(len(x), -1)
        return mean.double(), self.layer.posterior.output_covariance(phi)

    # ------------------------------------------------------------------ all-layer pass
    def _draw_samples(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int = 0,
        max_bytes: int | None = None,
    ) -> Tensor:
        if self.layer is not None:
            fast = self._last_layer_pass(x, samples, generator, max_rows, start, max_bytes)
            if fast is not None:
                return fast
            return super()._draw_samples(x, samples, generator, max_rows, start, max_bytes)
        deltas = self._all_layer_deltas(samples, generator)
        ranges, per_chunk = chunk_plan(samples, len(x), max_rows)
        out: Tensor | None = None
        for a, b in ranges:
            sub = {k: v[a:b] for k, v in deltas.items()}
            row = 0
            for chunk in torch.split(x, per_chunk):
                y = self._all_layer_forward(chunk, sub)  # [G, n, ...]
                if out is None:
                    out = y.new_empty((samples, len(x), *y.shape[2:]))
                out[a:b, row : row + len(chunk)] = y
                row += len(chunk)
        assert out is not None  # samples >= 1 and at least one chunk (x.split never gives none)
        return out

    def _last_layer_pass(
        self,
        x: Tensor,
        samples: int,
        generator: torch.Generator | None,
        max_rows: int | None,
        start: int,
        max_bytes: int | None,
    ) -> Tensor | None:
        """The one pass when the Laplace layer is the net's last child behind a deterministic
        body: the body runs once per data row (blocks of G·n rows, as in
        :func:`~bayesify.nn.forward_in_chunks`) and the layer gives all T groups' outputs of
        each block's feature rows at once (no ``[T·n, in]`` repeat): ``[T, N, out]``. None
        where that does not apply (other nets, groups split into ranges, hooks on the layer)."""
        layer = self.layer
        net, k = self.net, len(self.net) - 1 if isinstance(self.net, nn.Sequential) else -1
        if layer is None or k < 1 or net[k] is not self.layer or start not in (0, k):
            return None
        if layer._forward_hooks or layer._forward_pre_hooks:
            return None  # the layer's forward runs (over the repeated rows) for its hooks
        # start 0: called from sample(), which has just walked the modules (no second walk)
        facts = self._facts_cache().last or self._net_facts()
        if not start and prefix_of(net, facts) != k:
            return None
        n = x.shape[0]
        ranges, per_chunk = chunk_plan(samples, n, max_rows)
        if len(ranges) > 1:
            return None
        body = [] if start else list(net.children())[:k]  # what net[:k] runs, not rebuilt
        out: Tensor | None = None
        row = 0
        # the layer is the net's only stochastic module (the body is deterministic): its
        # sampling block alone, not a walk over every module to begin and end
        # (it holds no other stochastic module: the layers are given, no walk of its modules)
        with sampling(layer, samples, generator, layers=(layer,)):
            step = per_chunk * samples
            for block in (x,) if n <= step else torch.split(x, step):
                h = block
                for module in body:
                    h = module(h)
                m = h.shape[0]
                y = layer.group_outputs(h.reshape(m, -1))  # [T, m, out]
                if out is None:
                    check_sample_bytes(samples, n, y.shape[-1], y.element_size(),
                                       layer.group_bytes(), max_bytes)  # fmt: skip
                    if m == n and y.is_contiguous():
                        return y  # one block: the layer's fresh outputs are the samples
                    out = y.new_empty((samples, n, y.shape[-1]))
                out[:, row : row + m] = y
                row += m
        return out

    def reference_samples(
        self, x: Tensor, samples: int, generator: torch.Generator | None = None
    ) -> Tensor:
        if self.layer is not None:
            return super().reference_samples(x, samples, generator)
        x, _ = self._sample_inputs(x, samples, None, None)
        samples = check_samples(samples)
        deltas = self._all_layer_deltas(samples, generator)
        with eval_mode(self.net), torch.no_grad():
            outs = [self._all_layer_forward(x, {k: v[t : t + 1] for k, v in deltas.items()})[0]
                    for t in range(samples)]  # fmt: skip
        return torch.stack(outs)

    def _all_layer_deltas(
        self, samples: int, generator: torch.Generator | None
    ) -> dict[str, Tensor]:
        return all_layer_deltas(self.net, self.blocks, samples, generator)

    def _all_layer_forward(self, x: Tensor, deltas: dict[str, Tensor]) -> Tensor:
        return all_layer_forward(self.net, x, deltas, self.config.predictive)

    # ------------------------------------------------------------------ bundles
    def extra_state(self) -> dict[str, Any]:
        ev = self.evidence
        if ev is None:
            return {}
        return {"prior_precision": ev.prior_precision, "noise_variance": ev.noise_variance,
                "log_marglik": ev.log_marglik}  # fmt: skip

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("prior_precision") is not None:
            self.evidence = Evidence(float(state["prior_precision"]),
                                     state.get("noise_variance"),
                                     float(state.get("log_marglik", float("nan"))))  # fmt: skip
