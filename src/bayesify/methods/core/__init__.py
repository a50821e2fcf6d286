"""The machinery every method shares: the `Method` face (`base.py`), its options (`config.py`),
accepted inputs (`inputs.py`), `from_pretrained` (`pretrained.py`), `fit` (`training.py`),
the regression likelihood (`likelihood.py`), bundles (`bundle.py`, `bundle_checks.py`), paper
presets (`presets.py`), adaptive sampling (`adaptive.py`), the spread check (`spread.py`),
quantization (`quantize.py`), the plain network as a method (`deterministic.py`) and methods
whose members run in one pass (`members.py`).

No module here imports a method family; the families import it."""
