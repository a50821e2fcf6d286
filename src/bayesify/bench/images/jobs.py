"""The jobs of ``bayesify bench images``: the presets, one job per method, model and seed, and
its training and scoring (the options and the run are :mod:`bayesify.bench.images.command`'s).
Module constants, not job fields, keep the stored rows' keys."""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bayesify.bench.images import digits
from bayesify.bench.images import scores as sc
from bayesify.bench.method_defaults import KEY, defaults_record

log = logging.getLogger(__name__)

EXPERIMENT = "images"
DATASET = "fashion-mnist"
MODELS = ("lenet", "resnet")
METHODS = ("deterministic", "mc-dropout", "mcbn", "ensemble", "bbb", "ibnn", "stochastic-norm",
           "laplace", "laplace-sampled", "laplace-torch", "tta", "mc-dropout-tta",
           "swag", "multiswag", "ddu", "sngp", "vbll", "evidential-classification",
           "batch-ensemble", "packed-ensemble")  # fmt: skip
#: (model, method) pairs that cannot run, skipped by the command: Packed-Ensembles packs an
#: nn.Sequential of plain layers, and the ResNet's residual blocks would mix its members
UNSUPPORTED = {("resnet", "packed-ensemble")}
#: test-time augmentation (Ashukha et al. 2020) over the network of another method, without
#: retraining: "tta" on the deterministic network, "mc-dropout-tta" on the MC dropout one
TTA_OVER = {"tta": "deterministic", "mc-dropout-tta": "mc-dropout"}
TTA_TRANSFORMS = "flip,shift:2"
#: methods whose network is the deterministic batch-norm network of the same seed
SHARED_NET = ("deterministic", "mcbn", "ensemble")
ENSEMBLE_SEED_STRIDE = 1000
#: methods whose trained networks are kept in the checkpoint folder (MC dropout's for the MC
#: dropout + TTA rows)
CHECKPOINTED = (*SHARED_NET, "mc-dropout")
#: SWAG / MultiSWAG (``job.members`` trajectories) from the deterministic network: SGD at a
#: constant rate for SWAG_EPOCHS passes over the first SWAG_TRAIN_ROWS training rows (a random
#: subset: the training part is a permutation), 10 snapshots per pass (K = 20 columns); sized
#: for a shared 2-core CPU. Module constants, not job fields: the stored rows keep their keys
SWAG_EPOCHS, SWAG_LR, SWAG_SNAPSHOTS_PER_EPOCH, SWAG_TRAIN_ROWS = 2, 0.01, 10, 6400


@dataclass(frozen=True)
class Preset:
    """A preset's models, methods and protocol (every job field except method/model/seed)."""

    models: tuple[str, ...]
    methods: tuple[str, ...]
    seeds: int
    epochs: int
    patience: int
    samples: int
    n_calib: int  # validation images the temperature is fitted on
    n_ood: int  # MNIST test images (0: all 10,000)
    n_corrupt: int  # test images corrupted at every level
    gammas: tuple[float, ...]
    ps: tuple[float, ...]
    bank_batches: tuple[int, ...]
    members: int
    bank_size: int = 64  # MCBN's bank: training mini-batches recorded


