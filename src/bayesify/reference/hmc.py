"""Full-batch NUTS (NumPyro's, compiled by JAX) over every parameter of a small network: the
reference posterior.

The model, for a network ``f_w`` with ``P`` parameters ``w`` (an ``nn.Module`` with no batch
norm, dropout or other buffers: its output depends on ``w`` and ``x`` only):

* prior ``w ~ N(0, prior_std² I)``; the default ``prior_std = 1/√5`` is the prior variance 1/5
  of Izmailov et al. 2021 (Table 3, HMC on CIFAR);
* regression: ``y_n ~ N(f_w(x_n), σ²)`` with one noise ``σ`` for every input, sampled with
  ``log σ ~ N(noise_prior_loc, noise_prior_scale²)`` (``noise_std=None``) or fixed;
* classification: ``y_n ~ Categorical(softmax(f_w(x_n)))``.

The network is an ``nn.Sequential`` of ``nn.Linear`` layers and elementwise activations; its
forward pass is rebuilt in JAX for the sampler (pyro's NUTS, the PyTorch-only choice, took
about 5.7 times as long on the 1-D toy: docs/fidelity.md), and the draws come
back as torch tensors in the order of ``net.named_parameters()``, so predictions run the torch
network itself (``torch.func.functional_call``).

Each of ``chains`` chains starts from its own random draw, moved towards a mode by
``init_steps`` full-batch Adam steps on the log posterior, then runs ``warmup`` NUTS steps
(step size and diagonal mass matrix adapted) and keeps every ``thin``-th of ``samples × thin``
steps. The chains run together in this process (NumPyro's vectorised chains: one compiled
program), from JAX keys split from ``seed``; JAX runs on the CPU with one thread unless
``XLA_FLAGS`` says otherwise.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bayesify.extras import MissingExtra
from bayesify.io import read_bundle, write_bundle
from bayesify.options import Task
from bayesify.predictive import Predictive

__all__ = ["HMCConfig", "HMCSamples", "MissingExtra", "sample_posterior"]

#: Izmailov et al. 2021, Table 3: HMC prior variance 1/5
IZMAILOV_PRIOR_STD = 1.0 / math.sqrt(5.0)


def require_extra() -> None:
    """One line naming the extra when numpyro or jax is not installed (imports neither)."""
    from importlib.util import find_spec

    if find_spec("numpyro") is None or find_spec("jax") is None:
        raise MissingExtra("the HMC reference needs numpyro and jax: pip install 'bayesify[hmc]'")


def _numpyro() -> Any:
    """NumPyro's MCMC module (JAX on the CPU, one thread); if absent, one line naming the extra."""
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                       "intra_op_parallelism_threads=1")  # fmt: skip
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import numpyro.infer  # noqa: F401
    except ImportError:
        raise MissingExtra(
            "the HMC reference needs numpyro and jax: pip install 'bayesify[hmc]'"
        ) from None
    return numpyro.infer


_ACTIVATIONS = ("ReLU", "Tanh", "Sigmoid", "GELU", "SiLU", "Identity")


@dataclass(frozen=True)
class HMCConfig:
    """The prior, the noise model and the sampler's settings (module docstring)."""

    prior_std: float = IZMAILOV_PRIOR_STD
    noise_std: float | None = None  # None: σ is sampled
    noise_prior_loc: float = 0.0  # log σ ~ N(loc, scale²)
    noise_prior_scale: float = 1.0
    chains: int = 4
    warmup: int = 200
    samples: int = 200  # kept per chain
    thin: int = 1
    max_tree_depth: int = 8
    target_accept: float = 0.8
    dense_mass: bool = False  # a dense mass matrix adapted in warm-up (else diagonal)
    init_steps: int = 300
    init_lr: float = 1e-2
    seed: int = 0

    def __post_init__(self) -> None:
        if min(self.chains, self.samples, self.thin, self.max_tree_depth) < 1:
            raise ValueError("chains, samples, thin and max_tree_depth must be >= 1")
        if min(self.warmup, self.init_steps) < 0:
            raise ValueError("warmup and init_steps must be >= 0")
        if self.prior_std <= 0 or (self.noise_std is not None and self.noise_std <= 0):
            raise ValueError("prior_std and noise_std must be positive")


