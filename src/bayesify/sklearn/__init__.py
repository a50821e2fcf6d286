"""scikit-learn estimators over bayesify's methods (needs scikit-learn: ``pip install
bayesify[sklearn]``); see docs/sklearn.md.

```python
from bayesify.sklearn import BayesianClassifier, BayesianRegressor

reg = BayesianRegressor("mc-dropout", epochs=50, random_state=0).fit(X, y)
mean, std = reg.predict(X_new, return_std=True)
reg.predictive(X_new).interval(0.9)          # the whole predictive distribution
clf = BayesianClassifier("ensemble", options={"members": 3}).fit(frame, labels)
clf.predict_proba(frame_new)
```
"""

from bayesify.sklearn.estimators import BayesianClassifier, BayesianRegressor

__all__ = ["BayesianClassifier", "BayesianRegressor"]