_LEVELS = tuple(round(0.1 * k, 1) for k in range(11))
PRESETS = {
    "quick": Preset(("lenet",), ("deterministic", "mc-dropout", "mcbn", "ensemble"), 1, 3, 1, 10,
                    1000, 2000, 500, (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                    (0.0, 0.1, 0.2, 0.4, 0.7, 1.0), (16, 128, 1024), 3),
    "paper": Preset(MODELS, METHODS, 3, 100, 5, 50, 5000, 0, 2000, _LEVELS, _LEVELS,
                    (16, 32, 64, 128, 256, 512, 1024), 5),
}  # fmt: skip


@dataclass(frozen=True)
class ImagesJob:
    """One row of the store: a method on a model trained with one seed."""

    method: str
    dataset: str
    split: int  # the training/validation split of the training images
    seed: int  # weights, batches and sampling
    model: str = "lenet"
    epochs: int = 3
    patience: int = 1
    batch_size: int = 128
    lr: float = 1e-3
    n_val: int = 5000
    n_calib: int = 1000
    n_test: int = 0  # Fashion-MNIST test images (0: all 10,000)
    n_ood: int = 2000
    n_corrupt: int = 500
    samples: int = 10
    gammas: tuple[float, ...] = (0.0, 0.5, 1.0)
    ps: tuple[float, ...] = (0.0, 0.5, 1.0)
    bank_batches: tuple[int, ...] = (16, 128)
    bank_size: int = 64
    members: int = 3
    dropout: float = 0.5
    n_train: int = 0  # training images after the validation part (0: all the rest)


# ---------------------------------------------------------------------------------- data
@functools.lru_cache(maxsize=2)
def _data(split: int, n_val: int, n_train: int, n_test: int, n_ood: int) -> dict[str, Any]:
    from bayesify.data import load_fashion_mnist, load_mnist

    full = load_fashion_mnist("train")
    perm = torch.randperm(len(full), generator=torch.Generator().manual_seed(split))
    val, rest = perm[:n_val], perm[n_val:]
    if n_train:
        rest = rest[:n_train]
    test = load_fashion_mnist("test")
    ood = load_mnist("test")
    test = test.subset(n_test, seed=split) if n_test else test
    ood = ood.subset(n_ood, seed=split) if n_ood else ood
    return {
        "train": (full.x[rest], full.y[rest]),
        "val": (full.x[val], full.y[val]),
        "test": (test.x, test.y),
        "ood": ood.x,
        digits.NAME: digits.load_digits_ood(n_ood, seed=split),  # the second OOD set
    }


# ---------------------------------------------------------------------------------- networks
CLS = {"task": "classification"}


def _factory(model: str, norm: str | None = "batch") -> nn.Module:
    from bayesify.models import lenet, resnet

    if model == "lenet":
        return lenet(norm=norm)
    if model == "resnet":
        return resnet()
    raise ValueError(f"unknown model {model!r}; valid: {', '.join(MODELS)}")


def _build(method: str, job: ImagesJob) -> Any:
    """A fresh, untrained method for ``job`` (the net drawn with ``job.seed``)."""
    import bayesify
    from bayesify.seeding import seeded

    cls = CLS
    with seeded(job.seed):
        if method == "deterministic":
            return bayesify.Deterministic(_factory(job.model), **cls)
        if method == "mc-dropout":
            return bayesify.MCDropout(_factory(job.model), dropout=job.dropout,
                                      where="before-last-linear", **cls)  # fmt: skip
        if method == "bbb":  # the last two (LeNet) / last (ResNet) layers are Bayesian
            last_k = 2 if job.model == "lenet" else 1
            return bayesify.BayesByBackprop(_factory(job.model), last_k=last_k, init_rho=-6.0,
                                            **cls)  # fmt: skip
        if method == "ibnn":
            return bayesify.IBNN(_factory(job.model, norm=None), components=4, train_samples=2,
                                 mu_init_std=0.1, sigma_init=0.05, prior_std=0.3,
                                 variational_lr=1e-2, **cls)  # fmt: skip
        if method == "stochastic-norm":
            return bayesify.StochasticNorm(_factory(job.model, norm=None), **cls)
        if method == "vbll":  # the body and the variational last layer trained together
            return bayesify.VBLL(_factory(job.model), **cls)
        if method == "ddu":  # hidden layers spectrally bounded, the feature density after fit
            return bayesify.DDU(_factory(job.model), **cls)
        if method == "sngp":  # spectral bound and a GP output layer, its defaults; no batch
            # norm: on the batch-norm LeNet it did not train (validation loss log 10 throughout)
            return bayesify.SNGP(_factory(job.model, norm=None), **cls)
        if method == "evidential-classification":
            return bayesify.EvidentialClassifier(_factory(job.model), **cls)
        if method in ("batch-ensemble", "packed-ensemble"):  # M = the deep ensemble's members
            kind = bayesify.BatchEnsemble if method == "batch-ensemble" else bayesify.PackedEnsemble
            return kind(_factory(job.model), members=job.members, init_seed=job.seed, **cls)
    raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")


def _train(
    method: str, job: ImagesJob, data: dict[str, Any], cache: Path | None
) -> tuple[Any, dict]:
    """``method`` trained on ``job``'s data with early stopping, or its network loaded from the
    checkpoint folder ``cache`` where an earlier job trained it with the same settings."""
    from bayesify.bench.runner import config_hash
    from bayesify.io import read_bundle, write_bundle

    settings = {k: getattr(job, k) for k in ("model", "epochs", "patience", "batch_size", "lr",
                                             "n_val", "n_train", "split", "seed")}  # fmt: skip
    if method == "mc-dropout":
        settings["dropout"] = job.dropout
    folder = cache / f"{job.model}-{method}-s{job.seed}-{config_hash(settings)}" if cache else None
    if folder is not None and folder.is_dir():  # only CHECKPOINTED networks are saved
        import bayesify

        tensors, info = read_bundle(folder)
        if method == "mc-dropout":  # its own layers: the method rebuilt, then its weights
            m = _build(method, job)
            m.net.load_state_dict(tensors)
            return m, {**info["training"], "cached": True}
        net = _factory(job.model)
        net.load_state_dict(tensors)
        m = bayesify.Deterministic.from_pretrained(net, task="classification", inplace=True)
        return m, {**info["training"], "cached": True}
    m = _build(method, job)
    t0 = time.perf_counter()
    m.fit(data["train"], val=data["val"], epochs=job.epochs, batch_size=job.batch_size, lr=job.lr,
          patience=job.patience, seed=job.seed, progress=False)  # fmt: skip
    h = m.history
    info = {"train_seconds": time.perf_counter() - t0, "epochs_run": len(h.train_loss),
            "best_epoch": h.best_epoch, "val_loss": list(h.val_loss)}  # fmt: skip
    if folder is not None and method in CHECKPOINTED:
        tmp = folder.with_name(folder.name + ".tmp")
        write_bundle(tmp, m.net.state_dict(), {"training": info})
        tmp.replace(folder)  # appears complete or not at all
    return m, {**info, "cached": False}


def _method(job: ImagesJob, data: dict[str, Any], cache: Path | None) -> tuple[Any, dict]:
    """The trained method of ``job`` and how its network(s) were trained."""
    import bayesify

    if job.method in TTA_OVER:  # the other method's trained network, augmented at test time
        base, info = _train(TTA_OVER[job.method], job, data, cache)
        member = {"method": bayesify.MCDropout} if job.method == "mc-dropout-tta" else {}
        tta = bayesify.TTA.from_pretrained(base.net, task="classification",
                                           transforms=TTA_TRANSFORMS, **member)  # fmt: skip
        return tta, info
    if job.method in ("deterministic", "mcbn"):
        det, info = _train("deterministic", job, data, cache)
        if job.method == "deterministic":
            return det, info
        mcbn = bayesify.MCBN.from_pretrained(det.net, data["train"], task="classification",
                                             batch_size=job.batch_size, bank_size=job.bank_size,
                                             seed=job.seed)  # fmt: skip
        return mcbn, info
    if job.method.startswith("laplace"):  # post-hoc on the deterministic network, as MCBN
        from bayesify.bench.images.laplace import posthoc_laplace

        det, info = _train("deterministic", job, data, cache)
        method, fit_seconds = posthoc_laplace(job.method, det.net, data, job)
        return method, {**info, "fit_seconds": fit_seconds}
    if job.method == "ensemble":
        nets, infos = [], []
        for m in range(job.members):
            member = replace(job, seed=job.seed + ENSEMBLE_SEED_STRIDE * m)
            det, info = _train("deterministic", member, data, cache)
            nets.append(det.net)
            infos.append(info)
        ens = bayesify.DeepEnsemble.from_pretrained(nets, task="classification")
        total = sum(i["train_seconds"] for i in infos)
        return ens, {
            "train_seconds": total,
            "members": infos,
            "epochs_run": infos[0]["epochs_run"],
            "best_epoch": infos[0]["best_epoch"],
        }
    if job.method in ("swag", "multiswag"):
        return _swag(job, data, cache)
    return _train(job.method, job, data, cache)


def _swag(job: ImagesJob, data: dict[str, Any], cache: Path | None) -> tuple[Any, dict]:
    """SWAG (MultiSWAG: ``job.members`` trajectories) from the deterministic network."""
    import bayesify

    det, info = _train("deterministic", job, data, cache)
    cls = bayesify.MultiSWAG if job.method == "multiswag" else bayesify.SWAG
    x, y = data["train"]
    train = (x[:SWAG_TRAIN_ROWS], y[:SWAG_TRAIN_ROWS])
    steps = len(train[1]) // job.batch_size
    members = {"members": job.members} if job.method == "multiswag" else {}
    t0 = time.perf_counter()
    swag = cls.from_pretrained(det.net, train, task="classification", seed=job.seed,
                               batch_size=job.batch_size, epochs=SWAG_EPOCHS, lr=SWAG_LR,
                               collect_every=max(1, steps // SWAG_SNAPSHOTS_PER_EPOCH),
                               **members)  # fmt: skip
    return swag, {**info, "swag_seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------------------------- one job
def _feature_scores(method: Any, data: dict[str, Any], preds: dict[str, Any]) -> tuple[dict, dict]:
    """The feature OOD scores of the test and OOD images (``preds``: their predictives):
    ``mahalanobis`` fitted on the training images, ``density`` where the method has its own;
    returns ``({"test": {name: [N]}, "ood": ...}, {name: why it is missing})``."""
    from bayesify.methods import Method
    from bayesify.methods.core.ood import fit_mahalanobis, ood_scores

    if not isinstance(method, Method):
        return {}, {"mahalanobis": f"{type(method).__name__} is not a bayesify method"}
    names, missing = ["mahalanobis"], {}
    if callable(getattr(method, "density_score", None)):
        names.append("density")
    try:
        fit_mahalanobis(method, *data["train"])
    except ValueError as e:
        names.remove("mahalanobis")
        missing["mahalanobis"] = str(e)
    x = {k: data["test"][0] if k == "test" else data[k] for k in preds}
    return {k: ood_scores(method, x[k], names, pred=preds[k]) for k in x}, missing


def score_job(job: ImagesJob, cache: str | None = None) -> dict[str, Any]:
    """Train (or load) ``job``'s method and score it: the runner's job function."""
    import bayesify
    from bayesify.bench.images.predict_time import predict_times
    from bayesify.bench.toys.mcbn_collapse import ood_scores as collapse_scores
    from bayesify.data import FASHION_MNIST_MEAN, FASHION_MNIST_STD
    from bayesify.data.corruptions import gaussian_mix, salt_and_pepper
    from bayesify.metrics import error_rate
    from bayesify.posthoc.recalibration import apply_temperature, fit_temperature

    data = _data(job.split, job.n_val, job.n_train, job.n_test, job.n_ood)
    method, training = _method(job, data, Path(cache) if cache else None)
    samples = 1 if job.method in ("deterministic", "ddu") else job.samples  # equal samples

    def predict(x: torch.Tensor, seed_offset: int = 0) -> Any:
        return method.predict(x, samples=samples, seed=job.seed + seed_offset)

    t0 = time.perf_counter()
    x_test, y_test = data["test"]
    p_test = predict(x_test)
    test_seconds = time.perf_counter() - t0
    p_ood = predict(data["ood"], 1)
    p_digits = predict(data[digits.NAME], 4)
    xv, yv = data["val"]
    p_val = predict(xv[: job.n_calib], 2)
    predict_seconds = time.perf_counter() - t0
    temperature = fit_temperature(p_val, yv[: job.n_calib])
    scaled = sc.accuracy_scores(apply_temperature(p_test, temperature), y_test)

    xc, yc = x_test[: job.n_corrupt], y_test[: job.n_corrupt]
    low, high = (
        -FASHION_MNIST_MEAN / FASHION_MNIST_STD,
        (1 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD,
    )
    corruption = {
        "gaussian": sc.corruption_sweep(
            lambda x: predict(x, 3), xc, yc, job.gammas,
            lambda x, g, gen: gaussian_mix(x, g, generator=gen), seed=job.split),
        "salt_pepper": sc.corruption_sweep(
            lambda x: predict(x, 3), xc, yc, job.ps,
            lambda x, p, gen: salt_and_pepper(x, p, low=low, high=high, generator=gen),
            seed=job.split),
    }  # fmt: skip
    preds = {"test": p_test, "ood": p_ood, digits.NAME: p_digits}
    features, missing = _feature_scores(method, data, preds)
    out: dict[str, Any] = {
        **sc.accuracy_scores(p_test, y_test),
        "temperature": temperature,
        "scaled": scaled,
        "samples_drawn": p_test.num_samples,
        "ood": sc.ood_scores(p_test, p_ood, features.get("test"), features.get("ood")),
        # the second OOD set, scored as MNIST is
        "ood_digits": sc.ood_scores(p_test, p_digits, features.get("test"),
                                    features.get(digits.NAME)),
        "ood_missing": missing,
        "uncertainty": {"test": sc.mean_uncertainty(p_test), "ood": sc.mean_uncertainty(p_ood)},
        # deferral by a method's own feature density too (DDU's epistemic score)
        "coverage": sc.coverage_scores(p_test, y_test, {k: v for k, v in features.get(
            "test", {}).items() if k == "density"}),
        "reliability": sc.reliability(p_test, y_test),
        "corruption": corruption,
        "training": training,
        "predict_seconds": predict_seconds,
        "predict_ms_per_1000": 1e6 * test_seconds / len(y_test),
        # beside the deterministic network of the same model, timed interleaved in this job
        **predict_times(predict, bayesify.Deterministic(_factory(job.model), **CLS), x_test,
                        job.seed),
        "n": {"train": len(data["train"][1]), "val": len(yv), "test": len(y_test),
              "ood": len(data["ood"]), "ood_digits": len(data[digits.NAME]),
              "corrupt": len(yc)},
        KEY: defaults_record(method),
    }  # fmt: skip
    if job.method == "mcbn":  # Mukhoti et al. Fig. 1: the bank filled with batches of b
        sweep = []
        x_in, x_out = x_test[: job.n_corrupt], data["ood"][: job.n_corrupt]
        for b in job.bank_batches:
            method.fill_bank(data["train"], batch_size=b, bank_size=job.samples, seed=job.seed)
            s = collapse_scores(method, x_in, x_out, job.samples, job.seed)
            err = float(error_rate(s.pop("_pred").mean, y_test[: job.n_corrupt]))
            sweep.append({"b": b, **s, "error": err})
        out["mcbn_sweep"] = sweep
    return out
