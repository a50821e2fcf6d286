"""One-pass prediction vs the loop of T passes (MCBN: also vs Teye et al.'s Algorithm 1), peak
memory, and training time per epoch relative to the deterministic network -> markdown.

``bayesify bench speed``; cases and measurements live in
:mod:`bayesify.bench.speed.cases`.

Timings are wall seconds of complete ``Predictive`` constructions; the variants of a cell run
interleaved (rotating order) after warm-up, so the per-repetition ratios are paired and machine
noise hits all variants alike. We report medians and inter-quartile ranges.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import torch

from bayesify.bench.machine import machine_description
from bayesify.bench.options import check_choices, command_line, option, write_report
from bayesify.bench.speed.cases import (
    METHOD_CLASSES,
    MODELS,
    build_case,
    peak_memory_cpu,
    peak_memory_cuda,
    random_data,
    resolve_method,
    time_interleaved,
    variants,
)
from bayesify.methods import Method
from bayesify.progress import progress_bar
from bayesify.train import as_loader, make_optimizer, train_loop

log = logging.getLogger(__name__)


#: extra training rows: (method, option overrides) for settings users trade speed against
TRAIN_VARIANTS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("ibnn", (("train_samples", 2),)),
    ("bbb", (("conv_estimator", "flipout"),)),
    ("bbb", (("last_k", 2),)),
)


@dataclass(frozen=True)
class SpeedOptions:
    """Options of ``bayesify bench speed``: the grid and the measurement protocol."""

    command: ClassVar[str] = "speed"
    methods: tuple[str, ...] = option(METHOD_CLASSES, "Method names (class or registry names).")
    models: tuple[str, ...] = option(MODELS, f"Networks: {', '.join(MODELS)}.")
    n: tuple[int, ...] = option((1, 64, 1024), "Query rows N.")
    t: tuple[int, ...] = option((10, 100), "MC samples T.")
    repeats: int = option(5, "Timed repetitions per cell.")
    warmup: int = option(1, "Untimed warm-up rounds per cell.")
    bank_batch: int = option(32, "MCBN's mini-batch size b (bank and Algorithm 1).")
    predict: bool = option(True, "The prediction grid (off: training times only).")
    memory: bool = option(True, "Peak memory of every cell (one extra call per variant).")
    train: bool = option(True, "Training time per epoch vs the deterministic network.")
    train_models: tuple[str, ...] = option(("mlp", "lenet"), "Networks for training time.")
    train_batch_size: int = option(32, "Mini-batch size for training time.")
    train_rows: int = option(640, "Rows per timed training epoch.")
    max_cell_rows: int = option(20_000, "Skip prediction cells with T*N above (0: none).")
    device: str = option("cpu", "cpu or cuda.")
    threads: int = option(1, "torch CPU threads.")
    out: str = option("benchmarks/speed.md", "Markdown report.")

    def __post_init__(self) -> None:
        check_choices("models", self.models, MODELS)
        if self.train:
            check_choices("train models", self.train_models, MODELS)
        if not self.methods:
            raise ValueError("no methods given")
        counts = {"n": self.n, "t": self.t}
        for name, values in counts.items():
            if not values or min(values) < 1:
                raise ValueError(f"{name} needs values >= 1, got {values}")
        positive = {"repeats": self.repeats, "bank_batch": self.bank_batch,
                    "train_batch_size": self.train_batch_size, "train_rows": self.train_rows,
                    "threads": self.threads}  # fmt: skip
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.warmup < 0 or self.max_cell_rows < 0:
            raise ValueError("warmup and max_cell_rows must be >= 0")
        try:
            kind = torch.device(self.device).type
        except RuntimeError:
            kind = None
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        if kind == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda: this torch build sees no CUDA GPU")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(q25, median, q75) of ``xs``."""
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[1], q[2]


