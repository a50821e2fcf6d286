"""Training across machines: two torchrun "nodes" on localhost (two launcher processes, one
worker each, c10d rendezvous on a free 127.0.0.1 port, gloo) run ``bayesify train`` for MCBN
and MC dropout on a tiny table in one rendezvous (``tests/torchrun_train.py``).

The reference is one process, written out here: each step takes the same global batch of 16
rows, pushes each replica's 8 rows through the network with that replica's own random stream
(``seed + rank``: its dropout masks) and batch statistics, halves and adds the gradients, and
keeps replica 0's batch-norm running statistics; early stopping reads replica 0's validation
loss; MCBN's bank is filled with batches of the per-replica 8 rows.

Tolerance. DDP sums g0/2 + g1/2 over the two replicas (its hook divides by the world size
before the all-reduce); the reference accumulates the gradients of loss/2 in the same order.
Halving is exact in floating point and a sum of two terms does not depend on its order, so
every step is the same arithmetic unless gloo or a kernel orders a sum differently; one such
reordering moves a weight by about one float32 ulp (1.2e-7 relative) per step, and Adam's
steps of at most lr = 0.01 over 24 steps bound the drift far below 1e-5 on outputs of order 1.
The comparison allows atol = rtol = 1e-5 on every sampled output (observed here: identical).
"""

from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler
from typer.testing import CliRunner

import bayesify
from bayesify.app.table_jobs import build_table_training
from bayesify.bench.process import free_port
from bayesify.train import make_optimizer

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available"
)

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")
SEED, EPOCHS, PATIENCE, BATCH, LR, WORLD = 0, 8, 1, 16, 0.01, 2
SHARED = ["--epochs", str(EPOCHS), "--patience", str(PATIENCE), "--batch-size", str(BATCH),
          "--lr", str(LR), "--hidden", "8", "--samples", "5", "--seed", str(SEED)]  # fmt: skip
NORM = {"mcbn": "batch", "mc-dropout": "none"}


def _table(path: Path) -> Path:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 3))
    y = x @ [1.0, -0.5, 0.3] + 0.1 * rng.normal(size=120)
    pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "y": y}).to_csv(path, index=False)
    return path


