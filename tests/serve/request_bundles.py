"""Bundles the request-field tests serve: a table classifier with named classes (twelve number
features, a text category and a boolean column, one-hot as ``False``/``True`` the way table
training encodes booleans) without calibrations, and a 4-number classifier whose conformal
sets are calibrated under fixed T = 8 and adaptive ``tol=0.05 T=4..16`` only."""

from __future__ import annotations

from pathlib import Path

import torch

SPECIES = ["setosa", "versicolor", "virginica"]
NUMBERS = [f"f{i}" for i in range(12)]
ZONES = ["east", "west"]
CALIBRATED_POLICY = (0.05, 4, 16)  # tol, start, max_samples


def table_row(i: int) -> dict:
    """One raw row of the table bundle (deterministic in ``i``)."""
    g = torch.Generator().manual_seed(i)
    values = torch.randn(len(NUMBERS), generator=g).tolist()
    return {**dict(zip(NUMBERS, values, strict=True)), "zone": ZONES[i % 2],
            "wet": "True" if i % 3 else "False"}  # fmt: skip


def make_table_bundle(path: Path) -> Path:
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp

    prep = Preprocessing(features=[*NUMBERS, "zone", "wet"],
                         categories={"zone": ZONES, "wet": ["False", "True"]},
                         input_shape=[len(NUMBERS) + 4], target="species",
                         class_names=SPECIES)  # fmt: skip
    x = torch.as_tensor(prep.rows_to_array([table_row(i) for i in range(300)])[0],
                        dtype=torch.float32)  # fmt: skip
    y = torch.bucketize(x[:, 0] + x[:, 12] - x[:, 14], torch.tensor([-0.5, 0.5]))
    torch.manual_seed(0)
    method = MCDropout(mlp(x.shape[1], 3, (16,), norm=None, dropout=0.3), task="classification")
    method.fit((x, y), epochs=5, batch_size=64, lr=1e-2, progress=False)
    method.preprocessing = prep
    method.save(path)
    return path


def make_calibrated_bundle(path: Path) -> Path:
    from bayesify.data.preprocessing import Preprocessing
    from bayesify.methods import MCDropout
    from bayesify.models import mlp
    from bayesify.posthoc.conformal import calibrate_conformal
    from bayesify.posthoc.sampling import SamplingPolicy

    g = torch.Generator().manual_seed(1)
    x = torch.randn(400, 4, generator=g)
    y = torch.bucketize(x[:, 0] + 0.5 * x[:, 1], torch.tensor([-0.5, 0.5]))
    torch.manual_seed(0)
    method = MCDropout(mlp(4, 3, (16,), norm=None, dropout=0.3), task="classification")
    method.fit((x[:300], y[:300]), epochs=5, batch_size=64, lr=1e-2, progress=False)
    method.preprocessing = Preprocessing(input_shape=[4], class_names=["low", "mid", "high"])
    policies = [SamplingPolicy.fixed(8), SamplingPolicy.adaptive(*CALIBRATED_POLICY)]
    calibrate_conformal(method, (x[300:], y[300:]), policies=policies)
    method.save(path)
    return path