@dataclass
class Cell:
    """Timings of one (method, model, N, T): seconds per repetition per variant."""

    method: str
    model: str
    n: int
    t: int
    times: dict[str, list[float]]
    memory: dict[str, float | None] = field(default_factory=dict)

    def ratio(self, slow: str, fast: str = "one-pass") -> tuple[float, float, float] | None:
        """(q25, median, q75) of the paired per-repetition ratios ``slow / fast``."""
        if slow not in self.times:
            return None
        return quartiles([s / f for s, f in zip(self.times[slow], self.times[fast], strict=True)])


@dataclass
class TrainTiming:
    method: str
    model: str
    times: dict[str, list[float]]  # "method" and "deterministic": seconds per epoch
    options: dict[str, Any] = field(default_factory=dict)  # non-default method options

    @property
    def label(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.method} ({opts})" if opts else self.method

    @property
    def ratio(self) -> tuple[float, float, float]:
        m, d = self.times["method"], self.times["deterministic"]
        return quartiles([a / b for a, b in zip(m, d, strict=True)])


@dataclass
class SpeedResult:
    settings: SpeedOptions
    cells: list[Cell] = field(default_factory=list)
    training: list[TrainTiming] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def _epoch_fn(
    method_name: str,
    model: str,
    s: SpeedOptions,
    net_of: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[[int], object]:
    """One training epoch of ``method_name`` (with ``options``) on ``model`` (the one training
    loop), on the network variant of ``net_of`` (default: the method's own)."""
    case = build_case(method_name, model, device=s.device, net_of=net_of, options=options)
    m = case.method
    x, y = random_data(model, s.train_rows, seed=3)
    loader = as_loader((x, y), s.train_batch_size, shuffle=True, seed=0)
    opt = make_optimizer(m.param_groups(1e-3, 0.0), "adam", 1e-3)
    n = len(x)
    dev = torch.device(s.device)

    if type(m).fit is not Method.fit:  # the method trains itself (e.g. an ensemble's members)
        return lambda _r: m.fit((x, y), epochs=1, batch_size=s.train_batch_size, progress=False)

    def epoch(_r: int) -> object:
        return train_loop(m.net, lambda a, b, p: m.objective(a, b, p, n), loader, opt, epochs=1,
                          after_step=m.after_step, device=dev, progress=False)  # fmt: skip

    return epoch


def run_speed(
    s: SpeedOptions,
    progress: bool = True,
    train_variants: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = TRAIN_VARIANTS,
) -> SpeedResult:
    """Run the grid of ``s``; methods that are not registered are skipped with a note.
    ``train_variants``: extra training rows, (method, option overrides)."""
    result = SpeedResult(s)
    dev = torch.device(s.device)
    names: list[str] = []
    for requested in s.methods:
        reg = resolve_method(requested)
        if reg is None:
            result.skipped.append(f"{requested}: not registered (not importable yet)")
        else:
            names.append(reg)
    jobs = [(m, model, n, t) for m in names for model in s.models for n in s.n for t in s.t]
    jobs = jobs if s.predict else []
    for name, model, n, t in progress_bar(jobs, desc="bench speed", progress=progress):
        if s.max_cell_rows and n * t > s.max_cell_rows:
            result.skipped.append(f"{name}/{model} N={n} T={t}: T·N above the cell limit")
            continue
        try:
            case = build_case(name, model, bank_batch=s.bank_batch, device=s.device)
        except (TypeError, ValueError, RuntimeError) as e:
            result.skipped.append(f"{name}/{model}: cannot build ({e})")
            continue
        x, _ = random_data(model, n, seed=2)
        fns = variants(case, x.to(dev), t, s.bank_batch)
        cell = Cell(name, model, n, t, time_interleaved(fns, s.repeats, s.warmup, dev))
        if s.memory:
            for v, fn in fns.items():
                if v == "floor":
                    continue
                if dev.type == "cuda":
                    cell.memory[v] = peak_memory_cuda(lambda fn=fn: fn(0), dev)
                else:
                    cell.memory[v] = peak_memory_cpu(lambda fn=fn: fn(0))
        result.cells.append(cell)
        log.info("%s/%s N=%d T=%d: loop/one %.2f", name, model, n, t, cell.ratio("loop")[1])
    if s.train:
        runs = [(m, {}) for m in names]
        runs += [(m, dict(opts)) for m, opts in train_variants if m in names]
        pairs = [(m, opts, model) for m, opts in runs for model in s.train_models]
        for name, opts, model in progress_bar(pairs, desc="bench train", progress=progress):
            try:
                fns = {
                    "method": _epoch_fn(name, model, s, options=opts),
                    "deterministic": _epoch_fn("deterministic", model, s, net_of=name),
                }
                times = time_interleaved(fns, s.repeats, s.warmup, dev)
            except (TypeError, ValueError, RuntimeError) as e:
                result.skipped.append(f"{name}/{model} training: {type(e).__name__}: {e}")
                continue
            result.training.append(TrainTiming(name, model, times, opts))
    return result


# ---------------------------------------------------------------------- report
def _ms(xs: list[float]) -> str:
    q25, med, q75 = quartiles(xs)
    return f"{1e3 * med:.2f} ({1e3 * (q75 - q25):.2f})"


def _ratio(r: tuple[float, float, float] | None) -> str:
    return "" if r is None else f"{r[1]:.1f}× [{r[0]:.1f}, {r[2]:.1f}]"


def _mib(v: float | None | str) -> str:
    return "" if v is None or isinstance(v, str) else f"{v:.1f}"


def targets(result: SpeedResult) -> list[str]:
    """The issue's targets, each with the measured median and MET / MISSED."""
    lines = []

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**missed**"

    for c in result.cells:
        if c.method == "mcbn" and c.model == "lenet" and c.n == 1 and c.t == 100:
            r = c.ratio("teye")
            if r is not None:
                lines.append(f"- MCBN one-pass vs Teye's Algorithm 1, LeNet, N=1, T=100, "
                             f"b={result.settings.bank_batch}: {r[1]:.1f}× "
                             f"(target ≥ 20×) {verdict(r[1] >= 20)}")  # fmt: skip
    for c in result.cells:
        if c.n == 1 and c.t == 100:
            r = c.ratio("loop")
            lines.append(f"- {c.method} / {c.model}, N=1, T=100, one-pass vs loop: {r[1]:.1f}× "
                         f"(target ≥ 3×) {verdict(r[1] >= 3)}")  # fmt: skip
    limits = {"ibnn": 1.5, "bbb": 2.0}
    for tr in result.training:
        if tr.method in limits and not tr.options:
            r, lim = tr.ratio[1], limits[tr.method]
            lines.append(f"- training per epoch, {tr.method} / {tr.model}: {r:.2f}× "
                         f"deterministic (target ≤ {lim}×) {verdict(r <= lim)}")  # fmt: skip
    return lines


def notes(bank_batch: int) -> list[str]:
    """The report's notes on the protocol (``bank_batch``: MCBN's mini-batch size b)."""
    return [
        "- The floor is the same network variant without stochastic layers, one plain pass over "
        "the same T·N rows in the same row chunks, ending in the same `Predictive` "
        "(`speed_cases.plain_pass`): one-pass / floor is what drawing the samples costs beyond "
        "the rows themselves.",
        "- Networks have random weights (timing does not depend on training); MCBN's bank holds "
        f"128 mini-batches of b = {bank_batch} random training rows; Algorithm 1 draws a fresh "
        "mini-batch of b rows per sample from 512 random training rows and forwards it with the "
        "query.",
        "- The loop reference is each method's `reference_samples` (T passes over N rows with "
        "the same random draws as the one pass), converted to the same `Predictive`.",
        "- Every method follows its network's device: per-group keys (and MCBN's bank rows) are "
        "drawn from the caller's generator on its device, the per-row numbers are hashed on the "
        "parameters' device (`bayesify.nn.row_noise`); `tests/test_cuda.py` checks it and is "
        "skipped where no GPU is present.",
        '- Prediction runs with the default `max_rows="auto"` (CPU: about 2**17 input numbers '
        "per forward, 64–1024 rows); plain-network ensemble members are forwarded once each.",
    ]


def speed_markdown(result: SpeedResult, command: str) -> str:
    """The committed report: command, machine, tables, targets."""
    s = result.settings
    gpu = torch.cuda.is_available()
    out = [
        "# Speed: one-pass Monte Carlo prediction vs the loop",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_description(s.device)}; device `{s.device}`. "
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        "The machine is shared with other jobs and noisy: absolute times wander; the *ratios* are "
        "paired (the variants of a cell run interleaved in a rotating order, after "
        f"{s.warmup} warm-up round(s), {s.repeats} repetitions) and are the figures to read. "
        "Times: median (IQR) in ms per complete `Predictive`; ratios: median "
        "[25%, 75%] of the per-repetition ratios.",
        "",
        "Peak memory (MiB, one extra call per variant): on CPU the peak rise of the "
        "process's resident set size during one call (glibc heap trimmed first, RSS polled "
        "every 0.5 ms from /proc/self/statm; short-lived peaks can be missed, so a lower bound; "
        "torch has no CPU allocator statistics); on CUDA `torch.cuda.max_memory_allocated` "
        "above the level before the call.",
        "",
        "## Prediction",
        "",
        "| method | model | N | T | one-pass ms | loop ms | loop / one-pass | "
        "one-pass / floor | Alg. 1 / one-pass | peak MiB one / loop / Alg. 1 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in result.cells:
        mem = " / ".join(_mib(v) for v in c.memory.values()) if c.memory else ""
        floor = _ratio(c.ratio("one-pass", "floor")) if "floor" in c.times else ""
        out.append(f"| {c.method} | {c.model} | {c.n} | {c.t} | {_ms(c.times['one-pass'])} | "
                   f"{_ms(c.times['loop'])} | {_ratio(c.ratio('loop'))} | {floor} | "
                   f"{_ratio(c.ratio('teye'))} | {mem} |")  # fmt: skip
    if result.training:
        out += [
            "",
            "## Training time per epoch",
            "",
            f"{s.train_rows} random rows, batch size {s.train_batch_size}, Adam (torch's fused "
            "kernel); the deterministic baseline trains the method's own network variant (e.g. "
            "with its dropout layers for MC dropout, without batch norm for BBB, IBNN and "
            "StochasticNorm) plainly, with the plain loss. Rows with options are settings "
            "users may choose instead of the defaults.",
            "",
            "| method | model | method ms/epoch | deterministic ms/epoch | ratio |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        for tr in result.training:
            out.append(f"| {tr.label} | {tr.model} | {_ms(tr.times['method'])} | "
                       f"{_ms(tr.times['deterministic'])} | {_ratio(tr.ratio)} |")  # fmt: skip
    out += ["", "## Targets (issue 5)", "", *(targets(result) or ["- (not in this grid)"])]
    out += ["", "## Notes", "", *notes(s.bank_batch)]
    if not s.device.startswith("cuda"):
        lent = "one is present but this run used the CPU" if gpu else "none was lent to this run"
        out.append(f"- GPU figures are pending a machine with a GPU ({lent}); rerun with "
                   "`--device cuda`.")  # fmt: skip
    if result.skipped:
        out += ["", "## Skipped", "", *(f"- {line}" for line in result.skipped)]
    return "\n".join(out) + "\n"


def run(opts: SpeedOptions) -> str:
    """Measure the grid of ``opts``, write the markdown report to ``opts.out`` and return it."""
    torch.set_num_threads(opts.threads)
    text = speed_markdown(run_speed(opts), command_line(opts))
    write_report(opts.out, text)
    log.info("wrote %s", Path(opts.out))
    return text
