"""Test-time augmentation: the shared suite over plain, MC-dropout and MCBN members; the one
pass against a loop of T plain passes over independently rebuilt augmented copies; draws
independent across groups and rows; transform specs and their errors."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from conformance import MethodConformance
from test_mcbn import regression_data
from torch import nn

import bayesify
from bayesify.models import lenet, mlp
from bayesify.nn import sampling, select_groups
from bayesify.options import format_transforms, parse_transforms


def _images(n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


class TestTTAImages(MethodConformance):
    def make(self):
        x, y = _images()
        net = lenet(norm="batch", width=1)
        method = bayesify.TTA.from_pretrained(
            net, (x, y), task="classification", transforms="flip,shift:2,crop:3,noise:0.1"
        )
        return method, x[:6]


class TestTTAOfMCDropoutImages(MethodConformance):
    def make(self):
        x, y = _images()
        net = lenet(norm="batch", width=1, dropout=0.3)
        method = bayesify.TTA(net, task="classification", method=bayesify.MCDropout,
                              transforms="crop:2,flip")  # fmt: skip
        method.fit((x, y), epochs=1, batch_size=16, progress=False)
        return method, x[:6]


class TestTTAOfMCBNRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        method = bayesify.TTA(mlp(5, hidden=(16,)), method=bayesify.MCBN,
                              method_options={"bank_size": 8}, transforms="noise:0.1")  # fmt: skip
        method.fit((x[:200], y[:200]), val=(x[200:], y[200:]), epochs=2, batch_size=16,
                   progress=False)  # fmt: skip
        return method, x[200:220]


# ---------------------------------------------------------------- an independent reference
def _candidates(x: torch.Tensor, k: int) -> torch.Tensor:
    """Every flip (or not) and shift by ``-k..k`` of ``x [N, C, H, W]`` with the edge pixel
    repeated, built by padding: ``[2 * (2k+1)**2, N, C, H, W]``."""
    h, w = x.shape[-2:]
    out = []
    for img in (x, x.flip(-1)):
        padded = F.pad(img, (k, k, k, k), mode="replicate")
        for dy in range(-k, k + 1):
            for dx in range(-k, k + 1):
                out.append(padded[..., k + dy : k + dy + h, k + dx : k + dx + w])
    return torch.stack(out)


def test_each_copy_is_one_of_the_allowed_transforms_and_draws_are_independent():
    """Read the augmented copies through a network that returns its input: each (sample,
    row) copy equals exactly one flip/shift of its row; flips are fair coins independent
    across groups and rows, and shifts are uniform over -k..k."""
    x, _ = _images(40)
    t, k = 150, 2
    tta = bayesify.TTA(nn.Identity(), task="classification", transforms=f"flip,shift:{k}")
    copies = tta.sample(x, t, seed=0)  # [T, N, 1, 28, 28]
    cands = _candidates(x, k)  # [2*25, N, 1, 28, 28]
    match = (copies.unsqueeze(1) == cands.unsqueeze(0)).flatten(3).all(-1)  # [T, 50, N]
    assert match.any(1).all(), "a copy is no flip/shift of its row"
    choice = match.float().argmax(1)  # [T, N]: which candidate (first match)
    flipped = (choice >= (2 * k + 1) ** 2).float()
    assert abs(flipped.mean().item() - 0.5) < 0.03  # 6000 coin flips: sd 0.0065
    # independence across groups: corr of groups' flip patterns over rows and draws
    c = torch.corrcoef(flipped)  # [T, T]
    off = c[~torch.eye(t, dtype=torch.bool)]
    assert off.abs().mean() < 0.2 and len(set(map(tuple, flipped.tolist()))) == t
    # across rows of one group, too
    r = torch.corrcoef(flipped.T)
    assert r[~torch.eye(len(x), dtype=torch.bool)].abs().mean() < 0.12
    # shifts uniform on -k..k: dy of the unflipped copies
    dy = (choice % (2 * k + 1) ** 2) // (2 * k + 1)
    counts = torch.bincount(dy.flatten(), minlength=2 * k + 1).float()
    assert ((counts / counts.sum()) - 1 / (2 * k + 1)).abs().max() < 0.03
    # a different seed, different copies; the same seed, the same copies
    assert not torch.equal(copies, tta.sample(x, t, seed=1))
    assert torch.equal(copies, tta.sample(x, t, seed=0))


def test_noise_is_gaussian_with_the_given_scale_and_independent_across_groups():
    x = torch.zeros(50, 7)
    tta = bayesify.TTA(nn.Identity(), transforms="noise:0.3")
    eps = tta.sample(x, 100, seed=0)  # [T, N, 7]
    assert abs(eps.std().item() - 0.3) < 0.01 and abs(eps.mean().item()) < 0.01
    flat = eps.reshape(100, -1)
    c = torch.corrcoef(flat)[~torch.eye(100, dtype=torch.bool)]
    # 350 numbers per group: a null corr has sd 0.053, mean |corr| 0.043, max of 4950 ~0.2
    assert c.abs().mean() < 0.05 and c.abs().max() < 0.3


def test_crop_pads_by_reflection():
    x = torch.arange(25.0).view(1, 1, 5, 5)
    tta = bayesify.TTA(nn.Identity(), task="classification", transforms="crop:2")
    copies = tta.sample(x, 200, seed=0)[:, 0]  # [T, 1, 5, 5]
    padded = F.pad(x, (2, 2, 2, 2), mode="reflect")
    allowed = torch.stack([padded[0, :, a : a + 5, b : b + 5]
                           for a in range(5) for b in range(5)])  # fmt: skip
    hits = (copies.unsqueeze(1) == allowed.unsqueeze(0)).flatten(2).all(-1)  # [T, 25]
    assert hits.any(1).all() and hits.any(0).all()  # every copy a crop; every crop drawn


def test_one_pass_equals_a_loop_of_plain_passes_over_the_augmented_copies():
    """TTA on a plain LeNet = T passes of the plain net, pass t over copy t (the copies read
    through an identity network with the same seed: the member draws nothing)."""
    x, _ = _images(5)
    spec, t = "flip,shift:2,noise:0.05", 7
    net = lenet(norm="batch", width=1).eval()
    one = bayesify.TTA(net, task="classification", transforms=spec).sample(x, t, seed=3)
    copies = bayesify.TTA(nn.Identity(), task="classification", transforms=spec).sample(
        x, t, seed=3
    )
    with torch.no_grad():
        loop = torch.stack([net(copies[i]) for i in range(t)])
    torch.testing.assert_close(one, loop, rtol=1e-5, atol=1e-5)


def test_mc_dropout_plus_tta_sample_t_has_its_own_mask_and_its_own_augmentation():
    """Group t of MC dropout + TTA = MC dropout alone (same generator: the same masks) run on
    group t's augmented copy."""
    x, _ = _images(4)
    t = 6
    net = lenet(norm=None, width=1, dropout=0.5)
    tta = bayesify.TTA(net, task="classification", method=bayesify.MCDropout,
                       transforms="flip,shift:3")  # fmt: skip
    seen = []
    hook = tta.member.net.register_forward_pre_hook(lambda _m, a: seen.append(a[0].clone()))
    one = tta.sample(x, t, seed=11, max_rows=None)
    hook.remove()
    copies = seen[0].view(t, len(x), *x.shape[1:])
    assert not torch.equal(copies[0], copies[1])
    alone = bayesify.MCDropout(net, task="classification")
    with torch.no_grad(), sampling(alone.net, t, torch.Generator().manual_seed(11)):
        loop = []
        for i in range(t):
            select_groups(alone.net, i, i + 1)
            loop.append(alone.net(copies[i]))
    torch.testing.assert_close(one, torch.stack(loop), rtol=1e-5, atol=1e-5)
    masks_differ = alone.sample(copies[0], 2, seed=11)
    assert not torch.equal(masks_differ[0], masks_differ[1])


