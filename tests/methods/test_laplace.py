"""Laplace: the conformance suite (last layer and all layers, BatchNorm networks included),
probit, heteroscedastic regression, the prior grid, conformal and deferral on its predictive,
``bayesify train/predict --method laplace`` and a served request."""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
import torch
from conformance import MethodConformance
from test_mcbn import regression_data
from typer.testing import CliRunner

import bayesify
from bayesify.models import lenet, mlp
from bayesify.options import LaplaceSubset, Link


def classification_data(n: int = 160, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long() + (x[:, 2] > 0.7).long()
    return x, y


def _trained(net, data, task, epochs=30):
    """A network trained outside bayesify (plain Adam), in eval mode."""
    x, y = data
    torch.manual_seed(0)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(epochs):
        for i in range(0, len(x), 32):
            opt.zero_grad()
            out = net(x[i : i + 32])
            if task == "classification":
                loss = torch.nn.functional.cross_entropy(out, y[i : i + 32])
            else:
                loss = torch.nn.functional.mse_loss(out.squeeze(-1), y[i : i + 32])
            loss.backward()
            opt.step()
    return net.eval()


class TestLaplaceLastLayerRegression(MethodConformance):
    def make(self):
        x, y = regression_data()
        net = _trained(mlp(5, hidden=(16, 16)), (x[:200], y[:200]), "regression")
        m = bayesify.Laplace.from_pretrained(net, (x[:200], y[:200]), val=(x[200:], y[200:]))
        return m, x[200:230]


class TestLaplaceAllLayersKFACWithBN(MethodConformance):
    atol = 1e-4

    def make(self):
        x, y = classification_data()
        net = _trained(mlp(5, 3, (16,), norm="batch"), (x, y), "classification")
        m = bayesify.Laplace.from_pretrained(
            net, (x, y), task="classification", subset="all", hessian="kfac"
        )
        return m, x[:12]


class TestLaplaceAllLayersDiagRegressionSampled(MethodConformance):
    atol = 1e-4

    def make(self):
        x, y = regression_data()
        net = _trained(mlp(5, hidden=(16,)), (x[:200], y[:200]), "regression")
        m = bayesify.Laplace.from_pretrained(net, (x[:200], y[:200]), val=(x[200:], y[200:]),
                                             subset="all", hessian="diag",
                                             predictive="sampled")  # fmt: skip
        return m, x[200:220]


@pytest.mark.filterwarnings("ignore::bayesify.methods.core.spread.NegligibleSpreadWarning")
def test_probit_is_the_closed_form_and_draws_nothing():
    x, y = classification_data()
    net = _trained(mlp(5, 3, (16,), norm="batch"), (x, y), "classification")
    la = bayesify.Laplace.from_pretrained(net, (x, y), task="classification", link="probit")
    pred = la.predict(x[:7], samples=5, seed=0)
    assert pred.num_samples == 5 and float(pred.samples.std(0).max()) == 0.0
    mean, cov = la.glm(x[:7])
    kappa = 1 / torch.sqrt(1 + math.pi / 8 * cov.diagonal(dim1=1, dim2=2))
    torch.testing.assert_close(pred.mean, torch.softmax(kappa * mean, -1).float())
    # the MAP network's own outputs are unchanged outside sampling, and the posterior widens
    # the probabilities towards uniform
    with torch.no_grad():
        map_probs = net(x[:7]).softmax(-1)
    assert (pred.mean.max(-1).values <= map_probs.max(-1).values + 1e-6).all()


def test_kfac_marglik_prior_is_the_maximiser_and_grid_needs_val():
    x, y = classification_data()
    net = _trained(mlp(5, 3, (16,), norm=None), (x, y), "classification")
    la = bayesify.Laplace.from_pretrained(net, (x, y), task="classification")
    best = la.log_marginal_likelihood()
    for f in (0.8, 1.25):
        assert la.log_marginal_likelihood(la.prior_precision * f) < best
    with pytest.raises(ValueError, match="pass val="):
        bayesify.Laplace.from_pretrained(net, (x, y), task="classification", prior_fit="grid")
    grid = bayesify.Laplace.from_pretrained(
        net, (x[:120], y[:120]), val=(x[120:], y[120:]), task="classification", prior_fit="grid"
    )
    on_grid = (math.log10(grid.prior_precision) + 4) / 0.4
    assert abs(on_grid - round(on_grid)) < 1e-9

    def val_nll(m):  # the draws the grid scored δ with (noise_samples, seed 0)
        return float(-m.predict(x[120:], 50, seed=0).log_prob(y[120:]).mean())

    nll = val_nll(grid)
    for k in (round(on_grid) - 1, round(on_grid) + 1):
        if not 0 <= k <= 20:
            continue
        d = 10 ** (-4 + 0.4 * k)
        other = bayesify.Laplace.from_pretrained(net, (x[:120], y[:120]), prior_precision=d,
                                                 task="classification")  # fmt: skip
        assert nll <= val_nll(other) + 1e-9


def test_bad_options_are_one_line_errors():
    net = mlp(5, 3, (8,))
    with pytest.raises(ValueError, match="hessian='full' is for subset='last-layer'"):
        bayesify.Laplace(net, task="classification", subset="all", hessian="full")
    with pytest.raises(ValueError, match="link='probit' is for subset='last-layer'"):
        bayesify.Laplace(net, task="classification", subset="all", link="probit")
    with pytest.raises(ValueError, match="link is a classification option"):
        bayesify.Laplace(net, link="mc")
    with pytest.raises(ValueError, match="needs the training data"):
        bayesify.Laplace.from_pretrained(net, task="classification")


def test_heteroscedastic_regression_uses_each_samples_variance():
    x, y = regression_data()
    y = y + 0.3 * x[:, 2].abs() * torch.randn(len(y), generator=torch.Generator().manual_seed(1))
    net = mlp(5, 2, (16,), norm=None)
    torch.manual_seed(0)
    opt = torch.optim.Adam(net.parameters(), 1e-2)
    for _ in range(300):
        opt.zero_grad()
        out = net(x)
        var = torch.nn.functional.softplus(out[:, 1]) + 1e-6
        (0.5 * (var.log() + (y - out[:, 0]) ** 2 / var)).mean().backward()
        opt.step()
    la = bayesify.Laplace.from_pretrained(net.eval(), (x, y), likelihood="heteroscedastic")
    pred = la.predict(x[:20], samples=16, seed=0)
    assert pred.noise_variance.shape == (16, 20) and pred.noise_variance.std() > 0
    assert float(pred.epistemic_variance.min()) > 0


def test_conformal_and_deferral_work_on_its_predictive():
    x, y = classification_data(400)
    net = _trained(mlp(5, 3, (16,), norm="batch"), (x[:200], y[:200]), "classification")
    for link in ("probit", "mc"):
        la = bayesify.Laplace.from_pretrained(
            net, (x[:200], y[:200]), task="classification", link=link
        )
        cal, test = la.predict(x[200:300], 16, seed=0), la.predict(x[300:], 16, seed=1)
        conf = bayesify.Conformal.fit(cal, y[200:300])
        sets = conf.prediction_set(test, 0.9)
        covered = sets[torch.arange(len(sets)), y[300:]].float().mean()
        assert 0.75 < float(covered) <= 1.0 and float(sets.float().sum(1).mean()) < 3
        from bayesify.posthoc.deferral import DeferralPolicy

        score = "entropy" if link == "probit" else "mi"
        policy = DeferralPolicy.fit(cal, y[200:300], score=score, target_coverage=0.8)
        deferred, _ = policy.decide(test)
        kept = ~deferred
        assert 0.5 < float(kept.float().mean()) < 1.0


def test_train_and_predict_cli_and_a_served_request(tmp_path):
    from bayesify.cli import app
    from bayesify.data.preprocessing import Preprocessing

    x, y = classification_data(300)
    np.savetxt(tmp_path / "rows.csv", x[:5].numpy(), delimiter=",",
               header="a,b,c,d,e", comments="")  # fmt: skip
    net = _trained(mlp(5, 3, (16,), norm="batch"), (x, y), "classification")
    la = bayesify.Laplace.from_pretrained(net, (x, y), task="classification", link="mc")
    la.preprocessing = Preprocessing(input_shape=[5], class_names=["a", "b", "c"])
    la.save(tmp_path / "bundle")
    runner = CliRunner()
    res = runner.invoke(app, ["predict", str(tmp_path / "bundle"), str(tmp_path / "rows.csv"),
                              "--out", str(tmp_path / "out.csv"), "--samples", "8"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out.csv").read_text().count("\n") == 6

    from bayesify.bench.process import start_server

    srv = start_server(tmp_path / "bundle", tmp_path / "server.log", "--threads", "1",
                       "--samples", "16", name="lap")  # fmt: skip
    try:
        r = httpx.post(f"{srv.url}/v1/predict", json={"inputs": x[:3].tolist(), "seed": 0})
        assert r.status_code == 200, r.text
        probs = np.array([p["probabilities"] for p in r.json()["predictions"]])
        ref = bayesify.load(tmp_path / "bundle").predict(x[:3], samples=4000, seed=0).mean
        np.testing.assert_allclose(probs, ref.numpy(), atol=0.1)
    finally:
        srv.stop()


def test_lenet_with_batch_norm_runs_its_body_once_per_row():
    """Sampled last layer on a BN LeNet: the convolutions see the N rows once, the last layer
    T·N rows, and the one pass equals the loop of T passes."""

    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (48,), generator=g)
    net = _trained(lenet(norm="batch"), (x, y), "classification", epochs=2)
    la = bayesify.Laplace.from_pretrained(net, (x, y), task="classification",
                                          predictive="sampled", batch_size=16)  # fmt: skip
    conv, last = la.net[0], la.layer
    rows = {}
    for name, m in (("conv", conv), ("last", last)):

        def seen(_m, a, name=name) -> None:
            rows.setdefault(name, a[0].shape[0])

        m.register_forward_pre_hook(seen)
    out = la.sample(x[:5], 12, seed=0, max_rows=None)
    assert rows == {"conv": 5, "last": 60}
    loop = la.reference_samples(x[:5], 12, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, loop, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("hessian", "predictive"),
    [("kfac", "sampled"), ("full", "sampled"), ("diag", "sampled"), ("kfac", "glm")],
)
def test_last_layer_multiplies_the_feature_rows_once(hessian, predictive, monkeypatch):
    """Behind a deterministic body the T groups' outputs come from the N feature rows (the
    layer's forward never sees the T·N repeated rows), equal to the pass through that forward
    (a hook on the layer forces it) and to the loop of T passes; chunking changes nothing."""
    from bayesify.nn.laplace_posterior import LaplaceLinear

    data = classification_data(96)
    net = _trained(mlp(5, 3, hidden=(16,)), data, "classification", epochs=3)
    la = bayesify.Laplace.from_pretrained(net, data, task="classification", hessian=hessian,
                                          predictive=predictive, batch_size=32)  # fmt: skip
    x = data[0][:7]
    seen: list[int] = []
    plain_forward = LaplaceLinear.forward

    def counting(self, rows):
        seen.append(rows.shape[0])
        return plain_forward(self, rows)

    monkeypatch.setattr(LaplaceLinear, "forward", counting)
    out = la.sample(x, 12, seed=0, max_rows=None)
    assert seen == []
    chunked = la.sample(x, 12, seed=0, max_rows=36)  # 3 rows per block
    handle = la.layer.register_forward_pre_hook(lambda *_: None)
    through_forward = la.sample(x, 12, seed=0, max_rows=None)
    handle.remove()
    assert seen == [12 * 7]
    torch.testing.assert_close(chunked, out, rtol=0, atol=0)
    torch.testing.assert_close(through_forward, out, rtol=1e-6, atol=1e-6)
    loop = la.reference_samples(x, 12, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, loop, rtol=1e-5, atol=1e-5)


def test_bayesify_train_method_laplace(tmp_path):
    """``bayesify train --method laplace`` on a table: the MAP trained, then the posterior,
    saved as a bundle that loads as a Laplace with its fitted prior precision."""
    from bayesify.cli import app

    x, y = regression_data(200)
    rows = np.column_stack([x.numpy(), y.numpy()])
    np.savetxt(tmp_path / "t.csv", rows, delimiter=",", header="a,b,c,d,e,y", comments="")
    res = CliRunner().invoke(app, ["train", "--data", str(tmp_path / "t.csv"), "--target", "y",
                                   "--method", "laplace", "--epochs", "3",
                                   "--out", str(tmp_path / "b")])  # fmt: skip
    assert res.exit_code == 0, res.output
    loaded = bayesify.load(tmp_path / "b")
    assert isinstance(loaded, bayesify.Laplace) and loaded.evidence is not None
    assert loaded.config.subset is LaplaceSubset.ALL  # the regression default, named
    assert loaded.prior_precision == pytest.approx(loaded.evidence.prior_precision)


def test_weight_draws_handed_in_give_joint_samples():
    """The output-space draw is the default; weights drawn from the block (``block.draw``) and
    handed to the layer through the sampling plan are used as they are: every row of group t
    gets ``W_t φ + b_t`` (one network per group, a joint sample over rows)."""
    from bayesify.nn import sampling

    data = classification_data(96)
    net = _trained(mlp(5, 3, hidden=(16,)), data, "classification", epochs=3)
    la = bayesify.Laplace.from_pretrained(net, data, task="classification", link="mc",
                                          batch_size=32)  # fmt: skip
    layer, x, t = la.layer, data[0][:6], 4
    w, b = layer.posterior.draw(t, torch.Generator().manual_seed(0))
    with torch.no_grad():
        feats = la.net[:-1](x)
        with sampling(layer, t, draws={layer: (w, b)}):
            out = layer.group_outputs(feats)
            forward = layer(feats.repeat(t, 1)).unflatten(0, (t, -1))
    expected = torch.einsum("nd,tcd->tnc", feats.double(), w.double()) + b.double()[:, None]
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(forward, out, rtol=0, atol=0)


def test_last_layer_regression_spreads_in_the_gap_and_far_away():
    # trained on x in [-3, -1] ∪ [1, 3]: the last layer's epistemic std at the gap's centre and
    # at ±5 is at least 3 x the in-data one (measured 7 x on both), with δ and σ² by marglik
    from test_swag import FAR, IN_DATA, gap_data

    torch.manual_seed(0)
    det = bayesify.Deterministic(mlp(1, 1, (50,), norm=None))
    det.fit(gap_data(200, 0), val=gap_data(100, 1), epochs=200, batch_size=32, lr=1e-2,
            progress=False)  # fmt: skip
    la = bayesify.Laplace.from_pretrained(det.net, gap_data(200, 0), val=gap_data(100, 1),
                                          subset="last-layer")  # fmt: skip
    inside, gap, far = (float(la.predict(x, 500, seed=1).epistemic_variance.sqrt().mean())
                        for x in (IN_DATA, torch.zeros(1, 1), FAR))  # fmt: skip
    assert gap >= 3 * inside and far >= 3 * inside, (inside, gap, far)
    assert far >= math.sqrt(la.noise_variance)  # beyond the data the weights dominate


def test_regression_defaults_to_every_layer_whose_predicted_std_varies_more():
    # the last layer's predicted std is s·√(1 + h(x)) (h: x's leverage on the features), near
    # s everywhere; every layer's varies more: the ratio of its largest to its smallest
    # predicted std over inputs in [-6, 6] is larger (measured 10.0 against 4.2 on this toy)
    from test_swag import gap_data

    assert bayesify.Laplace(mlp(1, 1, (8,))).config.subset is LaplaceSubset.ALL
    assert bayesify.Laplace(mlp(1, 3, (8,)), task="classification").config.subset is (
        LaplaceSubset.LAST_LAYER)  # fmt: skip
    assert bayesify.Laplace(mlp(1, 1, (8,)), hessian="full").config.subset is (
        LaplaceSubset.LAST_LAYER)  # fmt: skip
    torch.manual_seed(0)
    det = bayesify.Deterministic(mlp(1, 1, (50,), norm=None))
    det.fit(gap_data(200, 0), val=gap_data(100, 1), epochs=200, batch_size=32, lr=1e-2,
            progress=False)  # fmt: skip
    grid = torch.linspace(-6, 6, 61)[:, None]
    ratios = {}
    for subset in (None, "last-layer"):
        la = bayesify.Laplace.from_pretrained(det.net, gap_data(200, 0), val=gap_data(100, 1),
                                              subset=subset)  # fmt: skip
        std = la.predict(grid, 500, seed=1).variance.sqrt().flatten()
        ratios[subset] = float(std.max() / std.min())
    assert ratios[None] > 1.5 * ratios["last-layer"], ratios


def test_default_classification_draws_logits_whose_mutual_information_flags_ood():
    # the default link draws logits from the GLM Gaussian: samples differ, the mutual
    # information is positive and larger on inputs 6 x the training scale than on training-
    # like ones (its mean over 200 rows at least 2 x); the probit link gives 0 (round-off)
    x, y = classification_data(400)
    net = _trained(mlp(5, 3, (16,), norm=None), (x[:200], y[:200]), "classification")
    la = bayesify.Laplace.from_pretrained(net, (x[:200], y[:200]), task="classification")
    assert la.config.link is Link.MC and not la.config.probit
    ood = 6 * torch.randn(200, 5, generator=torch.Generator().manual_seed(3))
    mi_in = la.predict(x[200:], 100, seed=0).mutual_information
    mi_ood = la.predict(ood, 100, seed=0).mutual_information
    assert float(mi_in.min()) > 0 and float(mi_ood.mean()) >= 2 * float(mi_in.mean())
    probit = bayesify.Laplace.from_pretrained(net, (x[:200], y[:200]), task="classification",
                                              link="probit")  # fmt: skip
    with pytest.warns(bayesify.methods.core.spread.NegligibleSpreadWarning, match="link='mc'"):
        assert float(probit.predict(ood, 8, seed=0).mutual_information.abs().max()) < 1e-12
