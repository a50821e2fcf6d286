"""``BayesianRegressor`` and ``BayesianClassifier``: a bayesify method on an MLP behind
scikit-learn's estimator interface (``fit``, ``predict``, ``predict_proba``, ``score``,
``get_params``/``set_params``), so it works in ``Pipeline``, ``cross_val_score``,
``GridSearchCV`` and conformal wrappers such as MAPIE's."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_is_fitted,
    check_random_state,
    column_or_1d,
    validate_data,
)

from bayesify.app.jobs import default_dropout
from bayesify.methods import Method, get_method, resolve_method_names
from bayesify.models import mlp
from bayesify.predictive import Predictive, Task
from bayesify.predictor import Predictor
from bayesify.seeding import seeded
from bayesify.sklearn._inputs import as_frame, fit_preprocessing, validation_rows


class _BayesianEstimator(BaseEstimator):
    """What both estimators share: parameters, fitting and the predictive of new rows."""

    _task: ClassVar[Task]

    def __init__(
        self,
        method: str = "mcbn",
        *,
        options: dict[str, Any] | None = None,
        hidden_layer_sizes: tuple[int, ...] = (50, 50),
        norm: str = "batch",
        dropout: float | None = None,
        epochs: int = 100,
        batch_size: int = 32,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        patience: int | None = None,
        validation_fraction: float = 0.1,
        samples: int = 100,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.method = method
        self.options = options
        self.hidden_layer_sizes = hidden_layer_sizes
        self.norm = norm
        self.dropout = dropout
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.samples = samples
        self.random_state = random_state

    # ------------------------------------------------------------------ inputs
    def _frame(self, X: Any, *, reset: bool) -> Any:
        """X checked (feature names and count against fit's) as a DataFrame of raw columns.
        DataFrames keep their columns (text columns are one-hot encoded); after a fit on a
        DataFrame an array's columns are taken in its order (as scikit-learn does, with its
        warning); anything else must be a finite numeric array ``[N, F]``."""
        import pandas as pd

        if isinstance(X, pd.DataFrame):
            validate_data(self, X, reset=reset, skip_check_array=True)
            if len(X) == 0:
                raise ValueError("Found array with 0 sample(s); a minimum of 1 is required.")
            return as_frame(X)
        names = getattr(self, "feature_names_in_", None)
        if not reset and names is not None:  # fitted on a DataFrame: columns by position
            validate_data(self, X, reset=False, skip_check_array=True)
            arr = np.asarray(X)
            if arr.ndim != 2:
                raise ValueError(f"Expected 2D array, got {arr.ndim}D array instead")
            return pd.DataFrame(arr, columns=[str(c) for c in names])
        return as_frame(validate_data(self, X, reset=reset, dtype=np.float64))

    def _fit_method(
        self, frame: Any, y: np.ndarray, n_outputs: int, labels: np.ndarray | None
    ) -> Any:
        """Fits the preprocessing and the method on the rows of ``frame`` (:meth:`_frame`) and
        targets ``y`` (regression: float64 values; classification: class indices)."""
        if len(frame) != len(y):
            raise ValueError(f"X has {len(frame)} rows and y {len(y)}")
        if len(y) < 2:
            raise ValueError(f"n_samples = {len(y)}: fitting needs at least 2 samples")
        self.seed_ = int(check_random_state(self.random_state).randint(2**31 - 1))
        val = validation_rows(len(y), self.validation_fraction, self.seed_, labels)
        regression = self._task is Task.REGRESSION
        prep = fit_preprocessing(frame, ~val, y[~val] if regression else None)
        x = prep.inputs(frame)  # [N, F_enc] scaled, float32
        if regression:
            yt = torch.as_tensor((y - prep.y_mean) / prep.y_std, dtype=torch.float32)
        else:
            yt = torch.as_tensor(y, dtype=torch.int64)
        cls = get_method(self.method)
        options = resolve_method_names(cls.Config, dict(self.options or {}))
        dropout = default_dropout(cls, options) if self.dropout is None else self.dropout
        with seeded(self.seed_):  # the network's initial weights
            net = mlp(x.shape[1], n_outputs, tuple(self.hidden_layer_sizes), norm=self.norm,
                      dropout=dropout)  # fmt: skip
            method: Method = cls(net, task=self._task.value, **options)
        keep, held = torch.as_tensor(~val), torch.as_tensor(val)
        method.fit((x[keep], yt[keep]), val=(x[held], yt[held]) if val.any() else None,
                   epochs=self.epochs, batch_size=min(self.batch_size, int((~val).sum())),
                   lr=self.lr,
                   weight_decay=self.weight_decay, patience=self.patience, seed=self.seed_,
                   progress=False)  # fmt: skip
        method.preprocessing = prep
        # float64 predictions: a row's answer does not move in the 8th digit with the other
        # rows of the call (float32 matrix products round differently by position)
        method.net.double()
        self.method_ = method
        self.n_train_rows_ = int((~val).sum())
        return self

    def predictive(self, X: Any, samples: int | None = None) -> Predictive:
        """The :class:`~bayesify.predictive.Predictive` of the rows of ``X`` (regression in
        the units of ``y``): samples ``[T, N]`` or ``[T, N, C]``, uncertainty split, intervals.
        The same rows give the same answer on every call (seeded by ``random_state``)."""
        check_is_fitted(self, "method_")
        frame = self._frame(X, reset=False)
        predictor = Predictor(self.method_)
        return predictor.predictive(frame, samples or self.samples, seed=self.seed_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = False
        tags.non_deterministic = False
        return tags


class BayesianRegressor(RegressorMixin, _BayesianEstimator):
    """A bayesify method (``method``: a name of ``bayesify methods``; ``options``: its options)
    on an MLP regressor, trained as ``bayesify train --data`` trains on a table: text columns
    one-hot, inputs and targets standardised on the training rows, ``validation_fraction`` of
    the rows held out to fit the noise variance and keep the best epoch.

    ``predict(X)`` is the predictive mean, ``predict(X, return_std=True)`` also its total
    standard deviation (as ``GaussianProcessRegressor``); :meth:`predictive` the whole
    predictive distribution."""

    _task = Task.REGRESSION

    def fit(self, X: Any, y: Any) -> BayesianRegressor:
        """Fit the method on rows ``X`` (array ``[N, F]`` or DataFrame) and targets ``y``."""
        frame = self._frame(X, reset=True)
        y = column_or_1d(y, warn=True).astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
        return self._fit_method(frame, y, 1, None)

    def predict(self, X: Any, return_std: bool = False) -> Any:
        """The predictive mean ``[N]`` (and total std ``[N]`` with ``return_std``)."""
        pred = self.predictive(X)
        mean = pred.mean.double().numpy()
        return (mean, pred.std.double().numpy()) if return_std else mean


class BayesianClassifier(ClassifierMixin, _BayesianEstimator):
    """A bayesify method (``method``: a name of ``bayesify methods``; ``options``: its options)
    on an MLP classifier, trained as ``bayesify train --data`` trains on a table (text
    columns one-hot, inputs standardised on the training rows, ``validation_fraction`` of the
    rows held out, stratified, to keep the best epoch). ``predict_proba`` is the predictive's
    mean class probabilities in ``classes_`` order."""

    _task = Task.CLASSIFICATION

    def fit(self, X: Any, y: Any) -> BayesianClassifier:
        """Fit the method on rows ``X`` (array ``[N, F]`` or DataFrame) and labels ``y``."""
        frame = self._frame(X, reset=True)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y has 1 class ({self.classes_[0]!r}); a classifier needs two "
                             "or more")  # fmt: skip
        return self._fit_method(frame, codes, len(self.classes_), codes)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Mean class probabilities ``[N, C]`` over the samples, columns in ``classes_`` order."""
        check_is_fitted(self, "method_")
        probs = self.predictive(X).mean.double().numpy()
        return probs / probs.sum(1, keepdims=True)

    def predict(self, X: Any) -> np.ndarray:
        """The most probable class of each row, as a label of ``classes_``."""
        probs = self.predict_proba(X)
        return self.classes_[probs.argmax(1)]
