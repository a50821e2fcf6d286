"""Distillation: a :class:`~bayesify.methods.distillation.distilled.Distilled` student trained
on a teacher's predictive, so one pass over N rows gives what T samples of the teacher give.

``distill(teacher, x)``:

1. **Transfer set** (:mod:`.transfer`): the inputs ``x`` (raw, as ``teacher.predict`` takes
   them) plus ``copies`` (2) copies. ``outliers``, the default: a copy with Gaussian noise of
   ``noise`` (1, network input units), then on images copies whose class semantics are
   destroyed (patch and pixel shuffles, rotations, inversions, heavy zooms, noise), on which
   the teacher's samples disagree about as much as on out-of-distribution inputs; tables get
   the noise copy alone. ``noise``: noise copies; ``mixup``: blends of two random inputs;
   ``none``. Why: the student's precision head learns only the disagreement it is shown, and
   with the noise copy alone its OOD signal faded as it trained longer
   (benchmarks/distill_one_seed.md).
2. **Teacher targets**: ``samples`` draws of the teacher per transfer row (one pass each chunk).
   Classification keeps the T log class-probability vectors ``[N, T, C]``; regression keeps
   the mean, the epistemic variance and the aleatoric variance per row, in network units.
3. **Student**: the teacher's network rebuilt from its architecture (no stochastic layers, or
   inert ones), started from the teacher's weights where the parameters line up (member 0 of an
   ensemble) and its last linear layer widened (:mod:`.distilled`).
4. **Training**, the one training loop, Adam:

   - classification: the Dirichlet negative log-likelihood of the teacher's T probability
     vectors (Malinin et al. 2020, ensemble distribution distillation), each smoothed towards
     uniform by ``1e-4`` (their "central smoothing") and tempered: the teacher's log
     probabilities divided by a temperature annealed linearly from ``temperature`` to 1 over
     the first half of training, so the early targets are less sharp;
   - regression: ``(m - mu)² / r + ½ (e / v_e + log v_e) + ½ (a / v_a + log v_a)`` for the
     teacher's mean m, epistemic e and aleatoric a variance, r the mean total variance over
     the transfer set (each term is minimised by the teacher's value).

5. **The epoch** (classification): a tenth of the transfer rows (``HOLDOUT``) is held out, and
   the student keeps the epoch whose closed-form mutual information ranks those rows most like
   the teacher's (Spearman), so a longer run cannot end on a worse epoch than it passed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from bayesify.methods.core.base import Method
from bayesify.methods.distillation.distilled import Distilled, last_linear
from bayesify.methods.distillation.transfer import transfer_inputs
from bayesify.methods.ensemble.ensemble import DeepEnsemble
from bayesify.metrics.classification import mutual_information
from bayesify.metrics.posterior import rank_correlation
from bayesify.models import build_model
from bayesify.nn.modes import eval_mode
from bayesify.options import Augment, Task, parse_option
from bayesify.predictive.dirichlet import dirichlet_nll, dirichlet_summaries
from bayesify.train import History, as_loader, make_optimizer, train_loop

log = logging.getLogger(__name__)

#: weight of the uniform distribution mixed into every teacher sample (central smoothing)
SMOOTHING = 1e-4
#: transfer rows the teacher predicts at a time
TEACHER_CHUNK = 1024
#: share of a classification transfer set held out to choose the student's epoch by
HOLDOUT = 0.1
#: fewer held-out rows than this: no choice, the last epoch is kept
MIN_HELD_OUT = 20


def distill(
    teacher: Method,
    data: Any,
    *,
    samples: int = 30,
    augment: Augment | str = Augment.OUTLIERS,
    copies: int = 2,
    noise: float = 1.0,
    epochs: int = 20,
    batch_size: int = 128,
    lr: float = 1e-3,
    temperature: float = 10.0,
    seed: int = 0,
    progress: bool = True,
    teacher_source: str | None = None,
) -> Distilled:
    """A :class:`Distilled` student of ``teacher`` trained on ``data``'s inputs (raw, as
    ``teacher.predict`` takes them: a tensor, array, DataFrame, or ``(X, y)`` whose targets are
    ignored) and ``copies`` augmented copies. ``samples``: teacher draws per transfer row.
    ``teacher_source``: where the teacher came from (e.g. its bundle path), recorded."""
    if isinstance(teacher, Distilled):
        raise ValueError("the teacher is a distilled student already; distil its own teacher")
    augment = parse_option(Augment, augment, option="augment")
    for name, value, low in (("samples", samples, 1), ("copies", copies, 0),
                             ("epochs", epochs, 1), ("batch_size", batch_size, 1)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if not noise > 0 or not temperature >= 1 or not lr > 0:
        raise ValueError(f"noise and lr must be > 0 and temperature >= 1, got noise={noise}, "
                         f"lr={lr}, temperature={temperature}")  # fmt: skip
    x = _network_inputs(teacher, data)
    gen = torch.Generator().manual_seed(seed)
    xt = transfer_inputs(x, augment, copies, noise, gen)
    began = time.perf_counter()
    targets = teacher_targets(teacher, xt, samples, gen, progress)
    student = _student(teacher)
    student.to(teacher.device)
    ref = _init_heads(student, targets)
    fit, held = holdout_split(len(xt), student.config.task, gen)
    history = _train(student, xt[fit], targets[fit], ref, epochs, batch_size, lr, temperature,
                     seed, progress, (xt[held], targets[held]) if len(held) else None)  # fmt: skip
    student.distillation = {
        "teacher": _teacher_record(teacher, teacher_source),
        "teacher_samples": samples,
        "transfer": {"inputs": len(x), "augment": augment.value, "copies": copies,
                     "noise": noise if augment in (Augment.NOISE, Augment.OUTLIERS) else None,
                     "rows": len(xt)},  # fmt: skip
        "epochs": epochs, "batch_size": batch_size, "lr": lr, "temperature": temperature,
        "seed": seed, "final_loss": history.train_loss[-1],
        "held_out_rows": len(held), "chosen_epoch": history.best_epoch + 1 if len(held) else epochs,
        "seconds": round(time.perf_counter() - began, 1),
    }  # fmt: skip
    return student


# ---------------------------------------------------------------------------------- inputs
def _network_inputs(teacher: Method, data: Any) -> Tensor:
    """``data``'s inputs as the teacher's network reads them ``[N, ...]``."""
    if isinstance(data, tuple | list) and len(data) == 2:
        data = data[0]
    if teacher.preprocessing is not None:
        data = teacher.preprocessing.inputs(data)
    x = teacher._check_inputs(data)
    if len(x) < 2:
        raise ValueError(f"distillation needs at least 2 input rows, got {len(x)}")
    return x


def teacher_targets(
    teacher: Method, x: Tensor, samples: int, generator: torch.Generator, progress: bool = False
) -> Tensor:
    """What the student learns per transfer row: classification ``[N, T, C]`` log class
    probabilities of T teacher samples; regression ``[N, 3]`` mean, epistemic and aleatoric
    variance (network target units)."""
    from bayesify.progress import progress_bar

    outs = []
    chunks = range(0, len(x), TEACHER_CHUNK)
    for a in progress_bar(chunks, desc="teacher", progress=progress, leave=False):
        pred = teacher.to_predictive(teacher.sample(x[a : a + TEACHER_CHUNK], samples,
                                                    generator=generator))  # fmt: skip
        if teacher.config.task is Task.CLASSIFICATION:
            p = pred.samples.float()
            outs.append(p.clamp_min(torch.finfo(p.dtype).tiny).log().transpose(0, 1))
        else:
            outs.append(torch.stack([pred.mean, pred.epistemic_variance,
                                     pred.aleatoric_variance], -1).float())  # fmt: skip
    return torch.cat(outs)


def holdout_split(n: int, task: Task, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """Transfer rows to train on and rows held out to choose the epoch by (classification with
    at least ``MIN_HELD_OUT`` held-out rows; else none): index tensors."""
    held = int(HOLDOUT * n) if task is Task.CLASSIFICATION else 0
    if held < MIN_HELD_OUT:
        return torch.arange(n), torch.arange(0)
    order = torch.randperm(n, generator=generator)
    return order[held:], order[:held]


# ---------------------------------------------------------------------------------- student
def _base_net(teacher: Method) -> nn.Module:
    """The network whose weights start the student: member 0's for an ensemble."""
    net: nn.Module = (
        teacher.member_methods[0].net if isinstance(teacher, DeepEnsemble) else teacher.net
    )
    return net


