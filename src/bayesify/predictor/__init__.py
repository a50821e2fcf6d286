"""The predictor: a loaded bundle + its preprocessing -> one record per input row.

The single place that turns raw rows into prediction records; ``bayesify predict`` (files) and
the server (HTTP) are thin front doors to it.

```python
from bayesify.predictor import Predictor

p = Predictor.load("runs/boston", net=None)  # net: None | "package.module:factory" | nn.Module
p.method, p.preprocessing, p.task, p.input_shape, p.feature_names, p.class_names
p.card()                                     # JSON model card (method, task, features, ...)
res = p.predict(inputs, samples=None, level=0.9, seed=None, on_error="fail")
#   inputs in RAW user units: a pandas DataFrame, a numpy array [N, F] / [N, *shape], a tensor,
#   or a list of rows (lists in feature order, or {feature: value} dicts)
res.predictive   # the Predictive of the rows kept (original units)
res.columns      # dict[str, np.ndarray], one entry per output field, first axis N
res.records()    # list[dict], one JSON-able dict per kept row
res.rows         # row numbers of the kept rows; res.skipped: {row: reason} (on_error="skip")
res.frame()      # a pandas DataFrame for files (list fields expanded or JSON-encoded)
p.predictive(inputs, samples=None, seed=None)  # just the Predictive (user units): for calibration

predict_file(p, "rows.csv", "out.parquet", samples=100, on_error="skip")  # streamed in chunks
```

Fields per row. Regression: ``mean``, ``std``, ``epistemic_variance``, ``aleatoric_variance``,
``lower``/``upper`` (the interval at ``level``), ``samples`` (the T sample means);
classification: ``label`` (class name), ``probabilities`` (in ``class_names`` order),
``entropy``, ``mutual_information``, ``expected_entropy``, ``prediction_set`` (class names),
``samples`` (``[T, C]`` per row). Intervals and sets are conformal when the bundle holds a
calibration (``method.metadata["conformal"]``, :mod:`bayesify.posthoc.conformal`: the one made
under the call's sampling policy; else the nearest and a line in ``res.warnings``), else the
predictive's own (equal-tailed mixture interval; smallest top set reaching ``level``). With a
deferral policy in the bundle: ``defer``, ``defer_score``, ``defer_threshold`` (and
``defer_samples`` when it decides sequentially, :mod:`bayesify.posthoc.sequential`); after
adaptive sampling: ``samples_used``. ``p.draw(inputs, seed)`` gives fresh samples of rows, what
a sequential deferral threshold is fitted on.
"""

from bayesify.predictor.core import DEFAULT_SAMPLES, Predictor
from bayesify.predictor.files import FileSummary, predict_file
from bayesify.predictor.result import OnError, PredictionResult

__all__ = [
    "DEFAULT_SAMPLES",
    "FileSummary",
    "OnError",
    "PredictionResult",
    "Predictor",
    "predict_file",
]
