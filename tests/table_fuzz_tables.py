"""The tables ``tests/test_table_fuzz.py`` draws: column and target kinds (those trained with and
those refused), awkward column names, the Hypothesis plan of a table and the frame it makes."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import strategies as st

#: feature column kinds a table trains with (or whose refusal depends on the rows drawn)
KINDS = [
    "float", "int", "Int64", "Float64", "bool", "category", "text", "digit_text", "mixed",
    "constant", "near_constant", "part_constant", "tiny", "id_int", "id_text", "float32",
    "uint8", "negative_zero", "unicode_text", "offset", "big", "two_values",
]  # fmt: skip
#: feature column kinds every table holding one is refused for
REFUSED = ["int_missing", "datetime", "iso_text", "numbers_and_a_word", "extreme", "inf_nan",
           "many_text"]  # fmt: skip
#: target kinds
TARGETS = ["float", "float_large", "float_int", "int_labels", "text_labels", "bool_labels",
           "two_labels_rare", "digit_text", "float_tiny", "float_huge", "float_constant",
           "float_offset", "float_outlier", "one_row_class", "many_labels"]  # fmt: skip
NAMES = [
    "x", "a b", " a", "a ", "Ä©cènt", "温度", "🌡 temp", "1", "0.5", "-3", "nan", "None",
    "True", "row", "index", "Unnamed: 0", "a,b", 'q"uote', "tab\there", "x.1", "#", "",
    "very long " * 8, "ß", "naïve", "𝑥",
]  # fmt: skip


def _column(kind: str, n: int, rng: np.random.Generator) -> pd.Series | np.ndarray | list:
    """``n`` values of one kind of column."""
    if kind == "float":
        return rng.normal(rng.uniform(-100, 100), 10 ** rng.uniform(-3, 3), n)
    if kind == "float32":
        return rng.normal(size=n).astype(np.float32)
    if kind == "uint8":
        return rng.integers(0, 255, n).astype(np.uint8)
    if kind == "int":
        return rng.integers(-1000, 1000, n)
    if kind == "int_missing":
        v = rng.integers(0, 10, n).astype(float)
        v[rng.random(n) < 0.2] = np.nan
        return v
    if kind == "Int64":
        v = pd.array(rng.integers(-5, 5, n), dtype="Int64")
        if rng.random() < 0.5:
            v[rng.random(n) < 0.1] = pd.NA
        return pd.Series(v)
    if kind == "Float64":
        return pd.Series(pd.array(rng.normal(size=n), dtype="Float64"))
    if kind == "bool":
        return rng.random(n) < rng.uniform(0.05, 0.95)
    if kind == "category":
        return pd.Series(pd.Categorical(rng.choice(["lo", "mid", "hi"], n)))
    if kind == "text":
        return rng.choice(["red", "green", "blue", "Red ", "rød"], n)
    if kind == "unicode_text":
        return rng.choice(["été", "雪", "🙂", "a\u0301", "", " "], n)
    if kind == "many_text":
        return rng.choice([f"v{i}" for i in range(80)], n)
    if kind == "digit_text":
        return rng.integers(0, 30, n).astype(str)
    if kind == "datetime":
        return pd.Series(
            pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 999, n), "D")
        )
    if kind == "iso_text":
        days = pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 999, n), "D")
        return days.strftime("%Y-%m-%d").to_numpy(object)
    if kind == "mixed":
        return np.array([int(v) if v < 5 else f"k{v}" for v in rng.integers(0, 10, n)], object)
    if kind == "numbers_and_a_word":
        v = rng.normal(size=n).astype(object)
        v[rng.integers(n)] = "abc"
        return v
    if kind == "constant":
        return np.full(n, 3.5)
    if kind == "near_constant":
        v = np.zeros(n)
        v[rng.integers(n)] = 1.0
        return v
    if kind == "part_constant":
        v = rng.normal(size=n)
        v[: n // 2 + rng.integers(0, n // 2 + 1)] = 7.0
        return v
    if kind == "extreme":
        v = rng.normal(size=n)
        v[rng.integers(n)] = rng.choice([1e30, -1e30, 3e38, 1e300])
        return v
    if kind == "tiny":
        return rng.normal(size=n) * 1e-30
    if kind == "inf_nan":
        v = rng.normal(size=n)
        v[rng.integers(n)] = rng.choice([np.inf, -np.inf, np.nan])
        return v
    if kind == "offset":  # a large offset, small spread: float32 keeps few digits of it
        return 1e9 + rng.normal(size=n) * 1e-3
    if kind == "big":
        return rng.normal(size=n) * 1e20
    if kind == "two_values":
        return rng.choice([-1e-7, 1e7], n)
    if kind == "negative_zero":
        return rng.choice([0.0, -0.0, 1.0], n)
    if kind == "id_int":
        return np.arange(n) + int(rng.integers(0, 10**6))
    if kind == "id_text":
        return np.array([f"id-{i:05d}" for i in rng.permutation(n)], object)
    raise AssertionError(kind)


def _target(kind: str, n: int, rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    """``n`` target values of one kind, partly explained by the numbers ``x`` ([n])."""
    signal = x + rng.normal(size=n)
    if kind == "float":
        return signal * 3 + 10
    if kind == "float_large":
        return signal * 1e15
    if kind == "float_tiny":
        return signal * 1e-25
    if kind == "float_huge":
        return signal * 1e17
    if kind == "float_constant":
        return np.full(n, 2.5)
    if kind == "float_offset":
        return 1e9 + signal * 1e-3
    if kind == "float_outlier":
        v = signal.copy()
        v[rng.integers(n)] = 1e12
        return v
    if kind == "float_int":
        return np.round(signal * 20).astype(int)  # many whole numbers: regression or classes
    cut = np.digitize(signal, np.quantile(signal, [1 / 3, 2 / 3]))
    if kind == "int_labels":
        return np.array([3, 7, 11])[cut]
    if kind == "text_labels":
        return np.array(["cat", "dog", "🐟"])[cut]
    if kind == "bool_labels":
        return signal > np.median(signal)
    if kind == "two_labels_rare":
        v = np.full(n, "common", object)
        v[rng.integers(n)] = "rare"
        return v
    if kind == "digit_text":
        return np.array(["0", "1", "2"])[cut]
    if kind == "one_row_class":
        v = np.array(["a", "b"])[cut % 2].astype(object)
        v[rng.integers(n)] = "c"
        return v
    if kind == "many_labels":
        return rng.integers(0, max(2, n // 2), n)
    raise AssertionError(kind)


@st.composite
def tables(draw):
    """A table plan: rows, columns (kind, name), target (kind, name), format, method, seed."""
    n = draw(st.sampled_from([8, 9, 12, 20, 40, 100, 300]))
    kinds = draw(st.lists(st.sampled_from(KINDS * 4 + REFUSED), min_size=1, max_size=5))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=len(kinds) + 1,
                          max_size=len(kinds) + 1, unique=True))  # fmt: skip
    return {
        "n": n,
        "columns": list(zip(names[:-1], kinds, strict=True)),
        "target": (names[-1], draw(st.sampled_from(TARGETS))),
        "format": draw(st.sampled_from(["csv", "parquet"])),
        "method": draw(st.sampled_from(["mcbn", "mc-dropout"])),
        "batch_size": draw(st.sampled_from([8, 4, 32])),
        "conformal": draw(st.booleans()),
        "on_error": draw(st.sampled_from(["skip", "skip", "fail"])),
        "outputs": draw(st.sampled_from(["csv", "csv", "parquet"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _frame(plan: dict) -> pd.DataFrame:
    rng = np.random.default_rng(plan["seed"])
    n = plan["n"]
    data = {name: _column(kind, n, rng) for name, kind in plan["columns"]}
    target, kind = plan["target"]
    data[target] = _target(kind, n, rng, rng.normal(size=n))
    return pd.DataFrame(data)