def _student(teacher: Method) -> Distilled:
    """The student around the teacher's network rebuilt from its architecture (a copy of the
    teacher's own network where there is no spec to rebuild it from)."""
    base = _base_net(teacher)
    spec = getattr(base, "bayesify_spec", None) or teacher.architecture
    if spec is not None:
        net = build_model(spec)
    else:
        log.warning("the teacher's network has no spec to rebuild it from; the student is a "
                    "copy of it, and loading its bundle needs net= (--net)")  # fmt: skip
        net = base
    net = net.to(dtype=teacher._dtype())
    student = Distilled(net, task=teacher.config.task)  # copies net
    student.input_shape = teacher.input_shape
    student.preprocessing = teacher.preprocessing
    student.metadata = {k: v for k, v in teacher.metadata.items()
                        if k not in ("conformal", "deferral")}  # fmt: skip
    _warm_start(student, base)
    return student


_BN_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def _warm_start(student: Distilled, base: nn.Module) -> None:
    """Copy the teacher's weights into the student where its parameters line up one to one in
    order (the widened last layer: the rows the teacher has); else leave the fresh init."""
    _, _, wide = last_linear(student.net)
    dst = list(student.net.named_parameters())
    src = list(base.named_parameters())
    rows = student.outputs if student.config.task is Task.CLASSIFICATION else 1
    pairs = []
    for (_, dp), (_, sp) in zip(dst, src, strict=False):
        widened = dp is wide.weight or dp is wide.bias
        if dp.shape == sp.shape or (widened and dp.shape[1:] == sp.shape[1:] and len(sp) >= rows):
            pairs.append((dp, sp[:rows] if widened else sp))
        else:
            break
    if len(dst) != len(src) or len(pairs) != len(dst):
        log.info("the student starts from a fresh initialisation (its parameters do not line "
                 "up with the teacher's)")  # fmt: skip
        return
    dbuf = [b for n, b in student.net.named_buffers() if n.endswith(_BN_BUFFERS)]
    sbuf = [b for n, b in base.named_buffers() if n.endswith(_BN_BUFFERS)]
    with torch.no_grad():
        for d, s in pairs:
            d[: len(s)].copy_(s)
        if len(dbuf) == len(sbuf) and all(d.shape == s.shape for d, s in zip(dbuf, sbuf)):  # noqa: B905
            for d, s in zip(dbuf, sbuf, strict=True):
                d.copy_(s)


