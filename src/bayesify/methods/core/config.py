"""The options every method has: a frozen dataclass that each method extends with its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from bayesify.options import Likelihood, NoiseObjective, Task, parse_fields


@dataclass(frozen=True)
class MethodConfig:
    """Options every method has. Subclasses add their own fields."""

    task: Task = Task.REGRESSION
    # what τ is fitted for on validation data (regression). PLL is the safe default: a τ fitted
    # for CRPS can shrink to ~0 when the epistemic spread alone scores well, and the mixture PLL
    # of near-delta samples is then meaningless. Teye et al. fit τ for CRPS.
    noise_objective: NoiseObjective = NoiseObjective.PLL
    noise_samples: int = 50  # MC samples used when fitting τ on validation data
    # regression noise: one τ⁻¹ fitted on validation data, or a variance output per input
    likelihood: Likelihood = Likelihood.HOMOSCEDASTIC

    def __post_init__(self) -> None:
        # every field checked against its type: a ValueError names the option, value and valid
        parse_fields(self)
        if self.heteroscedastic and self.task is not Task.REGRESSION:
            raise ValueError("likelihood='heteroscedastic' is a regression option")

    @property
    def heteroscedastic(self) -> bool:
        """Whether the network predicts a noise variance per input."""
        return self.likelihood is Likelihood.HETEROSCEDASTIC

    def _require(self, names: tuple[str, ...], ok: Callable[[Any], bool], what: str) -> None:
        """Raise ``ValueError("<name> must be <what>, got <value>")`` for the first bad field."""
        for name in names:
            if not ok(getattr(self, name)):
                raise ValueError(f"{name} must be {what}, got {getattr(self, name)}")

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.value if hasattr(v, "value") else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MethodConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(
                f"unknown {cls.__name__} option(s) {sorted(unknown)}; valid: {sorted(names)}"
            )
        return cls(**d)

    @classmethod
    def from_saved(cls, d: dict[str, Any]) -> MethodConfig:
        """The config a bundle saved (``to_dict``'s output); a method whose saved options
        meant something else in older bundles says so here."""
        return cls.from_dict(d)
