"""bayesify.sklearn: scikit-learn's own estimator checks, DataFrames with text columns,
Pipeline / cross_val_score / GridSearchCV, and MAPIE's split-conformal wrappers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("sklearn")
from sklearn.datasets import load_iris  # noqa: E402
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from bayesify.sklearn import BayesianClassifier, BayesianRegressor  # noqa: E402

#: small and quick: scikit-learn's checks fit each estimator some 50 times
FAST = dict(epochs=8, lr=0.01, hidden_layer_sizes=(16,), samples=10,
            options={"bank_size": 16, "noise_samples": 10})  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny networks: threads only contend on a shared machine
    yield
    torch.set_num_threads(threads)


def _expected_failures(estimator) -> dict[str, str]:
    if not isinstance(estimator, BayesianClassifier):
        return {}
    # Class probabilities are float32 (Predictive.from_logits softmaxes to float32), and the
    # vectorised exp rounds a row by one ulp (~1e-7 relative) depending on its position in
    # the batch; these checks compare predict_proba at rtol 1e-7. The samples themselves do
    # not depend on the order (MCBN draws per sample group); labels and predict agree.
    why = "float32 class probabilities: one-ulp differences by row position (rtol 1e-7)"
    return {"check_methods_sample_order_invariance": why,
            "check_methods_subset_invariance": why}  # fmt: skip


@parametrize_with_checks(
    [BayesianRegressor(**FAST), BayesianClassifier(**FAST)],
    expected_failed_checks=_expected_failures,
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _table(n: int, seed: int) -> tuple[pd.DataFrame, np.ndarray]:
    """y = 3 x + 2 [colour == 'red'] + 10 + small noise, with a text column."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    colour = rng.choice(["red", "green", "blue"], size=n)
    y = 3 * x + 2 * (colour == "red") + 10 + rng.normal(scale=0.1, size=n)
    return pd.DataFrame({"x": x, "colour": colour}), y


def test_regressor_reads_dataframes_with_text_columns_in_the_units_of_y():
    frame, y = _table(300, 0)
    test, y_test = _table(200, 1)
    reg = BayesianRegressor("mc-dropout", epochs=40, lr=0.01, hidden_layer_sizes=(32,),
                            samples=30, random_state=0).fit(frame, y)  # fmt: skip
    assert list(reg.feature_names_in_) == ["x", "colour"] and reg.n_features_in_ == 2
    assert reg.method_.preprocessing.categories == {"colour": ["blue", "green", "red"]}
    mean, std = reg.predict(test, return_std=True)
    assert r2_score(y_test, mean) > 0.95  # scikit-learn's R², not ours
    assert reg.score(test, y_test) == pytest.approx(r2_score(y_test, mean))
    pred = reg.predictive(test)
    np.testing.assert_allclose(std, pred.std.numpy())
    assert (std > 0).all() and float(pred.epistemic_variance.mean()) > 0
    np.testing.assert_array_equal(mean, reg.predict(test))  # seeded: the same answer again
    with pytest.raises(ValueError, match="feature names"):
        reg.predict(test[["colour", "x"]])


def test_classifier_in_pipeline_and_cross_val_score_keeps_its_labels():
    X, y = load_iris(return_X_y=True)
    names = np.array(["setosa", "versicolor", "virginica"])[y]
    clf = BayesianClassifier("mc-dropout", epochs=40, lr=0.02, hidden_layer_sizes=(16,),
                             samples=10, random_state=0)  # fmt: skip
    pipe = make_pipeline(StandardScaler(), clf)
    scores = cross_val_score(pipe, X, names, cv=3)
    assert scores.mean() > 0.85 and scores.min() > 0.75, scores
    pipe.fit(X, names)
    assert list(pipe.classes_) == ["setosa", "versicolor", "virginica"]
    probs = pipe.predict_proba(X)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-9)
    labels = pipe.predict(X)
    np.testing.assert_array_equal(labels, pipe.classes_[probs.argmax(1)])
    assert accuracy_score(names, labels) > 0.85


