"""OOD AUROC (MNIST vs Fashion-MNIST) of a student distilled from the MC dropout LeNet teacher of
``bayesify bench distill --bundles FOLDER`` with one transfer copy of a given kind:

    python benchmarks/distill_transfer.py AUGMENT NOISE FOLDER/fmnist-mc-dropout
"""

from __future__ import annotations

import sys
import time

import torch

import bayesify
from bayesify.data import load_fashion_mnist, load_mnist
from bayesify.metrics import error_rate
from bayesify.metrics.ood import auroc


def main(augment: str, noise: float, teacher_path: str) -> None:
    torch.set_num_threads(1)
    teacher = bayesify.load(teacher_path)
    train = load_fashion_mnist("train").subset(5000, seed=0)
    test = load_fashion_mnist("test").subset(1000, seed=0)
    ood = load_mnist("test").subset(1000, seed=0).x
    t0 = time.time()
    student = bayesify.distill(teacher, train.x, augment=augment, noise=noise, epochs=2,
                               progress=False)  # fmt: skip
    a, b = student.summaries(test.x), student.summaries(ood)
    ta, tb = teacher.predict(test.x, 30, seed=1), teacher.predict(ood, 30, seed=2)
    print(augment, noise,
          f"student AUROC {float(auroc(a['mutual_information'], b['mutual_information'])):.4f}",
          f"err {float(error_rate(a['mean'].float(), test.y)):.4f} |",
          f"teacher AUROC {float(auroc(ta.mutual_information, tb.mutual_information)):.4f}",
          f"err {float(error_rate(ta.mean, test.y)):.4f} | {time.time() - t0:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3])
