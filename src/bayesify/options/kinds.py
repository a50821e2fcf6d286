"""Every named choice the library takes, as a ``StrEnum``: a plain string works wherever a member
does (``task="regression"`` or ``Task.REGRESSION``), and every member carries a docstring that the
reference docs show."""

from __future__ import annotations

from enum import StrEnum


class Task(StrEnum):
    """What the network predicts."""

    REGRESSION = "regression"
    """Real targets ``[N]``: per-sample means ``[T, N]`` plus aleatoric noise τ⁻¹."""
    CLASSIFICATION = "classification"
    """Class labels ``[N]``: per-sample class probabilities ``[T, N, C]``."""


class NoiseProtocol(StrEnum):
    """How the regression noise τ⁻¹ and the constant-uncertainty baseline are fitted on
    validation data (:mod:`bayesify.posthoc.noise`, :class:`bayesify.bench.scores.NoiseFit`)."""

    TEYE = "teye"
    """Teye et al. 2018: one τ per model fitted by CRPS inside the authors' per-dataset range and
    used for PLL and CRPS alike; the baseline's constant variance fitted by CRPS in that range."""
    BAYESIFY = "bayesify"
    """A τ per metric (PLL and CRPS each fit their own) over a wide range, and the baseline's
    variance for PLL as the mean squared error."""


class Likelihood(StrEnum):
    """The regression noise model of a method (``MethodConfig.likelihood``)."""

    HOMOSCEDASTIC = "homoscedastic"
    """One noise variance τ⁻¹ for every input, fitted on validation data."""
    HETEROSCEDASTIC = "heteroscedastic"
    """A variance predicted per input by the network (outputs ``[N, 2]``: mean, variance)."""


class CRPSForm(StrEnum):
    """Which predictive distribution :meth:`Predictive.crps` scores."""

    MIXTURE = "mixture"
    """The exact Gaussian mixture over the T samples."""
    GAUSSIAN = "gaussian"
    """One Gaussian with the mixture's mean and total variance (Teye et al. 2018)."""


class Reduction(StrEnum):
    """How a metric aggregates its per-point values."""

    MEAN = "mean"
    """The mean over points (a 0-dim tensor)."""
    SUM = "sum"
    """The sum over points (a 0-dim tensor)."""
    NONE = "none"
    """Keep one value per point (``[N]``)."""


class OODPositive(StrEnum):
    """Which set is the positive class of :func:`bayesify.metrics.aupr`."""

    OUT = "out"
    """Out-of-distribution points are positives; a higher score means more likely out."""
    IN = "in"
    """In-distribution points are positives (scores are negated)."""


class NoiseObjective(StrEnum):
    """What a regression noise level is fitted for on validation data: τ⁻¹ of a Monte Carlo
    predictive (:func:`bayesify.posthoc.noise.fit_noise_variance`, ``MethodConfig.noise_objective``)
    and the constant σ of the constant-uncertainty baseline
    (:func:`bayesify.metrics.fit_constant_std`).

    The default is :attr:`PLL` everywhere: a τ fitted for CRPS can shrink to ~0 when the
    epistemic spread alone scores well, and the mixture PLL of near-delta samples is then
    meaningless. Teye et al. (2018) fit for CRPS; their protocol asks for :attr:`CRPS` by name.
    """

    CRPS = "crps"
    """Minimise the CRPS of the moment-matched Gaussian (Teye et al. 2018)."""
    PLL = "pll"
    """Maximise the predictive log likelihood (the sample mixture's; for a constant σ the
    closed form ``σ² = mean (y - mean)²``)."""


# ---------------------------------------------------------------- data, models, training
class SplitProtocol(StrEnum):
    """Which train/test splits :func:`bayesify.data.load_uci` uses."""

    GAL = "gal"
    """The 20 fixed 90/10 splits (5 for protein) of Hernández-Lobato & Adams / Gal &
    Ghahramani, read from the index files."""
    TEYE = "teye"
    """Teye et al.'s 5 random 80/20 splits (legacy numpy generator seeded ``split + 1``)."""


