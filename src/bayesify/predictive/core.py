"""The predictive distribution: Monte Carlo samples with the sample axis first.

Every method returns a :class:`Predictive`; metrics, plots, benchmarks and the server read it.

* Regression: per-sample predicted means ``[T, N]`` and an aleatoric noise variance (a scalar
  τ⁻¹, or per-sample ``[T, N]``). The predictive is the equal-weight Gaussian mixture over the
  T samples, so total variance = variance of the sample means (epistemic) + mean noise variance
  (aleatoric), by the law of total variance.
* Classification: per-sample class probabilities ``[T, N, C]``. Uncertainty splits into
  predictive entropy = expected entropy (aleatoric) + mutual information (epistemic).

Beyond moments, a regression predictive answers ``cdf(y)``, ``quantile(q)`` (exact mixture
quantiles by root finding), ``interval(level)`` and ``sample(n)``; a classification predictive
gives ``prediction_set(level)`` and ``sample(n)`` of labels. A classification predictive made
from logits keeps each sample's largest logit ``max_logits [T, N]``, from which it gives back the
logits ``[T, N, C]`` (:attr:`Predictive.logits`) and the logit-based out-of-distribution scores
(:meth:`Predictive.ood_score`, :mod:`~bayesify.predictive.ood`).

Multi-output regression is refused: a regression predictive has one output per row. D outputs
modelled independently are D one-output predictives (:meth:`Predictive.per_output`), which keeps
every score univariate and unambiguous (a joint log-likelihood over D outputs, or intervals with
simultaneous coverage, would each need their own choice), and the methods train and fit τ for one
output.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from bayesify.metrics import classification as cls_metrics
from bayesify.metrics import regression as reg_metrics
from bayesify.options import CRPSForm, Task, parse_option, shown
from bayesify.predictive import mixture, ood, sets


def _check_finite(name: str, t: Tensor) -> None:
    # a finite sum means every number is finite (a NaN or inf makes it NaN or inf); only a
    # sum that overflowed needs the element-wise check (one reduction instead of two ops)
    if not math.isfinite(float(t.sum())) and not torch.isfinite(t).all():
        bad = int((~torch.isfinite(t)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s)")


class Predictive:
    """Monte Carlo predictive distribution with the sample axis first.

    Build it with :meth:`regression`, :meth:`classification` or :meth:`from_logits` rather
    than the constructor. ``max_logits [T, N]``: each sample's largest logit (classification
    from logits; None where the samples are probabilities without logits).
    """

    def __init__(
        self,
        samples: Tensor,
        task: Task | str,
        noise_variance: Tensor | None = None,
        max_logits: Tensor | None = None,
    ):
        self.task = parse_option(Task, task, option="task")
        self.samples = samples
        self._noise_variance = noise_variance
        self.max_logits = max_logits

    # ------------------------------------------------------------------ construction
    @classmethod
    def regression(cls, means: Tensor, noise_variance: float | Tensor = 0.0) -> Predictive:
        """Regression predictive from per-sample means ``[T, N]``.

        ``noise_variance`` is the aleatoric variance τ⁻¹: a scalar, ``[N]`` or ``[T, N]``.
        """
        means = torch.as_tensor(means)
        if means.dim() == 3 and means.shape[-1] == 1:
            means = means.squeeze(-1)
        if means.dim() == 3:
            raise ValueError(
                f"a regression predictive has one output per row: samples [T, N] or [T, N, 1], "
                f"got {tuple(means.shape)}; for {means.shape[-1]} independent outputs use "
                "Predictive.per_output(means, noise_variance), one predictive per output"
            )
        if means.dim() != 2:
            raise ValueError(f"regression samples must have shape [T, N], got {tuple(means.shape)}")
        _check_finite("regression samples", means)
        nv = torch.as_tensor(noise_variance, dtype=means.dtype, device=means.device)
        if nv.dim() == 3 and nv.shape[-1] == 1:
            nv = nv.squeeze(-1)
        if nv.dim() > 0 and nv.shape not in (means.shape, means.shape[1:]):
            raise ValueError(
                f"noise_variance must be a scalar, [N] or [T, N] = {tuple(means.shape)}, "
                f"got {tuple(nv.shape)}"
            )
        _check_finite("noise_variance", nv)
        if (nv < 0).any():
            raise ValueError("noise_variance must be non-negative")
        return cls(means, Task.REGRESSION, nv)

    @classmethod
    def per_output(cls, means: Tensor, noise_variance: float | Tensor = 0.0) -> list[Predictive]:
        """D independent regression outputs: one predictive per output from means ``[T, N, D]``.

        ``noise_variance`` is a scalar, per output ``[D]``, or ``[N, D]`` / ``[T, N, D]``.
        """
        means = torch.as_tensor(means)
        if means.dim() != 3:
            raise ValueError(f"per_output takes means [T, N, D], got {tuple(means.shape)}")
        d = means.shape[-1]
        nv = torch.as_tensor(noise_variance, dtype=means.dtype, device=means.device)
        if nv.dim() == 0:
            return [cls.regression(means[..., k], nv) for k in range(d)]
        if nv.dim() > 3 or nv.shape != means.shape[3 - nv.dim() :]:
            raise ValueError(
                f"noise_variance must be a scalar, [D], [N, D] or [T, N, D] for means "
                f"{tuple(means.shape)}, got {tuple(nv.shape)}"
            )
        return [cls.regression(means[..., k], nv[..., k]) for k in range(d)]

    @classmethod
    def classification(cls, probs: Tensor) -> Predictive:
        """Classification predictive from per-sample class probabilities ``[T, N, C]``."""
        probs = torch.as_tensor(probs)
        if probs.dim() != 3:
            raise ValueError(
                f"classification samples must have shape [T, N, C], got {tuple(probs.shape)}"
            )
        _check_finite("class probabilities", probs)
        sums = probs.sum(-1)
        if (probs < 0).any() or not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
            raise ValueError("class probabilities must be non-negative and sum to 1 over C")
        return cls(probs, Task.CLASSIFICATION)

    @classmethod
    def from_logits(cls, logits: Tensor, *, keep_logits: bool = True) -> Predictive:
        """Classification predictive from per-sample logits ``[T, N, C]``. Only finiteness is
        checked: a softmax of finite logits is non-negative and sums to 1 (the checks of
        :meth:`classification` cost more than the softmax on one-row predictions).

        ``keep_logits``: keep each sample's largest logit ``[T, N]`` (1/C of the samples'
        memory), which with the probabilities gives back the logits (:attr:`logits`); False
        where ``logits`` are log probabilities rather than a network's outputs."""
        if not isinstance(logits, Tensor):
            logits = torch.as_tensor(logits)
        if logits.dim() != 3:
            raise ValueError(
                f"classification samples must have shape [T, N, C], got {tuple(logits.shape)}"
            )
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        _check_finite("class probabilities", probs)
        top = logits.detach().amax(-1).to(torch.float32) if keep_logits else None
        return cls(probs, Task.CLASSIFICATION, max_logits=top)

    # ------------------------------------------------------------------ basic shape
    @property
    def num_samples(self) -> int:
        """T, the number of Monte Carlo samples."""
        return self.samples.shape[0]

    def __len__(self) -> int:
        return self.samples.shape[1]

    def __repr__(self) -> str:
        return f"Predictive(task={self.task.value}, samples={tuple(self.samples.shape)})"

    def _require(self, task: Task, what: str) -> None:
        if self.task is not task:
            raise ValueError(f"{what} is defined for {task.value}, this predictive is {self.task}")

    # ------------------------------------------------------------------ moments
    @property
    def noise_variance(self) -> Tensor:
        """Aleatoric noise variance per sample, broadcast to ``[T, N]`` (regression)."""
        self._require(Task.REGRESSION, "noise_variance")
        return torch.broadcast_to(self._noise, self.samples.shape)

    @property
    def mean(self) -> Tensor:
        """Predictive mean: ``[N]`` (regression) or mean class probabilities ``[N, C]``."""
        return self.samples.mean(0)

    @property
    def epistemic_variance(self) -> Tensor:
        """Variance over samples of the predicted means / probabilities: ``[N]`` or ``[N, C]``."""
        return self.samples.var(0, unbiased=False)

    @property
    def aleatoric_variance(self) -> Tensor:
        """Expected per-sample variance: mean noise variance ``[N]``, or E_t[p(1-p)] ``[N, C]``."""
        if self.task is Task.REGRESSION:
            return self.noise_variance.mean(0)
        return (self.samples * (1 - self.samples)).mean(0)

    @property
    def variance(self) -> Tensor:
        """Total predictive variance (law of total variance): ``[N]`` or ``[N, C]``."""
        return self.epistemic_variance + self.aleatoric_variance

    @property
    def std(self) -> Tensor:
        """Total predictive standard deviation ``[N]`` (regression)."""
        self._require(Task.REGRESSION, "std")
        return self.variance.sqrt()

    # ------------------------------------------------------------------ information
    @property
    def entropy(self) -> Tensor:
        """Entropy of the mean class distribution (total uncertainty), nats ``[N]``."""
        self._require(Task.CLASSIFICATION, "entropy")
        return cls_metrics.entropy(self.mean)

    @property
    def expected_entropy(self) -> Tensor:
        """Mean over samples of each sample's entropy (aleatoric part), nats ``[N]``."""
        self._require(Task.CLASSIFICATION, "expected_entropy")
        return cls_metrics.expected_entropy(self.samples)

    @property
    def mutual_information(self) -> Tensor:
        """Entropy minus expected entropy (epistemic part), nats ``[N]``."""
        self._require(Task.CLASSIFICATION, "mutual_information")
        return cls_metrics.mutual_information(self.samples)

    @property
    def predicted_class(self) -> Tensor:
        """Arg-max of the mean class probabilities ``[N]``."""
        self._require(Task.CLASSIFICATION, "predicted_class")
        return self.mean.argmax(-1)

    @property
    def logits(self) -> Tensor:
        """Per-sample logits ``[T, N, C]``, given back from the probabilities and each sample's
        largest logit: ``log p + max_logit − log max p``. Exact to float32 rounding, save a
        class whose probability underflowed to 0 (a logit more than about 100 below the
        largest), which comes back as −inf. A ``ValueError`` where there are none."""
        self._require(Task.CLASSIFICATION, "logits")
        if self.max_logits is None:
            raise ValueError(
                "this predictive has no logits: its samples are class probabilities (made by "
                "Predictive.classification, or by a method whose outputs are not logits)"
            )
        logp = self.samples.log()
        return logp + (self.max_logits - logp.amax(-1)).unsqueeze(-1)

    def ood_score(self, name: str) -> Tensor:
        """The out-of-distribution score ``name`` per row ``[N]`` (float64; higher = more
        likely out of distribution); names in :data:`~bayesify.predictive.ood.PREDICTIVE_SCORES`
        (:mod:`~bayesify.predictive.ood`)."""
        return ood.ood_score(self, name)

    # ------------------------------------------------------------------ scores
    def _targets(self, y: Tensor) -> Tensor:
        y = torch.as_tensor(y, device=self.samples.device)
        if y.dim() == 2 and y.shape[-1] == 1:
            y = y.squeeze(-1)
        if y.shape != (len(self),):
            raise ValueError(f"targets must have shape [N] = [{len(self)}], got {tuple(y.shape)}")
        return y

    def log_prob(self, y: Tensor) -> Tensor:
        """Log predictive density (regression) or probability (classification) of ``y``: ``[N]``.

        The predictive is the mixture over samples: logsumexp over t of the per-sample
        likelihood minus log T (Gal's and Teye's PLL).
        """
        y = self._targets(y)
        if self.task is Task.REGRESSION:
            if (self._noise <= 0).any():
                raise ValueError("log_prob of a regression predictive needs noise_variance > 0")
            return reg_metrics.mixture_log_prob(self.samples, self._noise, y, reduction="none")
        classes = self.samples.shape[-1]
        labels = y.long()
        if (labels != y).any() or (labels < 0).any() or (labels >= classes).any():
            bad = y[(labels != y) | (labels < 0) | (labels >= classes)][:5].tolist()
            raise ValueError(f"class labels must be whole numbers in 0..{classes - 1}, got {bad}")
        logp = self.samples.clamp_min(torch.finfo(self.samples.dtype).tiny).log()
        picked = logp.gather(-1, labels.view(1, -1, 1).expand(self.num_samples, -1, 1))
        return torch.logsumexp(picked.squeeze(-1), 0) - math.log(self.num_samples)

    def crps(self, y: Tensor, form: CRPSForm | str = CRPSForm.MIXTURE) -> Tensor:
        """Continuous ranked probability score of ``y`` (regression, lower is better): ``[N]``.

        ``form="mixture"`` scores the Gaussian mixture over samples exactly;
        ``form="gaussian"`` scores a Gaussian with the same mean and total variance (Teye et al.).
        """
        self._require(Task.REGRESSION, "crps")
        y = self._targets(y)
        if parse_option(CRPSForm, form, option="form") is CRPSForm.GAUSSIAN:
            return reg_metrics.crps_gaussian(self.mean, self.std, y, reduction="none")
        return reg_metrics.crps_mixture(
            self.samples, self.noise_variance.sqrt(), y, reduction="none"
        )

    # ------------------------------------------------------------------ distribution queries
    def cdf(self, y: float | Tensor) -> Tensor:
        """P(Y ≤ y) under the regression mixture: ``y`` scalar or ``[N]`` -> ``[N]``; ``[K, N]``
        (K values per row) -> ``[K, N]``."""
        self._require(Task.REGRESSION, "cdf")
        y = torch.as_tensor(y, device=self.samples.device)
        if y.dim() > 2 or (y.dim() >= 1 and y.shape[-1] != len(self)):
            raise ValueError(
                f"y must be a scalar, [N] or [K, N] with N = {len(self)}, got {tuple(y.shape)}"
            )
        _check_finite("y", y)
        return mixture.mixture_cdf(self.samples, self._noise_std, y).to(self.samples.dtype)

    def quantile(self, q: float | Sequence[float] | Tensor) -> Tensor:
        """Exact quantiles of the regression mixture: ``q`` a float -> ``[N]``; ``K`` levels
        (a list or ``[K]`` tensor) -> ``[K, N]``. Levels must lie strictly inside (0, 1).

        Found by safeguarded Newton / bisection on the mixture CDF over all rows at once, to
        within 1e-12 of each row's bracket width (see
        :func:`~bayesify.predictive.mixture.mixture_quantile`).
        """
        self._require(Task.REGRESSION, "quantile")
        levels = torch.as_tensor(q, dtype=torch.float64)
        if levels.dim() > 1 or levels.numel() == 0:
            raise ValueError(f"q must be a float or a 1-D list of levels, got {shown(q)}")
        if not ((levels > 0) & (levels < 1)).all():
            raise ValueError(f"quantile levels must lie strictly between 0 and 1, got {shown(q)}")
        out = mixture.mixture_quantile(self.samples, self._noise_std, levels.reshape(-1))
        out = out.to(self.samples.dtype)
        return out[0] if levels.dim() == 0 else out

    def interval(self, level: float = 0.9) -> tuple[Tensor, Tensor]:
        """Equal-tailed prediction interval with probability ``level`` under the mixture:
        ``(lower [N], upper [N])`` = quantiles at (1 − level)/2 and (1 + level)/2."""
        self._require(Task.REGRESSION, "interval")
        if not isinstance(level, int | float) or not 0 < level < 1:
            raise ValueError(f"level must be a float strictly between 0 and 1, got {shown(level)}")
        lo, hi = self.quantile([(1 - level) / 2, (1 + level) / 2])
        return lo, hi

    def prediction_set(self, level: float = 0.9) -> Tensor:
        """Smallest set of classes whose mean probability reaches ``level``: bool ``[N, C]``
        (classes join by decreasing mean probability; the one that crosses ``level`` is in)."""
        self._require(Task.CLASSIFICATION, "prediction_set")
        if not isinstance(level, int | float) or not 0 < level <= 1:
            raise ValueError(f"level must be a float in (0, 1], got {shown(level)}")
        return sets.top_mass_set(self.mean, level)

    def sample(self, n: int, *, generator: torch.Generator | None = None) -> Tensor:
        """``n`` independent draws per row from the predictive: ``[n, N]`` targets (regression,
        from the mixture) or int64 labels (classification, from the mean class probabilities)."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {shown(n)}")
        if self.task is Task.CLASSIFICATION:
            return sets.sample_labels(self.mean, n, generator)
        return mixture.mixture_sample(self.samples, self._noise_std, n, generator)

    @property
    def _noise(self) -> Tensor:
        """The aleatoric variance of a regression predictive (``regression`` always sets it)."""
        if self._noise_variance is None:
            raise ValueError("this predictive has no noise variance (not made by regression)")
        return self._noise_variance

    @property
    def _noise_std(self) -> Tensor:
        return self._noise.sqrt()

    # ------------------------------------------------------------------ transforms
    def affine(self, loc: float | Tensor, scale: float | Tensor) -> Predictive:
        """Regression predictive of ``loc + scale * y`` (e.g. back to original target units)."""
        self._require(Task.REGRESSION, "affine")
        scale_t = torch.as_tensor(scale, dtype=self.samples.dtype, device=self.samples.device)
        return Predictive.regression(self.samples * scale_t + loc, self._noise * scale_t**2)

    def with_noise(self, noise_variance: float | Tensor) -> Predictive:
        """The same samples with another aleatoric noise variance (regression)."""
        self._require(Task.REGRESSION, "with_noise")
        return Predictive.regression(self.samples, noise_variance)

    def constant_uncertainty(self, variance: float) -> Predictive:
        """Constant-uncertainty baseline (CUBN / CUDO): the same mean, a fixed total variance.

        Returned as a one-sample predictive ``[1, N]`` whose noise variance is ``variance``.
        """
        self._require(Task.REGRESSION, "constant_uncertainty")
        return Predictive.regression(self.mean.unsqueeze(0), float(variance))

    def to(self, device: torch.device | str) -> Predictive:
        nv = None if self._noise_variance is None else self._noise_variance.to(device)
        top = None if self.max_logits is None else self.max_logits.to(device)
        return Predictive(self.samples.to(device), self.task, nv, top)

    def __getitem__(self, index: slice | Tensor) -> Predictive:
        """Select data points (the N axis), keeping all samples."""
        nv = self._noise_variance
        if nv is not None and nv.dim() > 0:
            nv = nv[..., index]
        top = None if self.max_logits is None else self.max_logits[:, index]
        return Predictive(self.samples[:, index], self.task, nv, top)
