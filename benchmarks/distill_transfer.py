"""OOD AUROC (MNIST vs Fashion-MNIST) of a student distilled from a Fashion-MNIST LeNet teacher
bundle (e.g. the MC dropout one of ``bayesify bench distill --bundles FOLDER``) with one
transfer copy of a given kind, on the teacher's 5,000 training images:

    python benchmarks/distill_transfer.py TEACHER AUGMENT NOISE EPOCHS

``--why TEACHER``: the teacher's mean mutual information on training images, on one copy of
each kind and on MNIST digits (why a transfer copy teaches the student an OOD signal or not).
"""

from __future__ import annotations

import sys
import time

import torch

import bayesify
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.methods.distill import transfer_inputs
from bayesify.metrics import error_rate
from bayesify.metrics.ood import auroc
from bayesify.options import Augment


def why(teacher_path: str) -> None:
    teacher = bayesify.load(teacher_path)
    x = load_fashion_mnist("train").subset(1000, seed=0).x
    g = torch.Generator().manual_seed(0)
    copies = {
        "training images": x,
        "mixup copies": transfer_inputs(x, Augment.MIXUP, 1, 0.1, g)[len(x) :],
        "noise σ = 1": transfer_inputs(x, Augment.NOISE, 1, 1.0, g)[len(x) :],
        "noise σ = 0.3": transfer_inputs(x, Augment.NOISE, 1, 0.3, g)[len(x) :],
        "MNIST": load_mnist("test").subset(1000, seed=0).x,
    }
    for name, rows in copies.items():
        p = teacher.predict(rows, 30, seed=1)
        print(f"{name}: mean MI {p.mutual_information.mean():.4f} nats, "
              f"entropy {p.entropy.mean():.3f}")  # fmt: skip


def main(teacher_path: str, augment: str, noise: float, epochs: int) -> None:
    teacher = bayesify.load(teacher_path)
    train = load_fashion_mnist("train").subset(5000, seed=0)
    test = load_fashion_mnist("test").subset(1000, seed=0)
    ood = load_mnist("test").subset(1000, seed=0).x
    t0 = time.time()
    student = bayesify.distill(teacher, train.x, augment=augment, noise=noise, epochs=epochs,
                               progress=False)  # fmt: skip
    a, b = student.summaries(test.x), student.summaries(ood)
    ta, tb = teacher.predict(test.x, 30, seed=1), teacher.predict(ood, 30, seed=2)
    s_auc = float(auroc(a["mutual_information"], b["mutual_information"]))
    t_auc = float(auroc(ta.mutual_information, tb.mutual_information))
    print(augment, noise, epochs, f"student AUROC {s_auc:.4f}",
          f"err {float(error_rate(a['mean'].float(), test.y)):.4f} |",
          f"teacher AUROC {t_auc:.4f} err {float(error_rate(ta.mean, test.y)):.4f} |",
          f"ratio {s_auc / t_auc:.3f} | {time.time() - t0:.0f} s")  # fmt: skip


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "--why":
        why(sys.argv[2])
    else:
        a = sys.argv[1:]
        main(a[0], a[1], float(a[2]), int(a[3]))
