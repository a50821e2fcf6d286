"""The page's sensitivity checks: one more reference per split under another prior
(``--prior-check``, a prior std; toys and fashion-pca) or another fixed noise σ
(``--noise-check``, factors on the validation RMSE the page fixes σ at; UCI), each scored against
the page's reference as a method is, beside the floor (the page's second reference). A distance
within the floor says the choice does not move this posterior by more than two HMC runs of one
posterior differ.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from bayesify.bench.jobs import job_config
from bayesify.bench.posterior.distances import distances, subsample
from bayesify.bench.posterior.floor_table import fmt
from bayesify.bench.posterior.problems import load_problem
from bayesify.reference.hmc import IZMAILOV_PRIOR_STD

DRAWS = 100  # each reference subsampled to a method's draws, so the two rows compare
PRIOR, NOISE = "prior", "noise"


def check_kind(method: str, config: dict[str, Any]) -> str | None:
    """:data:`PRIOR` or :data:`NOISE` for a check's reference (a row's or a job's ``method`` and
    stored ``config``, where a field at its default is absent), None for the page's references
    and the method rows."""
    if method != "hmc":
        return None
    if config.get("prior_std"):
        return PRIOR
    return NOISE if config.get("noise_scale") else None


def job_check_kind(job: Any) -> str | None:
    """:func:`check_kind` of a job."""
    return check_kind(job.method, job_config(job))


def page_reference(job: Any) -> Any:
    """The page's reference a check ``job`` is compared with: the same job with the page's prior
    and σ."""
    return replace(job, prior_std=IZMAILOV_PRIOR_STD, noise_scale=1.0)


def check_scores(job: Any) -> dict[str, Any]:
    """Distances of the check's reference (``job``) and of the page's second reference to the
    page's reference, each subsampled to :data:`DRAWS` draws: ``{"check": ..., "floor": ...}``."""
    from bayesify.bench.posterior.jobs import FLOOR_SEED, _net
    from bayesify.reference import HMCSamples

    problem = load_problem(job.dataset, job.split)
    net = _net(problem)
    page = page_reference(job)
    ref = HMCSamples.load(page.reference_path()).predictive(net, problem.x_test)
    out = {}
    for name, other in (("check", job), ("floor", replace(page, seed=FLOOR_SEED))):
        draws = HMCSamples.load(other.reference_path())
        pred = subsample(draws, draws.outputs(net, problem.x_test), DRAWS, seed=0)
        out[name] = distances(pred, ref, problem, 0)
    return out


def _scored(experiment: str, jobs: list[Any], checks: list[dict[str, Any]]) -> list[tuple]:
    """(job, its row's metrics with :func:`check_scores`) for each finished check of ``jobs``."""
    from bayesify.bench.jobs import job_key
    from bayesify.bench.store import RowKey

    by_key = {RowKey.of(r): r for r in checks if r.get("metrics")}
    keys = [(j, job_key(experiment, j)) for j in jobs]
    return [(j, {**by_key[k]["metrics"], **check_scores(j)}) for j, k in keys if k in by_key]


def _page_ll(refs: list[dict[str, Any]]) -> dict[tuple[str, int], float]:
    return {(r["dataset"], r["split"]): r["metrics"]["ll"] for r in refs if r["seed"] == 0}


def prior_section(experiment: str, jobs: list[Any], checks: list[dict[str, Any]],
                  refs: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """The prior check's section: per finished check among ``jobs`` (its row of ``experiment``
    among ``checks``; ``refs``: the page's reference rows), W2 on f(x) (in the data and in the
    gap), the epistemic std ratio and class agreement of the other prior's reference against the
    page's, beside the floor's, the test LL of each, and the other prior's largest R-hat."""
    scored = _scored(experiment, [j for j in jobs if job_check_kind(j) == PRIOR], checks)
    if not scored:
        return []
    page_ll = _page_ll(refs)
    lines = [
        "## Prior sensitivity",
        "",
        "The page's prior is N(0, 1/5) on every weight (Izmailov et al.'s, set for a CIFAR "
        "ResNet-20). One more HMC run per toy and fashion-pca split in the table below samples "
        "the posterior under another prior std (same data, settings, chain seed and, for "
        "regression, σ), scored against the page's reference exactly as the floor's second run "
        f"is (both subsampled to at most {DRAWS} draws): a distance near the floor's means the "
        "prior's variance barely moves this posterior; a larger one, that the page's distances "
        "depend on the prior chosen.",
        "",
        "| problem | split | prior std | W2 f(x) | floor | W2 f(x) (gap) | floor | "
        "std ratio f(x) (data) | std ratio f(x) (gap) | agreement (gap) | floor | test LL | "
        "test LL (prior 1/√5) | R-hat max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for job, m in scored:
        p, f = m["check"], m["floor"]
        lines.append(
            f"| {job.dataset} | {job.split} | {job.prior_std:g} | {fmt(p['w2_f'])} | "
            f"{fmt(f['w2_f'])} | {fmt(p.get('w2_f_gap'))} | {fmt(f.get('w2_f_gap'))} | "
            f"{fmt(p.get('std_ratio_f_data'))} | {fmt(p.get('std_ratio_f_gap'))} | "
            f"{fmt(p.get('agreement_gap'))} | {fmt(f.get('agreement_gap'))} | "
            f"{fmt(m['ll'])} | {fmt(page_ll.get((job.dataset, job.split)))} | "
            f"{fmt(m.get('rhat_max'))} |"
        )
    return [*lines, "", f"(1/√5 = {1 / math.sqrt(5):.3f}.)", ""]


def noise_section(experiment: str, jobs: list[Any], checks: list[dict[str, Any]],
                  refs: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """The noise check's section: per finished check among ``jobs``, the σ it fixes against the
    page's, W2 on f(x) and the epistemic std ratio of its reference against the page's, beside
    the floor's, the test LL of each, and its largest R-hat."""
    scored = _scored(experiment, [j for j in jobs if job_check_kind(j) == NOISE], checks)
    if not scored:
        return []
    page_ll = _page_ll(refs)
    lines = [
        "## Noise sensitivity",
        "",
        "On UCI the page fixes the noise σ at the MAP network's RMSE on the validation rows "
        "(sampled, σ collapses towards 0: the network nearly interpolates the training rows and "
        "NUTS cannot mix). One more HMC run per UCI split and factor in the table below fixes "
        "σ at that multiple of it (same data, prior, settings and chain seed), scored against "
        "the page's reference exactly as the floor's second run is (both subsampled to at most "
        f"{DRAWS} draws): a distance near the floor's means the page's distances do not hinge "
        "on the σ chosen; a larger one, that they do. σ in the target's units.",
        "",
        "| problem | split | σ factor | σ | page's σ | W2 f(x) | floor | std ratio f(x) | "
        "floor | test LL | test LL (page's σ) | R-hat max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for job, m in scored:
        c, f = m["check"], m["floor"]
        sigma = m.get("noise_std")
        page_sigma = None if sigma is None else sigma / job.noise_scale
        lines.append(
            f"| {job.dataset} | {job.split} | {job.noise_scale:g} | {fmt(sigma)} | "
            f"{fmt(page_sigma)} | {fmt(c['w2_f'])} | {fmt(f['w2_f'])} | "
            f"{fmt(c.get('std_ratio_f_data'))} | {fmt(f.get('std_ratio_f_data'))} | "
            f"{fmt(m['ll'])} | {fmt(page_ll.get((job.dataset, job.split)))} | "
            f"{fmt(m.get('rhat_max'))} |"
        )
    return [*lines, ""]