def _check_net(net: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """The network's parameter names and shapes; it must be an ``nn.Sequential`` of
    ``nn.Linear`` layers and the activations in ``_ACTIVATIONS`` (its output then depends on the
    weights and the inputs only)."""
    layers = list(net) if isinstance(net, nn.Sequential) else [net]
    other = [type(m).__name__ for m in layers
             if not isinstance(m, nn.Linear) and type(m).__name__ not in _ACTIVATIONS]  # fmt: skip
    if other or not any(isinstance(m, nn.Linear) for m in layers):
        raise ValueError(
            "the HMC reference samples an nn.Sequential of nn.Linear layers and activations "
            f"({', '.join(_ACTIVATIONS)}); this network has {', '.join(other) or 'no Linear'}"
        )
    return [(n, tuple(p.shape)) for n, p in net.named_parameters()]


def _unflatten(theta: Tensor, shapes: list[tuple[str, tuple[int, ...]]]) -> dict[str, Tensor]:
    out, at = {}, 0
    for name, shape in shapes:
        size = math.prod(shape)
        out[name] = theta[at : at + size].view(shape)
        at += size
    return out


@dataclass
class HMCSamples:
    """Posterior draws: ``theta [C, S, P]`` flat network parameters (in ``shapes``' order) and,
    for regression, ``log_noise [C, S]`` (log σ; a constant when σ is fixed)."""

    theta: Tensor
    log_noise: Tensor | None
    shapes: list[tuple[str, tuple[int, ...]]]
    task: Task
    config: HMCConfig
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def chains(self) -> int:
        return int(self.theta.shape[0])

    def outputs(self, net: nn.Module, x: Tensor) -> Tensor:
        """The network's outputs for every draw: ``[C, S, N, out]``."""
        from torch.func import functional_call

        c, s, _ = self.theta.shape
        flat = self.theta.reshape(c * s, -1).to(x.dtype)
        with torch.no_grad():
            out = torch.stack([functional_call(net, _unflatten(t, self.shapes), (x,))
                               for t in flat])  # fmt: skip
        return out.reshape(c, s, *out.shape[1:])

    def predictive(self, net: nn.Module, x: Tensor, outputs: Tensor | None = None) -> Predictive:
        """The reference predictive at ``x [N, D]``, chains pooled (``T = C·S``)."""
        out = self.outputs(net, x) if outputs is None else outputs
        out = out.reshape(-1, *out.shape[2:])
        if self.task is Task.CLASSIFICATION:
            return Predictive.from_logits(out)
        assert self.log_noise is not None
        var = (2 * self.log_noise.reshape(-1, 1)).exp().to(out.dtype).expand(out.shape[:2])
        return Predictive.regression(out[..., 0], var)

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """A bundle folder: the draws as safetensors, config, seed and sampler stats as JSON."""
        tensors = {"theta": self.theta}
        if self.log_noise is not None:
            tensors["log_noise"] = self.log_noise
        config = {"kind": "hmc-reference", "task": self.task.value, "hmc": asdict(self.config),
                  "shapes": [[n, list(s)] for n, s in self.shapes], "stats": self.stats,
                  **(extra or {})}  # fmt: skip
        return write_bundle(path, tensors, json.loads(json.dumps(config)))

    @classmethod
    def load(cls, path: str | Path) -> HMCSamples:
        tensors, cfg = read_bundle(path)
        return cls(
            theta=tensors["theta"],
            log_noise=tensors.get("log_noise"),
            shapes=[(n, tuple(s)) for n, s in cfg["shapes"]],
            task=Task(cfg["task"]),
            config=HMCConfig(**cfg["hmc"]),
            stats=cfg.get("stats", {}),
        )


def _jax_forward(net: nn.Module) -> Any:
    """``(theta [P], x [N, D]) -> outputs [N, out]`` in JAX, the same function as ``net`` with
    its parameters taken from ``theta`` in ``named_parameters`` order."""
    import jax
    import jax.numpy as jnp

    acts = {"ReLU": jax.nn.relu, "Tanh": jnp.tanh, "Sigmoid": jax.nn.sigmoid,
            "GELU": lambda v: jax.nn.gelu(v, approximate=False), "SiLU": jax.nn.silu,
            "Identity": lambda v: v}  # fmt: skip
    plan: list[Any] = []
    at = 0
    for m in list(net) if isinstance(net, nn.Sequential) else [net]:
        if isinstance(m, nn.Linear):
            w = (at, at + m.in_features * m.out_features, (m.out_features, m.in_features))
            at = w[1]
            b = None
            if m.bias is not None:
                b, at = (at, at + m.out_features), at + m.out_features
            plan.append((w, b))
        else:
            plan.append(acts[type(m).__name__])

    def forward(theta: Any, x: Any) -> Any:
        h = x
        for step in plan:
            if callable(step):
                h = step(h)
                continue
            (w0, w1, shape), b = step
            h = h @ theta[w0:w1].reshape(shape).T
            if b is not None:
                h = h + theta[b[0] : b[1]]
        return h

    return forward


def _log_posterior(net: nn.Module, x: Tensor, y: Tensor, task: Task, cfg: HMCConfig) -> Any:
    """``theta [P (+1: log σ)] -> log p(theta | data)`` up to a constant, in JAX."""
    import jax
    import jax.numpy as jnp

    forward = _jax_forward(net)
    n_weights = sum(p.numel() for p in net.parameters())
    noise = task is Task.REGRESSION and cfg.noise_std is None
    xj = jnp.asarray(x.detach().float().numpy())
    if task is Task.CLASSIFICATION:
        yj = jnp.asarray(y.long().numpy())
    else:
        yj = jnp.asarray(y.detach().float().numpy())
    fixed = math.log(cfg.noise_std) if cfg.noise_std is not None else 0.0

    def log_post(theta: Any) -> Any:
        w = theta[:n_weights]
        out = forward(w, xj)
        lp = -0.5 * jnp.sum(w**2) / cfg.prior_std**2
        if task is Task.CLASSIFICATION:
            logp = jax.nn.log_softmax(out, axis=-1)
            return lp + jnp.sum(jnp.take_along_axis(logp, yj[:, None], axis=1))
        log_s = theta[n_weights] if noise else fixed
        if noise:
            lp = lp - 0.5 * ((log_s - cfg.noise_prior_loc) / cfg.noise_prior_scale) ** 2
        r = (yj - out[:, 0]) * jnp.exp(-log_s)
        return lp - 0.5 * jnp.sum(r**2) - yj.shape[0] * log_s

    return log_post, n_weights, noise


def _initial_point(log_post: Any, size: int, cfg: HMCConfig, key: Any, noise: bool) -> Any:
    """A random draw (prior scale; log σ at its prior location) moved by ``init_steps`` Adam
    steps uphill on the log posterior."""
    import jax
    import jax.numpy as jnp

    theta = jax.random.normal(key, (size,)) * cfg.prior_std
    if noise:
        theta = theta.at[-1].set(cfg.noise_prior_loc)
    grad = jax.grad(lambda t: -log_post(t))
    b1, b2, eps = 0.9, 0.999, 1e-8

    def step(i: Any, state: Any) -> Any:
        t, m, v = state
        g = grad(t)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        mh, vh = m / (1 - b1 ** (i + 1)), v / (1 - b2 ** (i + 1))
        return t - cfg.init_lr * mh / (jnp.sqrt(vh) + eps), m, v

    zeros = jnp.zeros_like(theta)
    return jax.lax.fori_loop(0, cfg.init_steps, step, (theta, zeros, zeros))[0]


def sample_posterior(
    net: nn.Module, x: Tensor, y: Tensor, task: Task | str, config: HMCConfig | None = None
) -> HMCSamples:
    """NUTS draws from the posterior of ``net``'s parameters given ``x [N, D]``, ``y [N]``
    (real targets, or class labels for classification)."""
    infer = _numpyro()
    import jax
    import numpy as np

    cfg = config or HMCConfig()
    task = Task(task)
    shapes = _check_net(net)
    log_post, n_weights, noise = _log_posterior(net, x, y, task, cfg)
    size = n_weights + int(noise)
    kernel = infer.NUTS(potential_fn=lambda t: -log_post(t), target_accept_prob=cfg.target_accept,
                        max_tree_depth=cfg.max_tree_depth, dense_mass=cfg.dense_mass)  # fmt: skip
    t0 = time.perf_counter()
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), 2 * cfg.chains)
    init = jax.jit(jax.vmap(lambda k: _initial_point(log_post, size, cfg, k, noise)))
    start = init(keys[: cfg.chains])
    mcmc = infer.MCMC(kernel, num_warmup=cfg.warmup, num_samples=cfg.samples,
                      thinning=cfg.thin, num_chains=cfg.chains, chain_method="vectorized",
                      progress_bar=False)  # fmt: skip
    # one chain: NumPyro takes its start without the chain axis
    mcmc.run(keys[cfg.chains], init_params=start if cfg.chains > 1 else start[0],
             extra_fields=("diverging", "accept_prob", "num_steps"))  # fmt: skip
    extra = {k: np.asarray(v) for k, v in mcmc.get_extra_fields(group_by_chain=True).items()}
    step = np.asarray(mcmc.last_state.adapt_state.step_size).reshape(-1)
    per_chain = [
        {"step_size": float(step[c]), "divergences": int(extra["diverging"][c].sum()),
         "accept": float(extra["accept_prob"][c].mean()),
         "steps": float(extra["num_steps"][c].mean())}
        for c in range(cfg.chains)
    ]  # fmt: skip
    theta = torch.from_numpy(np.array(mcmc.get_samples(group_by_chain=True), dtype=np.float32))
    stats = {"chains": per_chain, "seconds": round(time.perf_counter() - t0, 2)}
    log_noise = None
    if task is Task.REGRESSION:
        fixed = math.log(cfg.noise_std or 1.0)
        log_noise = (theta[..., n_weights].contiguous() if noise
                     else torch.full(theta.shape[:2], fixed))  # fmt: skip
    return HMCSamples(theta[..., :n_weights].contiguous(), log_noise, shapes, task, cfg,
                      stats)  # fmt: skip
