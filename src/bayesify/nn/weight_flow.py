"""A normalizing-flow distribution over a vector of weights, and its ELBO fit.

``q(w)``: ``w = loc + scale ⊙ f(z)`` with ``z ~ N(0, I_D)`` and ``f`` a zuko flow (a neural
spline flow or RealNVP with coupling transforms, so drawing and the density each take one pass
of the flow's networks), or no flow at all (``kind="mean-field"``: a diagonal Gaussian, the
mean-field baseline fitted by the same code). ``loc`` starts at the weights the flow is put
around (a trained layer's), ``scale`` at ``init_scale``: the flow starts as a narrow blob
around them and learns its shape by maximising

    ELBO(q) = E_q[log p(D | w) + log p(w) − log q(w)]

with reparameterised draws (:func:`fit_elbo`). The base noise ``z`` is drawn from the caller's
generator, so a sampling block is reproducible and nothing touches torch's global RNG.

zuko is an optional dependency (the ``flows`` extra); it is imported when a flow is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from bayesify import extras
from bayesify.nn.stochastic import generator_device
from bayesify.options import FlowKind, parse_option

#: the one line shown when zuko is missing
#: draws pushed through the flow at once when sampling without gradients
DRAW_CHUNK = 1024
NEEDS_ZUKO = 'the flow posterior needs zuko: pip install -e ".[flows]"'


class MissingExtra(extras.MissingExtra, ValueError):
    """An optional dependency is not installed (one line naming the extra). A ``ValueError``
    too, so the command line shows it as one line wherever it reports bad options or bundles."""


def _zuko():  # noqa: ANN202
    try:
        import zuko
    except ImportError:
        raise MissingExtra(NEEDS_ZUKO) from None
    return zuko


class WeightFlow(nn.Module):
    """``q(w)`` over ``D = loc.numel()`` weights (see the module docstring).

    ``kind``: ``nsf`` (rational-quadratic spline couplings), ``realnvp`` (affine couplings) or
    ``mean-field`` (no flow); ``transforms`` coupling layers whose conditioners are MLPs with two
    hidden layers of ``hidden`` units; ``seed`` seeds their initialisation (torch's global RNG is
    left as it was).
    """

    def __init__(
        self,
        loc: Tensor,
        *,
        kind: FlowKind | str = FlowKind.NSF,
        transforms: int = 3,
        hidden: int = 64,
        init_scale: float = 1e-2,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.kind = parse_option(FlowKind, kind, option="flow")
        loc = loc.detach().reshape(-1)
        self.features = loc.numel()
        self.loc = nn.Parameter(loc.clone())
        self.log_scale = nn.Parameter(torch.full_like(loc, math.log(init_scale)))
        self.flow: nn.Module | None = None  # not a child module: see _hide
        self.layout: tuple[int, int, bool] = (1, self.features, False)  # see around_linear
        if self.kind is not FlowKind.MEAN_FIELD and self.features > 1:
            zuko = _zuko()
            # on CPU even where the caller builds on the meta device (a bundle's shape check):
            # zuko reads its masks' values while building; then the parameters' dtype
            with torch.random.fork_rng(devices=[]), torch.device("cpu"):
                torch.manual_seed(seed)
                make = zuko.flows.NSF if self.kind is FlowKind.NSF else zuko.flows.RealNVP
                extra = {"passes": 2} if self.kind is FlowKind.NSF else {}
                flow = make(self.features, transforms=transforms,
                            hidden_features=(hidden, hidden), **extra)  # fmt: skip
            self._hide(flow.to(dtype=loc.dtype, device=loc.device if not loc.is_meta else "cpu"))

    def _hide(self, flow: nn.Module) -> None:
        """Hold ``flow`` outside the module tree, its parameters registered here.

        The flow's conditioner networks are not layers of the network this posterior belongs
        to: kept as a child, their ``nn.Linear`` layers would count as the network's widest
        activation (``resolve_max_rows``) and their forwards over the T draws as data passes.
        Its parameters are this module's ``flow_params`` (the same tensors: in ``state_dict``
        and bundles, trained by the ELBO); its buffers (coupling masks, the base N(0, I)) are
        rebuilt by construction and moved with the module (:meth:`_apply`)."""
        self.flow_params = nn.ParameterList(list(flow.parameters()))
        object.__setattr__(self, "flow", flow)

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202
        super()._apply(fn, recurse)
        if self.flow is not None:  # its buffers (its parameters are ours, already moved)
            self.flow._apply(fn, recurse)
        return self

    @classmethod
    def around_linear(cls, weight: Tensor, bias: Tensor | None, **options: object) -> WeightFlow:
        """``q`` over a linear layer's ``weight [out, in]`` and ``bias [out]`` (flattened in that
        order), centred on them; :meth:`draw` gives them back in the layer's shapes."""
        flat = weight.detach().reshape(-1)
        if bias is not None:
            flat = torch.cat([flat, bias.detach().reshape(-1)])
        q = cls(flat, **options)  # type: ignore[arg-type]
        q.layout = (weight.shape[0], weight.shape[1], bias is not None)
        return q

    def split(self, w: Tensor) -> tuple[Tensor, Tensor | None]:
        """Flat draws ``[G, D]`` as a linear layer's ``(weights [G, out, in], biases [G, out])``
        (layout of :meth:`around_linear`)."""
        out, inp, has_bias = self.layout
        weights = w[:, : out * inp].reshape(-1, out, inp)
        return weights, (w[:, out * inp :] if has_bias else None)

    def draw(self, groups: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
        """``groups`` draws as a linear layer's weights and biases (the
        :class:`~bayesify.nn.sampled_linear.WeightPosterior` face), without gradients."""
        return self.split(self.sample(groups, generator))

    def transform(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Weights and their log density for base noise ``z [S, D]``: ``w [S, D]``,
        ``log q(w) [S]`` (differentiable in the flow's parameters)."""
        log_q = -0.5 * (z * z).sum(-1) - 0.5 * self.features * math.log(2 * math.pi)
        u = z
        if self.flow is not None:
            # the flow's forward direction draws (one pass of each autoregressive transform;
            # its inverse, which the density of given weights needs, takes `passes` passes)
            u, ladj = self.flow().transform.call_and_ladj(z)  # ladj of z -> u: [S]
            log_q = log_q - ladj
        w = self.loc + self.log_scale.exp() * u
        return w, log_q - self.log_scale.sum()

    def rsample_and_log_prob(
        self, samples: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """``samples`` draws ``w [S, D]`` and ``log q(w) [S]``, reparameterised; the base noise
        from ``generator`` (drawn on its device, then moved to the parameters')."""
        return self.transform(self._base_noise(samples, generator))

    def sample(self, samples: int, generator: torch.Generator | None = None) -> Tensor:
        """``samples`` draws ``[S, D]`` without gradients."""
        with torch.no_grad():
            z = self._base_noise(samples, generator)
            # the flow's networks over at most DRAW_CHUNK draws at a time (their activations)
            return torch.cat([self.transform(part)[0] for part in z.split(DRAW_CHUNK)])

    def _base_noise(self, samples: int, generator: torch.Generator | None) -> Tensor:
        """``z [S, D] ~ N(0, I)`` from ``generator`` (on its device), on the parameters' device."""
        z = torch.randn(
            samples, self.features, generator=generator, device=generator_device(generator),
            dtype=self.loc.dtype,
        )  # fmt: skip
        return z.to(self.loc.device)

    def log_prob(self, w: Tensor) -> Tensor:
        """``log q(w)`` for weights ``w [S, D]``: ``[S]``."""
        u = (w - self.loc) / self.log_scale.exp()
        z, ladj = u, torch.zeros(w.shape[:-1], dtype=w.dtype, device=w.device)
        if self.flow is not None:
            z, ladj = self.flow().transform.inv.call_and_ladj(u)
        base = -0.5 * (z * z).sum(-1) - 0.5 * self.features * math.log(2 * math.pi)
        return base + ladj - self.log_scale.sum()


def gaussian_log_prior(w: Tensor, sigma: float) -> Tensor:
    """``log N(w; 0, σ² I)`` summed over the last axis: ``w [S, D] -> [S]``."""
    d = w.shape[-1]
    return -0.5 * (w * w).sum(-1) / sigma**2 - d * (math.log(sigma) + 0.5 * math.log(2 * math.pi))


def fit_elbo(
    q: WeightFlow,
    log_joint: Callable[[Tensor], Tensor],
    *,
    steps: int,
    lr: float,
    samples: int,
    seed: int = 0,
    params: Iterable[nn.Parameter] = (),
) -> list[float]:
    """Maximise ``ELBO = E_q[log_joint(w) − log q(w)]`` by Adam on ``q``'s parameters (and
    ``params``, e.g. a learned noise scale that ``log_joint`` reads) for ``steps`` steps of
    ``samples`` reparameterised draws, the learning rate decayed along a half cosine to 0.
    ``log_joint(w [S, D]) -> [S]`` (log likelihood + log prior). Returns the negative ELBO per
    step. The draws come from a generator seeded with ``seed``."""
    opt = torch.optim.Adam([*q.parameters(), *params], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(steps, 1))
    g = torch.Generator(device=generator_device(None)).manual_seed(seed)
    losses = []
    for _ in range(steps):
        w, log_q = q.rsample_and_log_prob(samples, g)
        loss = (log_q - log_joint(w)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses
