"""OOD AUROC (MNIST vs Fashion-MNIST, the student's closed-form mutual information) of a student
distilled from a Fashion-MNIST LeNet teacher bundle (e.g. the MC dropout one of ``bayesify bench
distill --bundles FOLDER``) on the first N of the teacher's 5,000 training images, after every
epoch and at the epoch ``distill`` keeps:

    python benchmarks/distill_transfer.py TEACHER N [OPTION=VALUE ...]

OPTION=VALUE: any keyword of ``bayesify.distill`` (e.g. ``augment=noise copies=1 epochs=4``);
none: its defaults. Scored on 1,000 Fashion-MNIST test images and 1,000 MNIST digits.

``--why TEACHER``: the teacher's mean mutual information on 1,000 training images, on each kind
of transfer copy and on MNIST digits (why a transfer copy teaches the student an OOD signal).
"""

from __future__ import annotations

import importlib
import sys
import time

import torch

import bayesify
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.methods.distillation.transfer import TRANSFORMS, transfer_inputs
from bayesify.metrics import error_rate, rank_correlation
from bayesify.metrics.ood import auroc
from bayesify.options import Augment


def why(teacher_path: str) -> None:
    teacher = bayesify.load(teacher_path)
    x = load_fashion_mnist("train").subset(1000, seed=0).x
    g = torch.Generator().manual_seed(0)
    copies = {
        "training images": x,
        "mixup copies": transfer_inputs(x, Augment.MIXUP, 1, 0.1, g)[len(x) :],
        **{f"outlier: {k}": f(x, 1.0, g) for k, f in TRANSFORMS.items()},
        "MNIST": load_mnist("test").subset(1000, seed=0).x,
    }
    for name, rows in copies.items():
        p = teacher.predict(rows, 30, seed=1)
        print(f"{name}: mean MI {p.mutual_information.mean():.4f} nats, "
              f"entropy {p.entropy.mean():.3f}")  # fmt: skip


def main(teacher_path: str, n: int, options: dict) -> None:
    distill = importlib.import_module("bayesify.methods.distillation.distill")
    teacher = bayesify.load(teacher_path)
    train = load_fashion_mnist("train").subset(5000, seed=0)
    test = load_fashion_mnist("test").subset(1000, seed=0)
    ood = load_mnist("test").subset(1000, seed=0).x
    ta, tb = teacher.predict(test.x, 30, seed=1), teacher.predict(ood, 30, seed=2)
    t_auc = float(auroc(ta.mutual_information, tb.mutual_information))
    print(f"teacher AUROC {t_auc:.4f} err {float(error_rate(ta.mean, test.y)):.4f}", flush=True)
    t0, seen = time.time(), {}

    def score(student, label) -> None:
        a, b = student.summaries(test.x), student.summaries(ood)
        s_auc = float(auroc(a["mutual_information"], b["mutual_information"]))
        rho = rank_correlation(a["mutual_information"], ta.mutual_information)
        print(f"epoch {label}: student AUROC {s_auc:.4f} ratio {s_auc / t_auc:.3f} "
              f"err {float(error_rate(a['mean'].float(), test.y)):.4f} Spearman MI {rho:.3f} "
              f"| {time.time() - t0:.0f} s", flush=True)  # fmt: skip

    # log every epoch: wrap the training loop's validation (the held-out score, when there is one)
    real_train, real_loop = distill._train, distill.train_loop

    def keep(student, *args, **kwargs):
        seen["student"] = student
        return real_train(student, *args, **kwargs)

    def loop(*args, validate=None, **kwargs):
        epoch = [0]

        def logged() -> float:
            epoch[0] += 1
            score(seen["student"], epoch[0])
            held = validate() if validate is not None else -epoch[0]
            print(f"  held-out score {held:.4f}", flush=True)
            return held

        return real_loop(*args, validate=logged, **kwargs)

    distill._train, distill.train_loop = keep, loop
    student = bayesify.distill(teacher, train.x[:n], progress=False, **options)
    d = student.distillation
    print(f"chosen epoch {d['chosen_epoch']} of {d['epochs']}; {d['seconds']} s")
    score(student, "chosen")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "--why":
        why(sys.argv[2])
    else:
        opts = dict(a.split("=", 1) for a in sys.argv[3:])
        opts = {k: int(v) if v.isdigit() else v for k, v in opts.items()}
        main(sys.argv[1], int(sys.argv[2]), opts)