def _init_heads(student: Distilled, targets: Tensor) -> float:
    """Start the extra heads' biases at the transfer set's typical values; returns the
    regression reference variance r (classification: 1)."""
    _, _, wide = last_linear(student.net)
    if wide.bias is None:
        return 1.0
    with torch.no_grad():
        if student.config.task is Task.CLASSIFICATION:
            wide.bias[-1] = float(torch.log(torch.tensor(10.0 * student.outputs)))
            return 1.0
        m, e, a = targets.unbind(-1)
        wide.bias[0] = m.mean()
        wide.bias[1] = e.mean().clamp_min(1e-8).log()
        wide.bias[2] = a.mean().clamp_min(1e-8).log()
        return float((e + a).mean().clamp_min(1e-8))


def _train(student: Distilled, x: Tensor, targets: Tensor, ref: float, epochs: int,
           batch_size: int, lr: float, temperature: float, seed: int, progress: bool,
           held: tuple[Tensor, Tensor] | None = None) -> History:  # fmt: skip
    classify = student.config.task is Task.CLASSIFICATION
    _, _, wide = last_linear(student.net)
    seen: list[Tensor] = []  # the last layer's input of the current batch
    hook = wide.register_forward_pre_hook(lambda _m, args: seen.append(args[0]))

    def objective(xb: Tensor, yb: Tensor, done: float) -> Tensor:
        seen.clear()
        out = student.net(xb)
        if not classify:
            return regression_loss(out, yb, ref)
        # the precision head learns on the features the mean head shapes: its gradient (the
        # Dirichlet NLL's, large for confident rows) does not reach the shared layers
        bias = wide.bias[-1:] if wide.bias is not None else None
        s = F.linear(seen[-1].detach(), wide.weight[-1:], bias)
        tau = max(1.0, temperature + (1.0 - temperature) * min(1.0, 2 * done))
        return classification_loss(torch.cat([out[:, :-1], s], -1), yb, tau)

    validate = None
    if held is not None:  # the epoch whose MI ranks the held-out rows most like the teacher's
        hx, teacher_mi = held[0], mutual_information(held[1].double().exp().transpose(0, 1))

        def validate() -> float:
            out = student.heads(hx.to(student.device), TEACHER_CHUNK)
            mi = dirichlet_summaries(student.concentrations(out).double())["mutual_information"]
            return -rank_correlation(mi.cpu(), teacher_mi)

    loader = as_loader(TensorDataset(x, targets), batch_size, shuffle=True, seed=seed)
    opt = make_optimizer(student.param_groups(lr, 0.0), "adam", lr)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            history = train_loop(student.net, objective, loader, opt, epochs=epochs,
                                 validate=validate,
                                 device=student.device, progress=progress,
                                 desc="distill")  # fmt: skip
    finally:
        hook.remove()
    student.net.eval()
    student.history = history
    return history