class Norm(StrEnum):
    """Normalisation after each hidden linear layer of :func:`bayesify.models.mlp`."""

    BATCH = "batch"
    """``BatchNorm1d`` (what MCBN samples)."""
    NONE = "none"
    """No normalisation."""


class OptimizerName(StrEnum):
    """The optimiser of the training loop."""

    ADAM = "adam"
    """``torch.optim.Adam`` (weight decay, if any, added to the gradient)."""
    ADAMW = "adamw"
    """``torch.optim.AdamW`` (decoupled weight decay)."""
    SGD = "sgd"
    """``torch.optim.SGD`` with momentum."""


class BatchNormMode(StrEnum):
    """Where batch norm takes its batch statistics from in data-parallel training."""

    REPLICA = "replica"
    """Each replica's own mini-batch (the default)."""
    SYNC = "sync"
    """``SyncBatchNorm``: statistics of the global batch."""


# ---------------------------------------------------------------- methods and their layers
class Statistics(StrEnum):
    """Where MCBN's per-sample batch statistics come from."""

    BANK = "bank"
    """Recorded statistics of real training mini-batches (Teye et al. 2018)."""
    GAUSSIAN = "gaussian"
    """Drawn from their large-sample law given the running statistics; needs no training data
    at prediction."""


class BankDraw(StrEnum):
    """How MCBN chooses the bank rows (training mini-batches) of a prediction's T samples."""

    ROW = "row"
    """Each data row gets its own random ordering of the bank: its T samples use distinct bank
    rows (whole-bank cycles beyond the bank size), independent of every other row's."""
    CALL = "call"
    """One draw of T bank rows per call, shared by every data row of it (Teye et al.'s Algorithm
    1 run once over the whole batch): the rows' scores move together with the call's seed."""


class PriorKind(StrEnum):
    """The weight prior of Bayes by Backprop."""

    GAUSSIAN = "gaussian"
    """``N(0, σ²)``."""
    MIXTURE = "mixture"
    """The scale mixture ``π N(0, σ1²) + (1 - π) N(0, σ2²)`` (Blundell et al. 2015)."""


class KLSchedule(StrEnum):
    """How Bayes by Backprop's KL weight β grows with training progress in [0, 1)."""

    CONSTANT = "constant"
    """β = 1 throughout."""
    LINEAR = "linear"
    """β rises linearly from 0 to 1 over the first ``kl_warmup`` of training, then stays 1."""
    COSINE = "cosine"
    """β rises along a half cosine over the first ``kl_warmup`` of training."""
    CYCLIC = "cyclic"
    """The linear ramp repeated in each of ``kl_cycles`` cycles (Fu et al. 2019)."""


class ConvEstimator(StrEnum):
    """The training noise of Bayes by Backprop's convolutions."""

    SHARED = "shared"
    """One weight sample per mini-batch: one convolution."""
    FLIPOUT = "flipout"
    """Per-row noise by flipout (Wen et al. 2018): twice the convolutions."""


class ScaleNoise(StrEnum):
    """The noise of StochasticNorm's per-channel scale."""

    LEARNED = "learned"
    """A learned σ per channel (or layer), trained by the variational objective."""
    BN = "bn"
    """Fixed "noise like BN": multiplicative and additive Gaussian noise per row and
    channel (Shekhovtsov & Flach, eq. 7)."""
    NONE = "none"
    """No noise: a deterministic normalised network."""


class SigmaPer(StrEnum):
    """Whether StochasticNorm learns one σ per channel or one per layer."""

    CHANNEL = "channel"
    """One σ per channel."""
    LAYER = "layer"
    """One σ shared by the layer's channels."""


# ---------------------------------------------------------------- Laplace
class LaplaceSubset(StrEnum):
    """Which weights the Laplace approximation puts a Gaussian on."""

    LAST_LAYER = "last-layer"
    """The last ``nn.Linear`` only; the body stays at its trained weights and runs once."""
    ALL = "all"
    """Every ``nn.Linear`` and ``nn.Conv2d``; batch norm and other parameters stay at MAP."""