# ---------------------------------------------------------------- options, bundles, errors
def test_transform_specs_parse_to_one_canonical_form():
    parsed = parse_transforms(" Flip, shift , crop:3,noise:1e-1")
    assert format_transforms(parsed) == "flip,shift:2,crop:3,noise:0.1"
    assert parse_transforms(format_transforms(parsed)) == parsed
    assert bayesify.TTA(nn.Identity(), transforms="noise").config.transforms == "noise:0.05"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rotate:3", "unknown transform 'rotate'; valid: flip, shift, crop, noise"),
        ("flip:2", "transform flip takes no value"),
        ("shift:1.5", "transform shift takes a positive int, got '1.5'"),
        ("noise:-1", "transform noise takes a value > 0"),
        ("noise:nan", "transform noise takes a value > 0"),
        ("", "transforms must be a spec like"),
        ("flip,,shift", "unknown transform ''"),
    ],
)
def test_bad_transform_specs_are_one_line_errors(spec, message):
    with pytest.raises(ValueError, match=message) as e:
        bayesify.TTA(nn.Identity(), transforms=spec)
    assert "\n" not in str(e.value)


def test_image_transforms_on_tables_and_bad_members_are_refused():
    tta = bayesify.TTA(mlp(3, hidden=(4,), norm=None), transforms="flip")
    with pytest.raises(ValueError, match=r"need image inputs .* for tables use noise"):
        tta.predict(torch.randn(4, 3), samples=2)
    big = bayesify.TTA(nn.Flatten(), task="classification", transforms="crop:5")
    with pytest.raises(ValueError, match="crop:5 pads by reflection"):
        big.predict(torch.randn(2, 1, 5, 5), samples=2)
    with pytest.raises(ValueError, match="TTA cannot wrap 'ensemble'"):
        bayesify.TTA(nn.Identity(), method=bayesify.DeepEnsemble)
    with pytest.raises(ValueError, match=r"bayesify.get_method\('mc-dropout'\) gives it"):
        bayesify.TTA(nn.Identity(), method="mc-dropout")