def classification_loss(out: Tensor, log_p: Tensor, temperature: float = 1.0) -> Tensor:
    """The teacher's samples ``log_p [B, T, C]`` against the student's heads ``out [B, C + 1]``:
    cross-entropy of the student's mean ``softmax(z)`` to the teacher's mean class
    probabilities, plus the Dirichlet NLL of the samples (tempered by ``temperature``, smoothed)
    with the mean held fixed (its gradient reaches only the precision head)."""
    c = log_p.shape[-1]
    p = torch.softmax(log_p.double(), -1).mean(1)  # [B, C]
    z = torch.log_softmax(out[:, :-1].double(), -1)
    ce = -(p * z).sum(-1).mean()
    q = (1 - SMOOTHING) * torch.softmax(log_p.double() / temperature, -1) + SMOOTHING / c
    log_alpha = z.detach() + out[:, -1:].double().clamp(-30, 30)
    return (ce + dirichlet_nll(log_alpha, q.log().mean(1))).to(out.dtype)


def regression_loss(out: Tensor, target: Tensor, ref: float) -> Tensor:
    """The regression heads ``out [B, 3]`` against the teacher's mean, epistemic and aleatoric
    variance ``target [B, 3]``; ``ref`` scales the squared error of the mean."""
    m, e, a = target.unbind(-1)
    floor = 1e-6 * ref
    le, la = out[:, 1].clamp(-30, 30), out[:, 2].clamp(-30, 30)
    return ((m - out[:, 0]) ** 2 / ref + 0.5 * ((e + floor) * (-le).exp() + le)
            + 0.5 * ((a + floor) * (-la).exp() + la)).mean()  # fmt: skip


def _teacher_record(teacher: Method, source: str | None) -> dict[str, Any]:
    """The teacher as a student's bundle records it: method, digests of its bundle config and
    weights (sha256, first 16 hex digits), and where it came from."""
    config = json.dumps(teacher.bundle_config(), sort_keys=True, default=str)
    h = hashlib.sha256()
    with eval_mode(teacher.net):
        for k, v in sorted(teacher.net.state_dict().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return {"method": teacher.name, "config": teacher.config.to_dict(),
            "config_hash": hashlib.sha256(config.encode()).hexdigest()[:16],
            "weights_hash": h.hexdigest()[:16], "source": source}  # fmt: skip