class HessianStructure(StrEnum):
    """The structure of Laplace's generalised Gauss-Newton matrix."""

    FULL = "full"
    """The whole matrix over the layer (last layer only: its size is the square of its
    weights)."""
    KFAC = "kfac"
    """Kronecker factors per layer, weight and bias blocks apart (Ritter et al. 2018)."""
    DIAG = "diag"
    """The diagonal."""


class PriorFit(StrEnum):
    """How Laplace chooses its prior precision δ."""

    MARGLIK = "marglik"
    """Maximise the Laplace marginal likelihood of the training data (closed form in δ;
    homoscedastic regression fits σ² with it)."""
    GRID = "grid"
    """The δ of a log grid 1e-4 .. 1e4 with the best validation NLL (needs validation data)."""


class LaplaceNoise(StrEnum):
    """Where Laplace's noise variance σ² comes from (homoscedastic regression): one value
    scales the posterior (``s = 1/σ²`` on the GGN) and is the predictive's noise."""

    VALIDATION = "validation"
    """Chosen on the validation data when given (the predictive's validation loss, by
    ``noise_objective``), δ by ``prior_fit`` at each σ²; without validation data, the marginal
    likelihood's."""
    MARGLIK = "marglik"
    """The marginal likelihood's, validation data or not. Over all layers with KFAC or a
    diagonal it can be far too large: their log-determinant counts more well-determined
    parameters than the data can determine, and σ² = SSE / (N − γ) grows with that count."""


class LaplacePredictive(StrEnum):
    """How Laplace turns its weight posterior into predictions."""

    GLM = "glm"
    """The network linearised in its weights (Immer et al. 2021): a Gaussian over outputs."""
    SAMPLED = "sampled"
    """The network itself at weights drawn from the posterior."""


class Link(StrEnum):
    """How Laplace's Gaussian over logits becomes class probabilities (classification, GLM)."""

    PROBIT = "probit"
    """The probit approximation ``softmax(f / sqrt(1 + π/8 var))``: no draws, every sample the
    same (mutual information 0); last layer only."""
    MC = "mc"
    """T draws of the logits, softmax of each."""


class FlowKind(StrEnum):
    """The distribution of the flow posterior's last-layer weights."""

    NSF = "nsf"
    """A neural spline flow: rational-quadratic spline coupling layers (Durkan et al. 2019)."""
    REALNVP = "realnvp"
    """RealNVP: affine coupling layers (Dinh et al. 2017)."""
    MEAN_FIELD = "mean-field"
    """No flow: a diagonal Gaussian fitted by the same ELBO (the mean-field baseline)."""


class SwagSchedule(StrEnum):
    """The learning rate of SWAG's SGD while it collects weight snapshots."""

    CONSTANT = "constant"
    """``swag_lr`` throughout; a snapshot every ``collect_every`` steps (Maddox et al. 2019)."""
    CYCLIC = "cyclic"
    """Down from ``swag_lr`` to ``swag_lr_min`` linearly in each cycle of ``collect_every``
    steps, a snapshot at each cycle's end (Izmailov et al. 2018)."""


class SwagBatchNorm(StrEnum):
    """Where SWAG's batch-norm statistics come from for each weight sample."""

    RECOMPUTE = "recompute"
    """Recomputed for every sample from the training rows the bundle stores (``bn_rows``), as
    Maddox et al. recompute them per sample."""
    SWA = "swa"
    """Those of each member's SWA mean, computed once on the same rows and shared by its
    samples: no extra rows per call."""


class CoresetKind(StrEnum):
    """How variational continual learning picks each task's coreset (Nguyen et al. 2018)."""

    NONE = "none"
    """No coreset: prediction uses the propagated posterior itself."""
    RANDOM = "random"
    """A uniformly random subset of the task's training rows."""
    K_CENTER = "k-center"
    """Greedy k-center in input space: start from a random row, then add the row farthest from
    the rows already chosen."""