def test_grid_search_over_method_and_its_main_option():
    frame, y = _table(120, 2)
    grid = [{"method": ["mc-dropout"], "dropout": [0.05, 0.3]},
            {"method": ["ensemble"], "options": [{"members": 2}]}]  # fmt: skip
    search = GridSearchCV(BayesianRegressor(epochs=6, lr=0.01, hidden_layer_sizes=(16,),
                                            samples=8, random_state=0), grid, cv=2)  # fmt: skip
    search.fit(frame, y)
    assert len(search.cv_results_["params"]) == 3
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    best = search.best_estimator_
    assert best.method_.name == best.method  # the method the grid picked was fitted
    if best.method == "ensemble":
        assert best.method_.config.members == 2
    else:
        assert best.method_.net is not None and best.dropout in (0.05, 0.3)
    assert search.score(frame, y) == pytest.approx(best.score(frame, y))


def test_mapie_split_conformal_intervals_and_sets_cover():
    mapie = pytest.importorskip("mapie")
    from mapie.classification import SplitConformalClassifier
    from mapie.regression import SplitConformalRegressor

    assert mapie.__version__ >= "1"
    # numbers only: MAPIE probes a fitted estimator with a row of zeros, not a text category
    frame, y = _table(300, 3)
    test, y_test = _table(400, 4)
    frame, test = (f.assign(colour=(f.colour == "red").astype(float)) for f in (frame, test))
    reg = BayesianRegressor("mc-dropout", epochs=15, lr=0.01, hidden_layer_sizes=(16,),
                            samples=10, random_state=0)  # fmt: skip
    conf = SplitConformalRegressor(reg, confidence_level=0.9, prefit=False)
    conf.fit(frame[:150], y[:150]).conformalize(frame[150:], y[150:])
    _, bounds = conf.predict_interval(test)  # [N, 2, 1]
    covered = (bounds[:, 0, 0] <= y_test) & (y_test <= bounds[:, 1, 0])
    assert 0.84 <= covered.mean() <= 0.97, covered.mean()  # 0.9 ± 3 binomial sd at n = 400
    X, labels = load_iris(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(X))
    X, labels = X[order], labels[order]
    clf = BayesianClassifier("mc-dropout", epochs=20, lr=0.01, hidden_layer_sizes=(16,),
                             samples=10, random_state=0)  # fmt: skip
    sets = SplitConformalClassifier(clf, confidence_level=0.9, prefit=False)
    sets.fit(X[:60], labels[:60]).conformalize(X[60:105], labels[60:105])
    _, members = sets.predict_set(X[105:])  # [N, C, 1] bool
    assert members[np.arange(45), labels[105:], 0].mean() >= 0.8


def test_columns_are_read_by_the_kinds_bayesify_train_uses():
    """Digits stored as text are numbers and true/false columns one-hot, as in a table bundle
    (data.columns.column_kind), not every object column one-hot."""
    from bayesify.app.table_jobs import build_table_training

    rng = np.random.default_rng(0)
    n = 120
    frame = pd.DataFrame(
        {
            "digits": rng.integers(0, 50, n).astype(str),
            "flag": rng.random(n) < 0.5,
            "city": rng.choice(["a", "b"], n),
        }
    )
    y = frame["digits"].astype(float).to_numpy() + frame["flag"] + rng.normal(0, 0.1, n)
    reg = BayesianRegressor("mc-dropout", epochs=2, random_state=0).fit(frame, y)
    cats = reg.method_.preprocessing.categories
    assert set(cats) == {"flag", "city"} and cats["flag"] == ["False", "True"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        frame.assign(y=y).to_csv(path, index=False)
        job, _ = build_table_training("mc-dropout", path, "y", seed=0)
    assert set(job.preprocessing.categories) == set(cats)
