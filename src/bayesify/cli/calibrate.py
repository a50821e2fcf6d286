"""``bayesify calibrate``: fit a bundle's deferral policy and/or conformal intervals and sets on
validation data, under the sampling the predictor serves, and save them in the bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bayesify.cli.common import Threads, set_threads


def calibrate(
    bundle: Annotated[Path, typer.Argument(help="Bundle folder to calibrate (rewritten).")],
    data: Annotated[
        str | None,
        typer.Option(
            help="Validation data: a table file (CSV, Parquet, .npz) of rows the model has not "
            "trained on, with the bundle's feature columns in raw units and the target column; "
            "omit (or give the bundle's dataset name) for the validation split of the built-in "
            "dataset the bundle was trained with."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            help="Target column of --data and --test [default: the column the bundle was "
            "trained on]."
        ),
    ] = None,
    test: Annotated[
        str | None,
        typer.Option(
            help="A table file of held-out rows to report the policy's figures on (coverage, "
            "error on all and on accepted rows) [default: the built-in test split; none for "
            "--data FILE]."
        ),
    ] = None,
    score: Annotated[
        str | None,
        typer.Option(
            help="Deferral score: mi, entropy, max_prob (1 - max probability), "
            "epistemic_variance, or a score of the network's features, decided on one pass: "
            "density (DDU's feature density) or mahalanobis (needs a fit: --mahalanobis) "
            "(classification); std or epistemic_variance (regression).",
            show_default="density for DDU; else mi for classification, epistemic_variance for "
            "regression",
        ),
    ] = None,
    coverage: Annotated[
        float | None, typer.Option(help="Target fraction of rows accepted, in (0, 1].")
    ] = None,
    error: Annotated[
        float | None, typer.Option(help="Target error on accepted rows (instead of --coverage).")
    ] = None,
    error_metric: Annotated[
        str | None, typer.Option(help="error (classification); rmse or mae (regression).")
    ] = None,
    mahalanobis: Annotated[
        str | None,
        typer.Option(
            help="First fit the Mahalanobis OOD score (served as ood_mahalanobis, and "
            "--score mahalanobis) on training rows: a table file of the rows the bundle was "
            "trained on, with the target column, or the bundle's dataset name for its "
            "built-in training split. Classification bundles."
        ),
    ] = None,
    conformal: Annotated[
        bool,
        typer.Option(
            "--conformal",
            help="Fit conformal intervals (regression) or prediction sets (classification) "
            "under each sampling policy of --samples, and store them in the bundle.",
        ),
    ] = False,
    conformal_method: Annotated[
        str,
        typer.Option(
            help="--conformal score: split (regression: |y - mean| / std; classification: "
            "1 - p(y), the smallest sets), aps (adaptive sets, Romano et al. 2020), "
            "aps-randomized (APS with exact coverage; sets may be empty), raps (APS that "
            "penalises classes ranked below --raps-k-reg, Angelopoulos et al. 2021) or auto "
            "(split for regression, aps for classification). predict and serve use it."
        ),
    ] = "auto",
    raps_k_reg: Annotated[
        int, typer.Option(help="raps: classes ranked up to this are not penalised.", min=0)
    ] = 1,
    raps_lambda: Annotated[
        float, typer.Option(help="raps: penalty per class ranked beyond --raps-k-reg.", min=0)
    ] = 0.01,
    samples: Annotated[
        str | None,
        typer.Option(
            help="Sampling policies. --conformal: comma-separated, each a sample count T or "
            "adaptive:TOL[:START:MAX] (the server's --adaptive-tol, --adaptive-start, "
            "--adaptive-max) [default: 8,16,32,64,100,128,256]. --decision single: the one T "
            "[default: 32]."
        ),
    ] = None,
    decision: Annotated[
        str,
        typer.Option(
            help="How a row's deferral score is estimated: sequential (more samples near the "
            "threshold until the score is on one side; stable across seeds, and the fitted "
            "rate holds under any served sampling) or single (one draw of --samples T)."
        ),
    ] = "sequential",
    decision_start: Annotated[
        int, typer.Option(help="Sequential decision: first samples per row.", min=2)
    ] = 32,
    decision_max: Annotated[
        int, typer.Option(help="Sequential decision: most samples per row.", min=2)
    ] = 8192,
    decision_z: Annotated[
        float,
        typer.Option(
            help="Sequential decision: stop when the score is this many standard "
            "errors from the threshold (3: 99.7% per look)."
        ),  # fmt: skip
    ] = 3.0,
    level: Annotated[
        float, typer.Option(help="--conformal: level of the held-out check, in (0, 1).")
    ] = 0.9,
    seed: Annotated[int, typer.Option()] = 0,
    on_error: Annotated[
        str,
        typer.Option(
            help="A row of --data or --test FILE with bad values: fail (stop, naming the row) "
            "or skip (leave it out; listed in <BUNDLE>.skipped.csv beside the bundle folder)."
        ),
    ] = "fail",
    overwrite: Annotated[
        bool, typer.Option(help="Replace an existing skipped-rows list (--on-error skip).")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    test_limit: Annotated[
        int | None,
        typer.Option(
            help="Check the policy on only the first this many test rows (0: skip).", min=0
        ),
    ] = None,
    threads: Threads = None,
) -> None:
    """Fit a deferral policy (a threshold on an uncertainty score) for a target coverage or a
    target error on accepted rows, and/or conformal intervals and sets (--conformal), on a
    table of your rows (--data FILE) or the bundle's validation split, store them in the
    bundle, and check them on held-out rows."""
    from bayesify.app.calibration import (
        calibrate_bundle,
        dataset_seed_note,
        fit_bundle_mahalanobis,
        training_table_note,
    )
    from bayesify.app.calibration_conformal import (
        DEFAULT_CONFORMAL_POLICIES,
        calibrate_conformal_bundle,
        conformal_options,
    )
    from bayesify.app.calibration_tables import read_tables
    from bayesify.cli.common import console, fail
    from bayesify.data.tables import is_table_path
    from bayesify.io import read_bundle, write_bundle
    from bayesify.methods import load
    from bayesify.posthoc.sampling import parse_policies
    from bayesify.posthoc.sequential import SequentialDecision
    from bayesify.predictor import OnError, Predictor
    from bayesify.predictor.files import check_side_file, same_file, write_skipped

    set_threads(threads)
    deferral = coverage is not None or error is not None
    if coverage is not None and error is not None or not (deferral or conformal or mahalanobis):
        raise fail("give exactly one of --coverage and --error (a deferral policy), and/or "
                   "--conformal, and/or --mahalanobis")  # fmt: skip
    checks = [(coverage is not None and not 0 < coverage <= 1, f"--coverage must be in (0, 1], "
               f"got {coverage}"),
              (error is not None and not 0 < error < float("inf"), f"--error must be a "
               f"positive number, got {error}"),
              (not 0 < level < 1, f"--level must be in (0, 1), got {level}"),
              (decision not in ("sequential", "single"), f"--decision must be sequential or "
               f"single, got {decision!r}"),
              (on_error not in tuple(OnError), f"--on-error must be fail or skip, got "
               f"{on_error!r}")]  # fmt: skip
    for bad, message in checks:
        if bad:
            raise fail(message)
    try:
        policies = parse_policies(samples or DEFAULT_CONFORMAL_POLICIES)
        single = parse_policies(samples or "32")
        if deferral and decision == "single" and (len(single) > 1 or single[0].is_adaptive):
            raise ValueError(f"--decision single takes one sample count T, got --samples "
                             f"{samples!r}")  # fmt: skip
        sequential = (SequentialDecision(decision_start, decision_max, decision_z)
                      if decision == "sequential" else None)  # fmt: skip
    except ValueError as e:
        raise fail(str(e)) from None
    table = data if data is not None and is_table_path(data) else None
    inputs = [Path(p) for p in (table, test) if p is not None]
    side = skipped_list(bundle)
    try:
        if on_error == OnError.SKIP:
            check_side_file(side, inputs, overwrite, f"calibrate {bundle}")
        method = load(bundle)
        if data is not None and table is None and data != method.metadata.get("data"):
            raise ValueError(f"--data {data!r}: not a table file (.csv, .parquet, .npz) nor the "
                             f"bundle's own dataset ({method.metadata.get('data')!r})")  # fmt: skip
        if target is not None and table is None and test is None:
            raise ValueError("--target names the target column of --data FILE or --test FILE")
        predictor = Predictor(method)
        if conformal:  # a method that does not fit the bundle's task, before any work
            conformal_options(conformal_method, predictor.task)
        notes = [dataset_seed_note(method.metadata) if table is None else None,
                 training_table_note(method.metadata, table)]  # fmt: skip
        for note in filter(None, notes):
            console.print(f"[yellow]warning:[/] {note}")
        tables = read_tables(predictor, table, test, target, on_error)
        if tables.skipped:
            write_skipped(side, tables.skipped)  # type: ignore[arg-type]
        elif on_error == OnError.SKIP and not any(same_file(side, p) for p in inputs):
            side.unlink(missing_ok=True)  # an earlier run's list describes no table now
        empty = tables.empty()
        if empty is not None:
            raise ValueError(f"no row of {empty.path} could be used: all {len(empty.skipped)} "
                             f"were skipped (listed in {side}); the bundle was not "
                             "changed")  # fmt: skip
        res = conf = fitted = None
        if mahalanobis is not None:
            if not is_table_path(mahalanobis) and mahalanobis != method.metadata.get("data"):
                raise ValueError(f"--mahalanobis {mahalanobis!r}: not a table file (.csv, "
                                 ".parquet, .npz) nor the bundle's own dataset "
                                 f"({method.metadata.get('data')!r})")  # fmt: skip
            train_table = mahalanobis if is_table_path(mahalanobis) else None
            fitted = fit_bundle_mahalanobis(method, train_table, target)
        if deferral:
            res = calibrate_bundle(method, score=score, coverage=coverage, error=error,
                                   error_metric=error_metric, samples=single[0].samples or 32,
                                   seed=seed, test_limit=test_limit, data=tables.data,
                                   target=target, test=tables.test, decision=sequential,
                                   progress=progress)  # fmt: skip
        if conformal:
            conf = calibrate_conformal_bundle(method, policies=policies, seed=seed,
                                              data=tables.data, target=target, test=tables.test,
                                              test_limit=test_limit, level=level,
                                              conformal_method=conformal_method,
                                              k_reg=raps_k_reg, lam=raps_lambda,
                                              progress=progress)  # fmt: skip
        tensors, cfg = read_bundle(bundle)  # rewrite only the metadata, weights untouched
        cfg.pop("format", None)
        cfg["metadata"] = method.metadata
        write_bundle(bundle, tensors, cfg)
    except (ValueError, TypeError, OSError) as e:
        raise fail(flag_message(str(e))) from None
    _print_skipped(tables.skipped, side)
    if fitted is not None:
        console.print(f"mahalanobis: fitted on {fitted} training rows", highlight=False)
    if res is not None:
        _print_deferral(res, test_limit)
    if conf is not None:
        _print_conformal(conf, level, test_limit)
    console.print(f"saved to {bundle}/config.json")
    if samples is not None and not conformal and sequential is not None:
        console.print("[yellow]warning:[/] --samples is not used by a sequential deferral "
                      f"decision (it starts at --decision-start {decision_start}); it goes with "
                      "--conformal or --decision single")  # fmt: skip


#: the library's names of calibrate's values -> the flags that set them, for messages
_FLAGS = {"target_coverage": "--coverage", "target_error": "--error",
          "error_metric": "--error-metric", "score": "--score", "level": "--level"}  # fmt: skip


def flag_message(message: str) -> str:
    """``message`` with a leading library parameter name (``target_coverage must ...``) put as
    the flag a user gives (``--coverage must ...``)."""
    for name, flag in _FLAGS.items():
        if message.startswith(f"{name} "):
            return flag + message[len(name) :]
    return message.replace("target_coverage and target_error", "--coverage and --error")


def skipped_list(bundle: Path) -> Path:
    """Where ``calibrate --on-error skip`` lists skipped rows: ``<BUNDLE>.skipped.csv`` beside
    the bundle folder (``models/m`` -> ``models/m.skipped.csv``)."""
    folder = bundle.resolve() if bundle.name in ("", ".", "..") else bundle
    return folder.with_name(folder.name + ".skipped.csv")


def _print_skipped(skipped: list, side: Path) -> None:
    from bayesify.cli.common import console

    for path, rows in skipped:
        console.print(f"skipped {len(rows)} row(s) of {path}, listed in {side}:", highlight=False)
        shown = sorted(rows)[:10]
        for row in shown:
            console.print(f"  row {row}: {rows[row]}", highlight=False)
        if len(rows) > len(shown):
            console.print(f"  ... and {len(rows) - len(shown)} more", highlight=False)


def _print_deferral(res, test_limit: int | None) -> None:
    from bayesify.cli.common import console

    p = res.policy
    how = "one pass of the features" if p.feature_score else "one draw" if p.decision is None else (
        f"sequential decision, {p.decision.start} to {p.decision.max_samples} samples, "
        f"z = {p.decision.z:g}")  # fmt: skip
    console.print(f"deferral policy: defer when {p.score.value} > {p.threshold:.6g} "
                  f"(target {target_text(p.target)}; {how})", highlight=False)  # fmt: skip
    for name, fig in (("validation", p.validation), ("test", res.test)):
        if fig is None:
            if name == "test" and test_limit != 0:
                console.print("test: no held-out rows checked (pass --test FILE)")
            continue
        cost = f", {fig['mean_samples']:.0f} samples per row" if "mean_samples" in fig else ""
        console.print(
            f"{name}: n = {fig['n']}, coverage {fig['coverage']:.4f}, "
            f"{fig['error_metric']} all {_num(fig['error_all'])} -> accepted "
            f"{_num(fig['error_accepted'])}{cost}"
        )


def _print_conformal(conf, level: float, test_limit: int | None) -> None:
    from bayesify.cli.common import console

    c = conf.calibrations
    labels = ", ".join(p.label() for p in c.policies if p)
    first = next(iter(c.calibrations.values()))
    kind = c.method.value + (" (randomized)" if first.randomized else "")
    if c.method.value == "raps":
        kind += f" (k_reg {first.k_reg}, lambda {first.lam:g})"
    console.print(f"conformal {kind}: {c.summary()['n_scores']} validation rows; "
                  f"calibrated under {labels}", highlight=False)  # fmt: skip
    if conf.test is None:
        if test_limit != 0:
            console.print("conformal test: no held-out rows checked (pass --test FILE)")
        return
    for label, fig in conf.test.items():
        extra = (f"mean width {fig['width']:.4g}" if "width" in fig
                 else f"mean set size {fig['size']:.3f}")  # fmt: skip
        console.print(f"conformal test {label}: n = {fig['n']}, coverage at {level:g} "
                      f"{fig['coverage']:.4f}, {extra}")  # fmt: skip


def target_text(target: dict) -> str:
    """A policy's target as a person reads it: ``coverage 0.80`` or ``rmse 1.5``."""
    if "coverage" in target:
        return f"coverage {target['coverage']:.2f}"
    return f"{target.get('metric') or 'error'} {target['error']:g}"


def _num(v: float | None) -> str:
    """A figure to 4 decimals; ``-`` where there is none (e.g. no rows accepted)."""
    return "-" if v is None else f"{v:.4f}"