class Augment(StrEnum):
    """The inputs a distilled student learns from besides the training inputs themselves."""

    MIXUP = "mixup"
    """Convex blends ``λ x_i + (1 - λ) x_j`` of two random training inputs, λ ~ U(0, 1)."""
    NOISE = "noise"
    """Training inputs plus Gaussian noise of standard deviation ``noise`` (network input
    units; the default, σ = 1)."""
    NONE = "none"
    """The training inputs alone."""
    OUTLIERS = "outliers"
    """On images: a noise copy, then copies whose class semantics are destroyed (patch and
    pixel shuffles, rotations, inversions, heavy zooms, noise; the teacher labels them and its
    samples disagree there); on other inputs, noise copies."""


class FastWeightInit(StrEnum):
    """How BatchEnsemble's per-member fast weights ``r_i``, ``s_i`` start (Wen et al. 2020)."""

    NORMAL = "normal"
    """Each entry drawn from N(1, init_std²): members start near the shared weight, apart."""
    SIGN = "sign"
    """Each entry a random sign, +1 or -1 with probability 1/2."""


class MemberBatch(StrEnum):
    """Which rows of a training mini-batch each BatchEnsemble member sees."""

    REPEAT = "repeat"
    """Every member sees every row: the mini-batch is repeated M times in one pass."""
    SPLIT = "split"
    """The mini-batch is cut into M equal parts, one per member (rows beyond a multiple of M
    are left out of that step)."""


class Evidence(StrEnum):
    """How an evidential classifier turns its logits into non-negative evidence e (the
    Dirichlet's concentrations are ``alpha = e + 1``; Sensoy et al. 2018)."""

    RELU = "relu"
    """``max(logit, 0)``, the paper's: a class with a negative logit has no evidence at all."""
    SOFTPLUS = "softplus"
    """``log(1 + exp(logit))``: smooth, every class keeps a little evidence and a gradient."""
    EXP = "exp"
    """``exp(logit)`` (logits clamped at 30 first): evidence grows fastest with the logit."""


class EvidentialLoss(StrEnum):
    """The data term of an evidential classifier, per row, under p ~ Dir(alpha) with
    ``S = sum(alpha)`` (Sensoy et al. 2018, eq. 3-5)."""

    MSE = "mse"
    """The expected squared error ``E||y - p||²`` (eq. 5), the paper's choice."""
    DIGAMMA = "digamma"
    """The Bayes risk of cross-entropy ``E[-log p_y] = psi(S) - psi(alpha_y)`` (eq. 4)."""
    LOG = "log"
    """The negative log marginal likelihood ``log S - log alpha_y`` (eq. 3, type II maximum
    likelihood)."""


class VBLLCovariance(StrEnum):
    """How VBLL parametrises the covariance ``S_k`` of each output's last-layer weights."""

    DENSE = "dense"
    """A full covariance through its Cholesky factor: ``S_k = L_k L_kᵀ`` (D² numbers per output)."""
    DIAGONAL = "diagonal"
    """Independent weights: ``S_k`` diagonal (D numbers per output)."""
    LOWRANK = "lowrank"
    """A diagonal plus ``rank`` directions: ``S_k = diag + U_k U_kᵀ`` (D·(rank + 1) per output)."""


class GPPrediction(StrEnum):
    """How SNGP's random-feature GP output layer gives its T samples (Liu et al. 2020)."""

    SAMPLED = "sampled"
    """T draws of the logits from their Gaussian posterior N(φβᵀ, φΣφᵀ): the spread of the
    draws carries the GP variance into the predictive (mutual information, epistemic share)."""
    MEAN_FIELD = "mean-field"
    """The paper's: one deterministic pass, the logits scaled by 1/√(1 + λ·φΣφᵀ), repeated T
    times. The GP variance flattens the probabilities (entropy), the samples agree (MI zero)."""


class GPCovWeighting(StrEnum):
    """How each training row weighs in SNGP's posterior precision ``s·I + Σ_i w_i φ_i φ_iᵀ``."""

    GAUSSIAN = "gaussian"
    """w_i = 1: the Gaussian likelihood's Laplace precision (edward2's and the authors'
    experiments' default, for any number of classes)."""
    LOGISTIC = "logistic"
    """w_i = p̂_i(1 - p̂_i), p̂_i the row's largest class probability: the paper's eq. (9)
    for the logistic likelihood; confident rows weigh little, so the posterior shrinks less."""
