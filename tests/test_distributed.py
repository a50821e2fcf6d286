"""Data-parallel training: 2 processes (gloo, loopback) equal one process with the same global
batch, for a network without batch norm and plain SGD (mathematically the same steps)."""

from __future__ import annotations

import traceback

import pytest
import torch
from torch import nn
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

import bayesify
from bayesify.models import mlp
from bayesify.train.distributed import DistributedSettings, fit_distributed

pytestmark = pytest.mark.skipif(
    not torch.distributed.is_available(), reason="torch.distributed is not available"
)


def _data(n: int = 200, d: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    return x, (x[:, :2].sum(1) + 0.1 * torch.randn(n, generator=g))


def _method() -> bayesify.Method:
    torch.manual_seed(0)
    return bayesify.get_method("deterministic")(mlp(6, 1, (32, 32), norm=None))


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def test_two_processes_equal_one_with_the_same_global_batch() -> None:
    data = _data()
    opts = dict(epochs=2, batch_size=16, lr=0.05, optimizer="sgd", seed=3)
    one = fit_distributed(_method(), data, nproc=1, **opts)
    two = fit_distributed(_method(), data, nproc=2, **opts)
    start = _flat(_method().net)
    assert (_flat(one.net) - start).abs().max() > 1e-2, "training did not move the weights"
    torch.testing.assert_close(_flat(two.net), _flat(one.net), rtol=0, atol=1e-5)
    assert two.history.epochs == one.history.epochs == 2


def test_single_process_path_is_the_ordinary_training_step() -> None:
    """nproc=1 takes the global batch in the DistributedSampler's order: the same SGD steps as
    Method.fit over a loader with that order."""
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    x, y = _data()
    ds = TensorDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3, drop_last=True)
    ref = _method().fit(DataLoader(ds, batch_size=16, sampler=sampler, drop_last=True), epochs=1,
                        lr=0.05, optimizer="sgd", progress=False)  # fmt: skip
    one = fit_distributed(_method(), (x, y), nproc=1, epochs=1, batch_size=16, lr=0.05,
                          optimizer="sgd", seed=3)  # fmt: skip
    torch.testing.assert_close(_flat(one.net), _flat(ref.net), rtol=0, atol=1e-6)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="split evenly"):
        DistributedSettings(nproc=3, batch_size=32)
    with pytest.raises(ValueError, match="batch_norm"):
        DistributedSettings(batch_norm="global")
    mcbn = bayesify.get_method("mcbn")(mlp(6, 1, (8,), norm="batch"))
    with pytest.raises(ValueError, match="per-replica"):
        fit_distributed(mcbn, _data(), nproc=2, batch_norm="sync", epochs=1)


def test_fit_takes_the_ddp_strategy_for_a_method_with_its_own_parameters() -> None:
    """Bayes by Backprop's learned noise is a parameter of the network, read by its objective
    while the network trains wrapped in DDP; method.fit(strategy=DDP(...)) trains it."""
    from bayesify.train.distributed import DDP

    torch.manual_seed(0)
    method = bayesify.get_method("bbb")(mlp(6, 1, (16,), norm=None))
    start = _flat(method.net)
    method.fit(_data(), epochs=1, batch_size=16, lr=0.01, seed=1, progress=False,
               strategy=DDP(nproc=2))  # fmt: skip
    assert method.history.epochs == 1
    assert (_flat(method.net) - start).abs().max() > 1e-3
    assert method.noise_variance == pytest.approx(float(method.log_noise.detach().exp()))


def _raised_in_replica(index: int, error: Exception) -> ProcessRaisedException:
    """What torch.multiprocessing.spawn raises in the parent: the child's traceback as text."""
    try:
        raise error
    except Exception:
        trace = traceback.format_exc()
    msg = f"\n\n-- Process {index} terminated with the following error:\n{trace}"
    return ProcessRaisedException(msg, index, 4242)


def test_an_error_inside_a_spawned_replica_reaches_the_caller_as_one_line() -> None:
    from bayesify.data.errors import DataError
    from bayesify.train.replica_errors import ReplicasDiffer, replica_error

    err = replica_error(_raised_in_replica(1, DataError("12 training rows are too few")))
    assert type(err) is ValueError
    assert str(err) == "training replica 1: 12 training rows are too few"
    differ = _raised_in_replica(1, ReplicasDiffer("replica 1 differs from replica 0 in epochs"))
    assert type(replica_error(differ)) is ValueError
    err = replica_error(_raised_in_replica(0, KeyError("weight")))
    assert type(err) is RuntimeError and str(err) == "training replica 0: KeyError: 'weight'"
    killed = ProcessExitedException("process 1 terminated", 1, 4242, -9, "SIGKILL")
    assert str(replica_error(killed)) == (
        "training replica 1 ended with signal SIGKILL before it finished"
    )


def test_a_replica_that_fails_out_of_step_leaves_torchrun_group_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fit that stops between collectives (an error on one node only) leaves the group there
    and then, so the peers fail on the closed connection instead of waiting for the timeout; a
    later fit in that process is refused in one line instead of meeting a group out of step.
    The refusal raised by every replica (rows that differ) keeps the group."""
    import torch.distributed as dist

    from bayesify.bench.process import free_port
    from bayesify.train import distributed

    env = {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "TORCHELASTIC_USE_AGENT_STORE": "False"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(distributed, "_group_state", {"broken": False})
    monkeypatch.setattr(distributed.atexit, "register", lambda f: f)
    strategy, net = distributed.DDP(nproc=1, timeout_s=30), nn.Linear(2, 1)

    def differ(replica: object) -> None:
        raise distributed.ReplicasDiffer("replica 1 differs")

    def fail(replica: object) -> None:
        raise FloatingPointError("training loss became nan")

    try:
        with pytest.raises(distributed.ReplicasDiffer):
            strategy.run(differ, net)
        assert dist.is_initialized()  # every replica raised at the same check: kept
        with pytest.raises(FloatingPointError):
            strategy.run(fail, net)
        assert not dist.is_initialized()
        with pytest.raises(RuntimeError, match="left torchrun's group after a failed fit"):
            strategy.run(fail, net)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