def test_bundle_keeps_the_transforms_and_member_and_from_pretrained_leaves_net_alone(tmp_path):
    x, y = _images(16)
    net = lenet(norm="batch", width=1, dropout=0.2)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    tta = bayesify.TTA.from_pretrained(net, (x, y), task="classification",
                                       method=bayesify.MCDropout, preset="paper")  # fmt: skip
    assert tta.config.transforms == "flip,crop:4"
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    tta.save(tmp_path / "b")
    cfg = json.loads((tmp_path / "b" / "config.json").read_text())
    assert cfg["method"] == "tta"
    assert cfg["config"]["transforms"] == "flip,crop:4"
    assert cfg["config"]["method"] == "mc-dropout"
    loaded = bayesify.load(tmp_path / "b")
    assert loaded.config == tta.config and type(loaded.member) is bayesify.MCDropout
    a = tta.predict(x[:3], samples=5, seed=2).samples
    assert torch.equal(a, loaded.predict(x[:3], samples=5, seed=2).samples)


def test_conformal_intervals_of_a_tta_predictive_cover_at_the_level():
    """Conformal calibration takes TTA's Predictive as any other: on fresh rows of the same
    law, the 90 % intervals cover about 90 % (600 test rows: sd 1.2 %)."""
    x, y = regression_data(1200, seed=1)
    tta = bayesify.TTA(mlp(5, hidden=(16,), norm=None), transforms="noise:0.2")
    tta.fit((x[:400], y[:400]), val=(x[400:600], y[400:600]), epochs=5, batch_size=32,
            progress=False)  # fmt: skip
    conf = bayesify.Conformal.fit(tta.predict(x[400:600], samples=16, seed=0), y[400:600])
    lo, hi = conf.interval(tta.predict(x[600:], samples=16, seed=1), level=0.9)
    covered = ((y[600:] >= lo) & (y[600:] <= hi)).float().mean().item()
    assert 0.85 < covered < 0.95, covered
