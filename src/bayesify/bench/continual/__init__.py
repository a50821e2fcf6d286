"""Variational continual learning on Permuted and Split MNIST: ``bayesify bench continual``."""
