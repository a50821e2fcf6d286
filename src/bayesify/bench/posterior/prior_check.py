"""The page's prior check: the reference under another prior (``--prior-check``, a prior std)
against the page's reference (prior variance 1/5), scored as a method is, beside the floor (the
second reference of the page's prior). A distance within the floor says the prior's variance
does not move this posterior by more than two HMC runs of one posterior differ.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from bayesify.bench.posterior.distances import distances, subsample
from bayesify.bench.posterior.floor_table import fmt
from bayesify.bench.posterior.problems import load_problem

DRAWS = 100  # each reference subsampled to a method's draws, so the two rows compare


def check_scores(job: Any) -> dict[str, Any]:
    """Distances of the other prior's reference (``job``) and of the page's second reference to
    the page's reference, each subsampled to :data:`DRAWS` draws."""
    from bayesify.bench.posterior.jobs import FLOOR_SEED, _net
    from bayesify.reference import HMCSamples
    from bayesify.reference.hmc import IZMAILOV_PRIOR_STD

    problem = load_problem(job.dataset, job.split)
    net = _net(problem)
    page = replace(job, prior_std=IZMAILOV_PRIOR_STD)
    ref = HMCSamples.load(page.reference_path()).predictive(net, problem.x_test)
    out = {}
    for name, other in (("prior", job), ("floor", replace(page, seed=FLOOR_SEED))):
        draws = HMCSamples.load(other.reference_path())
        pred = subsample(draws, draws.outputs(net, problem.x_test), DRAWS, seed=0)
        out[name] = distances(pred, ref, problem, 0)
    return out


def prior_section(experiment: str, jobs: list[Any], checks: list[dict[str, Any]],
                  refs: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """The page's section: per finished check among ``jobs`` (its row of ``experiment`` among
    ``checks``; ``refs``: the page's reference rows), W2 on f(x) (in the data and in the gap),
    the epistemic std ratio and class agreement of the other prior's reference against the
    page's, beside the floor's, the test LL of each, and the other prior's largest R-hat."""
    from bayesify.bench.jobs import job_key
    from bayesify.bench.store import RowKey

    by_key = {RowKey.of(r): r for r in checks if r.get("metrics")}
    keys = [(j, job_key(experiment, j)) for j in jobs]
    done = [(j, by_key[k]) for j, k in keys if k in by_key]
    scored = [(j, {**r["metrics"], **check_scores(j)}) for j, r in done]
    if not scored:
        return []
    page_ll = {(r["dataset"], r["split"]): r["metrics"]["ll"] for r in refs if r["seed"] == 0}
    lines = [
        "## Prior sensitivity",
        "",
        "The page's prior is N(0, 1/5) on every weight (Izmailov et al.'s, set for a CIFAR "
        "ResNet-20). One more HMC run per toy and fashion-pca split samples the posterior under "
        "another prior std (same data, settings, chain seed and, for regression, σ), scored "
        "against the page's reference exactly as the floor's second run is (both subsampled to at "
        f"most {DRAWS} draws): a distance near the floor's means the prior's variance barely moves "
        "this posterior; a larger one, that the page's distances depend on the prior chosen.",
        "",
        "| problem | split | prior std | W2 f(x) | floor | W2 f(x) (gap) | floor | "
        "std ratio f(x) (data) | std ratio f(x) (gap) | agreement (gap) | floor | test LL | "
        "test LL (prior 1/√5) | R-hat max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for job, m in scored:
        p, f = m["prior"], m["floor"]
        lines.append(
            f"| {job.dataset} | {job.split} | {job.prior_std:g} | {fmt(p['w2_f'])} | "
            f"{fmt(f['w2_f'])} | {fmt(p.get('w2_f_gap'))} | {fmt(f.get('w2_f_gap'))} | "
            f"{fmt(p.get('std_ratio_f_data'))} | {fmt(p.get('std_ratio_f_gap'))} | "
            f"{fmt(p.get('agreement_gap'))} | {fmt(f.get('agreement_gap'))} | "
            f"{fmt(m['ll'])} | {fmt(page_ll.get((job.dataset, job.split)))} | "
            f"{fmt(m.get('rhat_max'))} |"
        )
    return [*lines, "", f"(1/√5 = {1 / math.sqrt(5):.3f}.)", ""]