def _two_nodes(
    table: Path, out: Path, meanwhile: Callable[[], T]
) -> tuple[list[subprocess.CompletedProcess], T]:
    """Two torchrun launchers meeting on one free loopback port, both run to the end, and what
    ``meanwhile()`` returns (run in this process while they start and train)."""
    port = free_port()
    # faulthandler: an abort or a hang (SIGABRT below) prints every thread's Python stack
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "PYTHONFAULTHANDLER": "1"}  # fmt: skip
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=bayesify-test",
           str(ROOT / "tests" / "torchrun_train.py"), str(table), str(out), *SHARED]  # fmt: skip
    procs = [
        subprocess.Popen(
            cmd,
            env=env,
            cwd=out.parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        for _ in range(2)
    ]
    done = []
    try:
        result = meanwhile()
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=240)
            except subprocess.TimeoutExpired:
                stacks = []
                for q in procs:  # where each process waits, then the failure
                    if q.poll() is None:
                        os.killpg(q.pid, signal.SIGABRT)
                    stacks.append(q.communicate(timeout=60)[1][-6000:])
                pytest.fail("the torchrun nodes hung; their stacks:\n" + "\n---\n".join(stacks))
            done.append(subprocess.CompletedProcess(cmd, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:  # the launcher and its worker, which share its session
                os.killpg(p.pid, signal.SIGKILL)
    return done, result


def _one_process(method_name: str, table: Path) -> tuple[bayesify.Method, list[str]]:
    """The same job trained in this process with two virtual replicas (see the module doc), and
    what ``bayesify train`` prints about its epochs."""
    job, _ = build_table_training(method_name, table, "y", hidden="8",
                                  norm=NORM[method_name], seed=SEED)  # fmt: skip
    method, (x, y), (xv, yv) = job.method, job.train, job.val
    net, per = method.net, BATCH // WORLD
    opt = make_optimizer(method.param_groups(LR, 0.0), "adam", LR)
    streams = []
    for r in range(WORLD):
        torch.manual_seed(SEED + r)
        streams.append(torch.get_rng_state())
    ds = TensorDataset(x, y)
    steps = len(x) // BATCH
    best, best_state, best_epoch, stale = math.inf, None, -1, 0
    for epoch in range(EPOCHS):
        orders = []
        for r in range(WORLD):
            sampler = DistributedSampler(ds, WORLD, r, shuffle=True, seed=SEED, drop_last=True)
            sampler.set_epoch(epoch)
            orders.append(list(sampler))
        net.train()
        for i in range(steps):
            opt.zero_grad(set_to_none=True)
            start = copy.deepcopy(dict(net.named_buffers()))
            for r in range(WORLD):
                kept = copy.deepcopy(dict(net.named_buffers()))
                if r > 0:  # DDP gives every replica replica 0's buffers before the forward
                    _set_buffers(net, start)
                torch.set_rng_state(streams[r])
                idx = orders[r][i * per : (i + 1) * per]
                loss = method.objective(x[idx], y[idx], (epoch + i / steps) / EPOCHS, len(x))
                (loss / WORLD).backward()
                streams[r] = torch.get_rng_state()
                if r > 0:  # the network keeps replica 0's running statistics
                    _set_buffers(net, kept)
            opt.step()
            method.after_step()
        net.eval()
        with torch.no_grad():
            score = float(method.nll(net(xv), yv))
        if score < best:
            best, best_state, best_epoch, stale = score, copy.deepcopy(net.state_dict()), epoch, 0
        else:
            stale += 1
            if stale >= PATIENCE:
                break
    net.load_state_dict(best_state)
    if method_name == "mcbn":
        method.fill_bank((x, y), batch_size=per, seed=SEED)
    method.fit_noise((xv, yv), seed=SEED)
    n = epoch + 1
    return method, [f"trained {n} epoch{'s' * (n != 1)},",
                    f"kept epoch {best_epoch + 1} (validation loss {best:.4g})"]  # fmt: skip


def _set_buffers(net: torch.nn.Module, values: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for name, b in net.named_buffers():
            b.copy_(values[name])


def test_two_torchrun_nodes_train_what_one_process_trains(tmp_path: Path) -> None:
    table = _table(tmp_path / "t.csv")
    out = tmp_path / "out"
    out.mkdir()
    runs, refs = _two_nodes(table, out, lambda: {n: _one_process(n, table) for n in NORM})
    for run in runs:  # both nodes end cleanly: no abort of a thread left running at exit
        assert run.returncode == 0, run.stderr[-3000:]
        assert "terminate called" not in run.stderr, run.stderr[-3000:]
    # only rank 0 prints; the other node's worker prints nothing
    printed = sorted((" ".join(run.stdout.split()) for run in runs), key=len)
    assert printed[0] == "", printed[0]
    for name in NORM:
        assert f"saved {name} bundle" in printed[1]
        assert printed[1].count("validation rows, T = 5") == 2
    assert sorted(p.name for p in out.iterdir()) == [
        "mc-dropout", "mcbn", "refusal-0.txt", "refusal-1.txt"]  # fmt: skip
    # every rank refuses rows that differ from replica 0's, with the same line
    refusals = {(out / f"refusal-{r}.txt").read_text() for r in range(WORLD)}
    assert refusals == {
        "replica 1 differs from replica 0 in training rows (checksum): every node must run "
        "the same command on the same data"
    }
    xv = build_table_training("mcbn", table, "y", hidden="8", seed=SEED)[0].val[0]
    for name in NORM:
        trained = bayesify.load(out / name)
        ref, lines = refs[name]
        for line in lines:  # the same early stop on both nodes as here
            assert line in printed[1], (name, line)
        got = trained.sample(xv, 20, seed=5)
        want = ref.sample(xv, 20, seed=5)
        assert got.std(0).mean() > 1e-3, f"{name}: the predictive has no spread"
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=name)
        assert trained.noise_variance == pytest.approx(ref.noise_variance, rel=1e-4)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nproc", "3"], "--nproc 3 under torchrun, whose group has 2 processes; leave --nproc "
         "out (torchrun's --nnodes and --nproc-per-node decide)"),
        (["--continue-from", "b"],
         "--continue-from trains in one process; start it without torchrun"),
    ],
)  # fmt: skip
def test_train_under_torchrun_refuses_flags_it_cannot_honour(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], message: str
) -> None:
    from bayesify.cli import app

    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    result = CliRunner().invoke(app, ["train", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert message in result.output.replace("\n", " ")
