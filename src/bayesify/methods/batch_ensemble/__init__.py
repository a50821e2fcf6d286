"""BatchEnsemble: M members sharing each layer's weight, with rank-1 fast weights per member."""

from bayesify.methods.batch_ensemble.batch_ensemble import BatchEnsemble, BatchEnsembleConfig

__all__ = ["BatchEnsemble", "BatchEnsembleConfig"]
