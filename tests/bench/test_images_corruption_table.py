"""`bench images`'s corruption table: each cell the mean ± standard error over the method's
seeds, against scipy's; one seed shows its value alone."""

from __future__ import annotations

import numpy as np
from scipy.stats import sem

from bayesify.bench.images.figures import KINDS, corruption_table


def test_corruption_table_cells_are_scipys_mean_and_standard_error_over_seeds():
    rng = np.random.default_rng(0)
    runs = [{"corruption": {kind: [{"level": lv, **{k: float(rng.random()) for k in
                                                       ("entropy", "aleatoric", "epistemic",
                                                        "error")}} for lv in (0.0, 0.5, 1.0)]
                            for kind in KINDS}} for _ in range(3)]  # fmt: skip
    lines = corruption_table({"mcbn": runs, "one": runs[:1]})
    kind, label = next(iter(KINDS.items()))
    row = next(x for x in lines if x.startswith(f"| mcbn | 3 | {label.split()[0]} | 1 |"))
    errors = np.array([r["corruption"][kind][-1]["error"] for r in runs])
    assert row.endswith(f"| {errors.mean():.3f} ± {sem(errors):.3f} |")
    single = next(x for x in lines if x.startswith(f"| one | 1 | {label.split()[0]} | 0 |"))
    assert "±" not in single  # one seed: the value alone
