"""What one prediction call may hold: the samples limit (``max_bytes``) refuses with the figure
before allocating, and a long chunked pass does not grow the process (peak RSS measured in a
fresh subprocess from its own ``VmHWM``, so the test process's own history does not count:
``ru_maxrss`` would carry the parent's peak over the exec).

The subprocesses run under an address-space limit, so a regression fails with a memory error
instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import bayesify
from bayesify.models import mlp
from bayesify.nn import check_sample_bytes

SRC = str(Path(bayesify.__file__).resolve().parents[1])
ADDRESS_SPACE = 6 * 2**30  # the child's limit: far above a sound run, far below a runaway one

PRELUDE = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
import torch
import bayesify
from bayesify.models import mlp

def peak_mb():
    # this process's own high-water mark: ru_maxrss also holds the parent's peak, which the
    # kernel carries over the exec that started this interpreter
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024

torch.manual_seed(0)
"""


def _run(body: str) -> dict:
    """Run ``body`` after :data:`PRELUDE` in a fresh interpreter; its last stdout line is JSON."""
    code = PRELUDE.format(limit=ADDRESS_SPACE) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_billion_samples_of_one_row_are_refused_at_once_with_the_figure():
    out = _run("""
        net = mlp(8, 1, hidden=(256, 256), dropout=0.1, norm=None)
        method = bayesify.MCDropout(net)
        method.noise_variance = 0.1
        start = time.time()
        try:
            method.predict(torch.randn(1, 8), samples=10**9)
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"error": error, "seconds": time.time() - start, "peak": peak_mb()}))
    """)
    assert out["error"] is not None and out["error"].startswith("ValueError: 1000000000 samples")
    assert "GiB" in out["error"] and "max_bytes" in out["error"] and "\n" not in out["error"]
    # refused before any pass: drawing them would take hours; 5 s failed once under load
    assert out["seconds"] < 60
    assert out["peak"] < 2048


def test_a_long_chunked_pass_neither_grows_nor_churns_the_heap():
    # thousands of chunks (T=500 over 2 rows per forward): kept chunk outputs between freed
    # temporaries used to grow glibc's heap by about 0.6 MB a row (130 MB here, 5 GB at 20,000
    # rows); written into one preallocated output the pass holds its samples and little more
    out = _run("""
        net = mlp(8, 1, hidden=(256,), dropout=0.1, norm=None)
        method = bayesify.MCDropout(net)
        method.noise_variance = 0.1
        method.predict(torch.randn(4, 8), samples=4)  # lazy imports and first allocations
        from bayesify.nn.allocator import tune_allocator

        before, faults = peak_mb(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        pred = method.predict(torch.randn(200, 8), samples=500)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        print(json.dumps({"before": before, "peak": peak_mb(), "faults": faults,
                          "tuned": tune_allocator(), "shape": list(pred.samples.shape)}))
    """)
    assert out["shape"] == [500, 200]
    assert out["peak"] - out["before"] < 60, out
    if out["tuned"]:  # glibc: the heap is not trimmed after every chunk and touched again
        assert out["faults"] < 100_000, out  # (about 500,000 page faults untuned)


def test_the_exact_output_size_is_checked_once_the_row_width_is_known():
    # the check before any draw assumes one output number per row; 500 classes are known only
    # after the first chunk, and the call is refused before the output is allocated
    torch.manual_seed(0)
    method = bayesify.MCDropout(mlp(4, 500, hidden=(8,), dropout=0.1, norm=None),
                                task="classification")  # fmt: skip
    x = torch.randn(100, 4)
    assert method.sample(x, 10, max_bytes=2_100_000).shape == (10, 100, 500)  # 2.0 MB + keys
    with pytest.raises(ValueError, match=r"^10 samples of 100 row\(s\) need 1\.9 MiB"):
        method.sample(x, 10, max_bytes=1_900_000)
    assert method.sample(x, 10, max_bytes=None).shape == (10, 100, 500)


@pytest.mark.parametrize("path", ["no randomness", "vmap", "member loop"])
def test_an_ensembles_members_count_against_the_limit(path):
    torch.manual_seed(0)
    member = bayesify.Deterministic if path == "no randomness" else bayesify.MCDropout
    net = mlp(4, 300, hidden=(8,), dropout=0.1, norm=None)
    method = bayesify.DeepEnsemble(net, members=2, method=member, task="classification")
    method._vmap_ok = False if path == "member loop" else None
    x = torch.randn(50, 4)
    t = 2 if path == "no randomness" else 20  # plain members: T = M, each drawn once
    need = t * 50 * 300 * 4  # t samples of 50 rows of 300 float32 logits (1.2 MB at t = 20)
    assert method.sample(x, 20, max_bytes=2 * need).shape == (t, 50, 300)
    with pytest.raises(ValueError, match=rf"^{t} samples of 50 row\(s\) need "):
        method.sample(x, 20, max_bytes=need - 1)


def test_check_sample_bytes_counts_outputs_and_per_group_draws():
    check_sample_bytes(10, 5, 2, 4, 8, 10 * (5 * 2 * 4 + 8))  # exactly at the limit: fine
    with pytest.raises(ValueError, match=r"^10 samples of 5 row\(s\) need 480 bytes, over the"):
        check_sample_bytes(10, 5, 2, 4, 8, 479)
    check_sample_bytes(10**12, 10**6, 1, 4, 0, None)  # None: no limit
    with pytest.raises(ValueError, match="max_bytes must be a positive int or None"):
        check_sample_bytes(1, 1, 1, 4, 0, 0)


def test_auto_rows_are_bounded_by_the_widest_activation():
    from bayesify.methods import resolve_max_rows
    from bayesify.models import lenet

    x = torch.randn(3, 8)
    wide = mlp(8, 1, hidden=(30000,), dropout=0.1, norm=None)
    assert resolve_max_rows("auto", x, wide) == 2**22 // 30000 == 139
    assert resolve_max_rows("auto", x, mlp(8, 1, hidden=(256, 256))) == 1024  # as without
    images = torch.randn(3, 1, 28, 28)
    assert resolve_max_rows("auto", images, lenet()) == resolve_max_rows("auto", images) == 167
    method = bayesify.MCDropout(wide)
    method.noise_variance = 1.0
    seen = []
    method.net[1].register_forward_pre_hook(lambda m, args: seen.append(len(args[0])))
    assert method.sample(torch.randn(300, 8), 3).shape == (3, 300, 1)
    assert max(seen) <= 139 and sum(seen) == 900
