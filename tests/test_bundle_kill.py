"""A ``save(overwrite=True)`` killed with SIGKILL at any moment leaves a folder that loads as
the old bundle or the new one, never a mix (new weights beside the old config).

One helper process imports bayesify once, then forks a child per kill: the child replaces an
old bundle with a new one (another width, another noise variance) and is killed with SIGKILL
(1) just before its k-th file-system call, for every k over a whole save, and (2) after each of
15 delays spread over a save of ~8 MB of weights, by the parent.
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

HELPER = textwrap.dedent("""
    import builtins, io, json, os, signal, sys, time
    from pathlib import Path
    import torch
    from torch import nn
    import bayesify

    torch.set_num_threads(1)
    root = Path(sys.argv[1])

    def method(width, noise, inputs=4):
        torch.manual_seed(width)
        m = bayesify.Deterministic(nn.Sequential(nn.Linear(inputs, width), nn.ReLU(),
                                                 nn.Linear(width, 1)))
        m.noise_variance = noise
        return m

    def run(folder, new, kill_at=None, delay=None):
        pid = os.fork()
        if pid == 0:
            if kill_at is not None:
                calls = [0]
                def hook(fn):
                    def wrapped(*a, **k):
                        if calls[0] == kill_at:
                            os.kill(os.getpid(), signal.SIGKILL)
                        calls[0] += 1
                        return fn(*a, **k)
                    return wrapped
                for name in ("open", "replace", "rename", "link", "unlink", "fsync", "write"):
                    setattr(os, name, hook(getattr(os, name)))
                builtins.open = hook(builtins.open)
                io.open = builtins.open
            new.save(folder, overwrite=True)
            os._exit(0)
        if delay is not None:
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return os.WIFSIGNALED(status)

    old, new = method(8, 0.5), method(16, 2.0)
    old.save(root / "old"); new.save(root / "new")
    # (1) a kill before every file-system call of a save
    for k in range(200):
        folder = root / f"op{k}"
        old.save(folder)
        killed = run(folder, new, kill_at=k)
        print(json.dumps({"folder": folder.name, "killed": killed}), flush=True)
        if not killed:
            break
    # (2) 15 kills by the clock, spread over a save of ~8 MB
    big_old, big_new = method(32768, 0.5, 64), method(32000, 2.0, 64)
    big_old.save(root / "big_old"); big_new.save(root / "big_new")
    t0 = time.perf_counter()
    big_new.save(root / "timing", overwrite=True)
    big_old.save(root / "timing", overwrite=True)
    span = (time.perf_counter() - t0) / 2
    for i in range(15):
        folder = root / f"t{i}"
        big_old.save(folder)
        killed = run(folder, big_new, delay=span * 1.2 * i / 14)
        print(json.dumps({"folder": folder.name, "killed": killed, "span": span}), flush=True)
""")


def _same(a: bayesify.Method, b: bayesify.Method) -> bool:
    sa, sb = a.net.state_dict(), b.net.state_dict()
    return (
        sa.keys() == sb.keys()
        and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)
        and a.noise_variance == b.noise_variance
    )


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_save_killed_at_any_moment_leaves_the_old_or_the_new_bundle(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(bayesify.__file__).parents[1])}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", HELPER, str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env=env, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    runs = [json.loads(line) for line in out.stdout.splitlines()]
    ops = [r for r in runs if r["folder"].startswith("op")]
    timed = [r for r in runs if r["folder"].startswith("t")]
    seen = {"old": 0, "new": 0}
    refs = {n: bayesify.load(tmp_path / n) for n in ("old", "new", "big_old", "big_new")}
    for r, (old, new) in [(r, ("old", "new")) for r in ops] + [
        (r, ("big_old", "big_new")) for r in timed
    ]:
        try:
            loaded = bayesify.load(tmp_path / r["folder"])
        except Exception as e:  # noqa: BLE001 - any failure to load is the defect
            pytest.fail(f"{r}: the folder does not load: {e}")
        verdict = [name for name in (old, new) if _same(loaded, refs[name])]
        assert verdict, f"{r}: the folder loads as neither the old nor the new bundle"
        seen[verdict[0].removeprefix("big_")] += 1
        leftovers = sorted(p.name for p in (tmp_path / r["folder"]).iterdir())
        if not r["killed"]:
            assert leftovers == ["config.json", "weights.safetensors"]
    assert seen["old"] and seen["new"]  # the kills fell before and after the commit
    assert len(ops) > 10 and not ops[-1]["killed"] and all(r["killed"] for r in ops[:-1])
    assert len(timed) == 15 and sum(r["killed"] for r in timed) >= 5, timed
