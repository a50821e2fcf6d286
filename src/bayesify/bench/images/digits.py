"""The second OOD set of ``bayesify bench images``: scikit-learn's digits, which live in
:mod:`bayesify.data.digits` (``bench distill`` scores them too); re-exported here."""

from bayesify.data.digits import BOX, NAME, PAD, load_digits_ood, to_mnist_format

__all__ = ["BOX", "NAME", "PAD", "load_digits_ood", "to_mnist_format"]
