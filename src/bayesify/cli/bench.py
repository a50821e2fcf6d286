"""``bayesify bench <name>``: one command per experiment, each imported only when it runs.

An experiment module defines an options dataclass (its fields are the command's options, see
:mod:`bayesify.bench.options`) and ``run(options) -> markdown``. Register it here with one line
of :data:`EXPERIMENTS`: the command name, ``"module:OptionsClass"`` and the help shown by
``bayesify bench --help`` (the first paragraph of the module's docstring, which is also the
command's own ``--help``; a test checks that they agree).
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from bayesify.cli.lazy import LazyTyper

_B = "bayesify.bench"

#: (command, "module:OptionsClass", help): every `bayesify bench` command
EXPERIMENTS: tuple[tuple[str, str, str], ...] = (
    ("bn-noise", f"{_B}.toys.bn_noise:BNNoiseOptions",
     "How noisy is batch norm? (Shekhovtsov & Flach 2018, Fig. 4.)"),
    ("continual", f"{_B}.continual.command:ContinualOptions",
     "Variational continual learning (Nguyen et al. 2018) on Permuted MNIST (10 tasks, one "
     "head) and Split MNIST (5 tasks, a head per task): VCL with and without a coreset beside "
     "plain fine-tuning, accuracy on every earlier task after each new one, run job by job into "
     "a resumable results store."),
    ("coverage", f"{_B}.toys.coverage:CoverageOptions",
     "Coverage of prediction intervals and sets on held-out data, with and without "
     "conformal calibration."),
    ("distill", f"{_B}.distill.command:DistillOptions",
     "Distilled students against their teachers: Fashion-MNIST LeNet (MNIST and scikit-learn's "
     "digits as OOD), over seeds, and UCI."),
    ("fashion-nodes", f"{_B}.images.fashion_nodes:FashionNodesOptions",
     "Fashion-MNIST with a LeNet-style CNN on CPU: IBNN, IBNN from a pretrained net, "
     "StochasticNorm, weight normalisation without noise, a deterministic net and MCBN."),
    ("flow-banana", f"{_B}.posterior.flow_banana:FlowBananaOptions",
     "The flow posterior against the exact posterior of 2-parameter models where mean-field "
     "fails."),
    ("images", f"{_B}.images.command:ImagesOptions",
     "Fashion-MNIST with MNIST and scikit-learn digits as out-of-distribution sets: accuracy, "
     "calibration, OOD detection, predict time, corruption sweeps, error–coverage curves and "
     "MCBN's batch-size sweep per method, run job by job (one per method, model and seed) into "
     "a resumable results store."),
    ("mcbn-collapse", f"{_B}.toys.mcbn_collapse:MCBNCollapseOptions",
     "MCBN's uncertainty collapse with large batches (Mukhoti et al. 2020, Fig. 1), and its "
     "fix."),
    ("noise-toy", f"{_B}.toys.noise_toy:NoiseToyOptions",
     "Learned versus fitted noise on a 1-D toy whose noise grows with |x|: each method with "
     "the homoscedastic likelihood (one τ⁻¹ fitted on validation data) and the heteroscedastic "
     "one (a variance output per input), several seeds, run job by job into a resumable "
     "results store."),
    ("posterior", f"{_B}.posterior.command:PosteriorOptions",
     "How close each method's predictive is to the true posterior's: an HMC reference "
     "(full-batch NUTS, 4 chains) on small problems, every method fitted on the same data and "
     "scored against it, run job by job into a resumable results store -> "
     "benchmarks/posterior.md and a figure of the 1-D toy."),
    ("serve", f"{_B}.serve.command:ServeBenchOptions",
     "Serving latency and throughput: a bounded closed-loop load on a real bayesify serve "
     "process."),
    ("speed", f"{_B}.speed.command:SpeedOptions",
     "One-pass prediction vs the loop of T passes (MCBN: also vs Teye et al.'s Algorithm 1), "
     "peak memory, and training time per epoch relative to the deterministic network -> "
     "markdown."),
    ("toy-depth", f"{_B}.toys.toy_depth:ToyDepthOptions",
     "Trinh et al. Fig. 1 style toy: y = x³ + N(0, 3²), 30 points on [-4, 4], ReLU MLPs of "
     "depth 1…5 with 256 units per layer, IBNN vs Bayes by Backprop. Their claim: BBB's "
     "epistemic uncertainty collapses as depth grows, IBNN's does not."),
    ("uci", f"{_B}.uci.command:UCIBenchOptions",
     "UCI regression under Gal's or Teye et al.'s protocol, every method, job by job into a "
     "resumable results store -> benchmarks/uci.md with the published figures beside ours, a "
     "CSV of every row and uncertainty–error plots."),
)  # fmt: skip


def bench_command(options: type) -> typer.Typer:
    """The command of an experiment from its options class: its module's ``run`` does the
    work (:func:`bayesify.bench.options.add_bench_command`)."""
    from bayesify.bench.options import add_bench_command

    single = typer.Typer(add_completion=False)
    add_bench_command(single, options, sys.modules[options.__module__].run)
    return single


def make_bench_app() -> Any:
    """The ``bayesify bench`` group with every experiment registered lazily."""
    bench = LazyTyper(help="Benchmarks on real data.", no_args_is_help=True)
    for name, target, help in EXPERIMENTS:
        bench.lazy_command(name, target, help, build=bench_command)
    return bench


bench_app = make_bench_app()
