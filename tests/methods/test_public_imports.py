"""The public names survive the regrouping of ``bayesify.methods`` into family folders.

``bayesify.X`` and ``bayesify.methods.X`` give the same object for every name of either
``__all__``, and each family folder still offers its method classes at its old module path
(``from bayesify.methods.laplace import Laplace`` worked when ``laplace`` was a module).
"""

from __future__ import annotations

import importlib

import pytest

import bayesify
import bayesify.methods as methods


@pytest.mark.parametrize("name", sorted(bayesify.__all__))
def test_every_top_level_name_imports(name: str) -> None:
    assert getattr(bayesify, name) is not None
    exec(f"from bayesify import {name}", {})  # the `from` form goes through __getattr__ too


@pytest.mark.parametrize("name", sorted(methods.__all__))
def test_every_methods_name_is_the_top_level_one(name: str) -> None:
    obj = getattr(methods, name)
    assert obj is not None
    if name in bayesify.__all__:
        assert getattr(bayesify, name) is obj


def test_distill_is_the_function_not_its_folder() -> None:
    assert callable(methods.distill) and methods.distill is bayesify.distill
    assert methods.distill.__module__ == "bayesify.methods.distillation.distill"


@pytest.mark.parametrize(
    ("module", "names"),
    [
        ("bayesify.methods.laplace", ["Laplace", "LaplaceConfig"]),
        ("bayesify.methods.swag", ["SWAG", "SWAGConfig", "MultiSWAG", "MultiSWAGConfig"]),
        ("bayesify.methods.mcbn", ["MCBN", "MCBNConfig"]),
        ("bayesify.methods.ensemble", ["DeepEnsemble", "EnsembleConfig"]),
        ("bayesify.methods.tta", ["TTA", "TTAConfig"]),
        ("bayesify.methods.ibnn", ["IBNN", "IBNNConfig"]),
        ("bayesify.methods.stochastic_norm", ["StochasticNorm", "StochasticNormConfig"]),
        ("bayesify.methods.continual", ["VCL", "VCLConfig"]),
    ],
)
def test_old_module_paths_of_the_method_classes(module: str, names: list[str]) -> None:
    mod = importlib.import_module(module)
    for name in names:
        assert getattr(mod, name) is getattr(methods, name)


def test_every_registered_method_lives_in_a_family_folder() -> None:
    for cls in {*methods.METHODS.values()}:
        parts = cls.__module__.split(".")
        assert parts[:2] == ["bayesify", "methods"] and len(parts) == 4, cls.__module__
