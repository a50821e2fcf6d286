"""The paper recipes: one :class:`Preset` per method and name, as each paper states it.

:mod:`bayesify.methods.core.presets` looks them up and applies them; ``docs/fidelity.md`` says,
per paper, what each preset restores and why our defaults differ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    """A named recipe: ``config`` overrides, ``fit`` keyword arguments, ``from_pretrained``
    keyword arguments (where the paper fine-tunes a trained net), the prediction sample count
    the paper uses (``samples``; None: not stated), and the source."""

    method: str
    name: str
    source: str
    config: dict[str, Any] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)
    from_pretrained: dict[str, Any] = field(default_factory=dict)
    samples: int | None = None


#: SWAG's paper recipe (Maddox et al. 2019), which MultiSWAG runs per member
_SWAG_CONFIG: dict[str, Any] = {
    "rank": 20,
    "scale": 0.5,
    "schedule": "constant",
    "swag_lr": 0.01,
    "swag_optimizer": "sgd",
    "swag_epochs": 140,
    "swag_momentum": 0.9,
    "swag_weight_decay": 5e-4,
    "collect_every": 0,
}
_SWAG_FIT: dict[str, Any] = {
    "optimizer": "sgd",
    "lr": 0.05,
    "weight_decay": 5e-4,
    "batch_size": 128,
    "epochs": 160,
}

#: every preset, in registry order of its method (presets.py indexes them by (method, name))
RECIPES = [
    Preset(
        "mcbn",
        "paper",
        "Teye, Azizpour & Smith 2018, §4.3 and their code (UCI regression)",
        # one bank batch per MC sample (T = 500); τ by CRPS (one τ for PLL and CRPS)
        config={"bank_size": 500, "noise_objective": "crps"},
        # Adam 1e-3, batch 32 (their grid 32…1024 and weight decay are chosen by CV; see
        # `bayesify bench uci --protocol teye --preset paper`), early stopping up to 2000
        # epochs; patience of 10 checks × 20 epochs
        fit={"optimizer": "adam", "lr": 1e-3, "batch_size": 32, "epochs": 2000, "patience": 200},
        samples=500,
    ),
    Preset(
        "mc-dropout",
        "paper",
        "Gal & Ghahramani 2016, UCI experiments (commonly published recipe)",
        # p = 0.05 from their grid {0.005, 0.01, 0.05, 0.1}; prior length-scale 1e-2 gives the
        # weight decay λ = l²(1 − p) / (2Nτ); τ fitted on validation data by PLL
        config={"p": 0.05, "length_scale": 1e-2, "noise_objective": "pll"},
        fit={"optimizer": "adam", "lr": 1e-3, "batch_size": 128, "epochs": 40},
        samples=10_000,
    ),
    Preset(
        "bbb",
        "paper",
        "Blundell et al. 2015, Weight Uncertainty in Neural Networks (commonly published recipe)",
        # scale-mixture prior π = 1/2, σ1 = e⁰, σ2 = e⁻⁶; minibatch KL weight 1/M (constant);
        # one weight sample per mini-batch for convolutions
        config={
            "prior": "mixture",
            "mixture_pi": 0.5,
            "mixture_sigma1": 1.0,
            "mixture_sigma2": 0.0024787521766663585,
            "kl_schedule": "constant",
            "conv_estimator": "shared",
        },  # fmt: skip
        fit={"optimizer": "sgd", "lr": 1e-3, "batch_size": 128, "epochs": 600},
    ),
    Preset(
        "ensemble",
        "paper",
        "Lakshminarayanan, Pritzel & Blundell 2017, Deep Ensembles (commonly published recipe)",
        # M = 5 members from random initialisations and shuffles; Adam
        config={"members": 5},
        fit={"optimizer": "adam", "lr": 1e-3, "batch_size": 100, "epochs": 40},
    ),
    Preset(
        "ibnn",
        "paper",
        "Trinh, Heinonen, Acerbi & Kaski, implicit BNNs: Table 2 (VGG-16, CIFAR-10) and §3.3",
        config={
            "components": 4,
            "train_samples": 2,
            "mu_init_std": 0.75,
            "prior_std": 0.3,
            "sigma_init": 0.05,
            "sigma_init_std": 0.02,
            "variational_lr": 1.2,
            "kl_anneal": 200 / 300,
        },  # fmt: skip
        # SGD with momentum 0.9; λ0 = 0.05 for the weights, weight decay 5e-4 on the weights
        # only; 300 epochs of batch 128; β annealed over the first 200 epochs
        fit={
            "optimizer": "sgd",
            "lr": 0.05,
            "weight_decay": 5e-4,
            "batch_size": 128,
            "epochs": 300,
        },  # fmt: skip
        samples=5 * 4,  # 5 per component
    ),
    Preset(
        "ibnn",
        "paper-pretrained",
        "Trinh et al., appendix: ResNet-50 from pretrained weights",
        # prior N(1, 0.1) read as standard deviation 0.1; λ1 = 0.2 for the node posterior
        config={
            "components": 4,
            "train_samples": 2,
            "prior_std": 0.1,
            "variational_lr": 0.2,
            "sigma_init": 0.05,
            "sigma_init_std": 0.02,
        },  # fmt: skip
        fit={"optimizer": "sgd", "lr": 1e-4, "batch_size": 256, "epochs": 15},
        # the weights fine-tuned at 1e-4 for 15 epochs
        from_pretrained={"finetune_lr": 1e-4, "epochs": 15, "batch_size": 256},
        samples=5 * 4,
    ),
    Preset(
        "stochastic-norm",
        "paper",
        "Shekhovtsov & Flach 2018, §3.5 and appendix (CIFAR-10)",
        # every layer normalised (output included), learned noise with N(1, 10²) prior, s and b
        # initialised from the data so that x̂ starts with unit variance
        config={"noise": "learned", "skip_last": False, "data_init": True, "prior_std": 10.0},
        # SGD with momentum 0.9, batch 32 (their grid search); 1200 epochs with a decaying lr
        fit={"optimizer": "sgd", "lr": 0.01, "batch_size": 32, "epochs": 1200},
    ),
    Preset(
        "laplace",
        "paper",
        "Daxberger et al. 2021, Laplace Redux: laplace-torch 0.3 defaults (paper not at hand)",
        # post-hoc on a trained network: last layer, KFAC GGN, prior precision by the marginal
        # likelihood (and homoscedastic regression's σ²), the GLM predictive with the probit
        # link (classification)
        config={
            "subset": "last-layer",
            "hessian": "kfac",
            "prior_fit": "marglik",
            "predictive": "glm",
            "noise_fit": "marglik",  # σ² by the marginal likelihood, in posterior and noise
        },  # fmt: skip
    ),
    Preset(
        "tta",
        "paper",
        "Ashukha et al. 2020, Pitfalls of In-Domain Uncertainty Estimation: TTA with the "
        "training augmentations (the paper text is not in our sources: the common CIFAR "
        "policy, random crops of 4-pixel padding and horizontal flips)",
        # random crop after 4-pixel padding (ours pads by reflection) and a flip with p = 1/2
        config={"transforms": "flip,crop:4"},
    ),
    Preset(
        "swag",
        "paper",
        "Maddox, Garipov, Izmailov, Vetrov & Wilson 2019, SWAG (CIFAR recipe of the paper and "
        "its code, recalled: not checked against the paper's text here)",
        # K = 20 deviation columns, covariance scale 1/2, constant rate, one snapshot per
        # epoch, SGD with momentum 0.9 and weight decay 5e-4 (VGG-16), SWAG from epoch 161 of
        # 300 at rate 0.01; 30 samples at test time
        config=_SWAG_CONFIG,
        fit=_SWAG_FIT,
        samples=30,
    ),
    Preset(
        "multiswag",
        "paper",
        "Wilson & Izmailov 2020, MultiSWAG: SWAG's recipe per member (Maddox et al. 2019), "
        "members mixed with equal weights (recalled: not checked against the paper's text)",
        config={"members": 3, **_SWAG_CONFIG},
        fit=_SWAG_FIT,
        samples=30,
    ),
]

RECIPES.append(
    Preset(
        "flow",
        "paper",
        "Durkan et al. 2019 (neural spline flows) as zuko builds them; no paper states a "
        "last-layer flow recipe, so this preset is the method's defaults with more ELBO steps",
        # 3 spline couplings with conditioners of 2 x 64 units (zuko's NSF defaults), prior
        # N(0, 1); the ELBO run four times longer than the default, with 16 draws per step
        config={
            "flow": "nsf",
            "transforms": 3,
            "hidden": 64,
            "prior_sigma": 1.0,
            "elbo_steps": 4000,
            "elbo_samples": 16,
        },  # fmt: skip
    )
)

RECIPES.append(
    Preset(
        "vcl",
        "paper",
        "Nguyen, Li, Bui & Turner 2018, VCL: the Permuted MNIST recipe of the authors' code "
        "(github.com/nvcuong/variational-continual-learning, ddm/run_permuted.py and "
        "ddm/alg/cla_models_multihead.py)",
        # prior N(0, 1), posterior log-variance -6 at the start (sigma = e^-3), a random coreset
        # of 200 rows per task; Adam at 1e-3, batches of 256, 100 epochs a task, 100 draws per
        # prediction. Split MNIST there: full-batch steps, 120 epochs, coreset 40 (bench preset)
        config={
            "prior_sigma": 1.0,
            "init_rho": math.log(math.expm1(math.exp(-3.0))),
            "coreset": "random",
            "coreset_size": 200,
        },  # fmt: skip
        fit={"lr": 1e-3, "batch_size": 256, "epochs": 100},
        samples=100,
    )
)

RECIPES.append(
    Preset(
        "batch-ensemble",
        "paper",
        "Wen, Tran & Ba 2020 (ICLR) as the authors' code runs it (edward2's "
        "experimental/batchensemble and uncertainty-baselines' batchensemble.py: num_models 4, "
        "random_sign_init -0.5, fast_weight_lr_multiplier 0.5, inputs tiled M times in "
        "training, 'version2')",
        # 4 members, fast weights N(1, 0.5²) (random_sign_init -0.5) trained at half the rate
        # and spared the weight decay (fast_weight_lr_multiplier 0.5, L2 on slow weights and
        # biases only), every member on the whole mini-batch: our defaults. Not restored: their
        # SGD schedule on CIFAR/ImageNet
        config={
            "members": 4,
            "init": "normal",
            "init_std": 0.5,
            "member_batch": "repeat",
            "fast_lr": 0.5,
        },
        samples=4,
    )
)

RECIPES.append(
    Preset(
        "evidential-regression",
        "paper",
        "Amini, Schwarting, Soleimany & Rus 2020 (NeurIPS), deep evidential regression as the "
        "authors' code runs its cubic toy (github.com/aamini/evidential-deep-learning, "
        "hello_world.py: EvidentialRegression(coeff=1e-2), Adam at 5e-4, batches of 100, 500 "
        "epochs)",
        # coeff 0.01 is our default too; the paper's UCI and depth runs tune lambda per task
        config={"coeff": 0.01},
        fit={"lr": 5e-4, "batch_size": 100, "epochs": 500},
    )
)

RECIPES.append(
    Preset(
        "vbll",
        "paper",
        "Harrison, Willes & Snoek 2024 (ICLR), Variational Bayesian Last Layers, as the authors' "
        "layers run by default (VectorInstitute/vbll: dense covariance, prior_scale 1, "
        "wishart_scale 1, dof 1, regularization_weight 1/N, the Jensen softmax bound)",
        # the noise starts at std e^-1 (their noise_logdiag ~ N(-1, 1), here its median);
        # not restored: the random start of the covariance (log-std ~ N(-½ log D, 1)), their
        # networks and optimiser settings per experiment
        config={
            "covariance": "dense",
            "prior_scale": 1.0,
            "wishart_scale": 1.0,
            "dof": 1.0,
            "kl_weight": 1.0,
            "init_noise_variance": 0.1353352832366127,
            "refit_noise": False,  # the paper's predictive uses the learned noise
        },  # fmt: skip
    )
)

RECIPES.append(
    Preset(
        "evidential-classification",
        "paper",
        "Sensoy, Kaplan & Kandemir 2018 (NeurIPS), evidential classification: ReLU evidence, "
        "the expected squared error (eq. 5), the KL weight min(1, t/10) over epochs t, Adam "
        "with L2 0.005 (the authors' LeNet recipe)",
        # 50 epochs is our choice of length (not stated with the recipe): the paper's 10-epoch
        # ramp is then kl_warmup 0.2
        config={"evidence": "relu", "loss": "mse", "kl_warmup": 0.2, "kl_weight": 1.0},
        fit={"lr": 1e-3, "weight_decay": 0.005, "epochs": 50},
    )
)

RECIPES.append(
    Preset(
        "ddu",
        "paper",
        "Mukhoti, Kirsch, van Amersfoort, Torr & Gal 2023 (CVPR) as the authors' code trains "
        "it (omegafragger/DDU: utils/args.py, spectral_norm_fc.py, gmm_utils.py): bound c = 3, "
        "one power iteration per step, SGD lr 0.1, momentum 0.9, weight decay 5e-4, batch 128, "
        "350 epochs, the smallest covariance jitter from 0",
        # (our SGD has momentum 0.9). Not restored: the lr steps (/10 at epochs 150 and 250),
        # which the one loop does not have; their ResNet with its convolution-operator bound
        config={"spectral_norm": True, "coefficient": 3.0, "power_iterations": 1, "jitter": 0.0},
        fit={"optimizer": "sgd", "lr": 0.1, "weight_decay": 5e-4, "batch_size": 128, "epochs": 350},
        samples=1,
    )
)

RECIPES.append(
    Preset(
        "sngp",
        "paper",
        "Liu et al. 2020 (NeurIPS) §3, as uncertainty-baselines' cifar/sngp.py runs it "
        "(spec_norm_bound 6, spec_norm_iteration 1, gp_hidden_dim 1024, gp_scale 1, "
        "gp_cov_ridge_penalty 1, gp_cov_discount_factor -1, Gaussian-likelihood covariance); "
        "the paper's mean-field λ = π/8",
        # not restored: the 128-dim random projection and LayerNorm before the GP layer,
        # orthogonal random features, the tuned mean-field factor (25 for CIFAR-10) and their
        # SGD schedule (docs/fidelity.md)
        config={
            "spec_norm_bound": 6.0,
            "power_iterations": 1,
            "num_features": 1024,
            "lengthscale": 1.0,
            "ridge": 1.0,
            "cov_momentum": 0.0,
            "cov_weighting": "gaussian",
            "prediction": "mean-field",
            "mean_field_factor": math.pi / 8,
        },
        samples=1,
    )
)

RECIPES.append(
    Preset(
        "packed-ensemble",
        "paper",
        "Laurent et al. 2023 (ICLR) as the authors' torch-uncertainty configs run it on CIFAR-10 "
        "(resnet18/packed.yaml: num_estimators 4, alpha 2, gamma 2, SGD lr 0.05, momentum 0.9, "
        "weight decay 5e-4, batch 128, 75 epochs)",
        # not restored: Nesterov momentum, the step schedule (x0.1 at epochs 25 and 50), mixed
        # precision, and the authors' floor of 64 input channels per group (gamma lowered below it)
        config={"members": 4, "alpha": 2.0, "gamma": 2},
        fit={"optimizer": "sgd", "lr": 0.05, "weight_decay": 5e-4, "batch_size": 128, "epochs": 75},
        samples=4,
    )
)
