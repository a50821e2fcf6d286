"""The predictor: a loaded bundle + its preprocessing -> one record per input row.

The single place that turns raw rows into prediction records; ``bayesify predict`` (files) and
the server (HTTP) are thin front doors to it.

```python
from bayesify.predictor import Predictor

p = Predictor.load("runs/boston", net=None)  # net: None | "package.module:factory" | nn.Module
p.method, p.preprocessing, p.task, p.input_shape, p.feature_names, p.class_names
p.card()                                     # JSON model card (method, task, features, ...)
res = p.predict(inputs, samples=None, level=0.9, seed=None, on_error="raise")
#   inputs in RAW user units: a pandas DataFrame, a numpy array [N, F] / [N, *shape], a tensor,
#   or a list of rows (lists in feature order, or {feature: value} dicts)
res.predictive   # the Predictive of the rows kept (original units)
res.columns      # dict[str, np.ndarray], one entry per output field, first axis N
res.records()    # list[dict], one JSON-able dict per kept row
res.rows         # row numbers of the kept rows; res.skipped: {row: reason} (on_error="skip")
res.frame()      # a pandas DataFrame for files (list fields expanded or JSON-encoded)
```

Fields per row. Regression: ``mean``, ``std``, ``epistemic_variance``, ``aleatoric_variance``,
``samples`` (the T sample means); classification: ``label`` (class name), ``probabilities`` (in
``class_names`` order), ``entropy``, ``mutual_information``, ``expected_entropy``, ``samples``
(``[T, C]`` per row). ``lower``/``upper`` (interval at ``level``) and ``prediction_set`` appear
when the Predictive offers intervals and prediction sets.
"""

from bayesify.predictor.core import DEFAULT_SAMPLES, OnError, PredictionResult, Predictor

__all__ = ["DEFAULT_SAMPLES", "OnError", "PredictionResult", "Predictor"]
