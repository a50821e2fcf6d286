"""What every method does with inputs users get wrong or leave out (shared base class)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import bayesify
from bayesify.models import lenet, mlp


def _fitted(val: bool) -> bayesify.MCBN:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 3, generator=g), torch.randn(96, generator=g)
    method = bayesify.MCBN(mlp(3, hidden=(8,)), bank_size=4)
    method.fit((x, y), val=(x, y) if val else None, epochs=1, batch_size=16, progress=False)
    return method


def test_float64_and_integer_inputs_are_cast_to_the_network_dtype():
    method = _fitted(val=True)
    x = np.random.default_rng(0).normal(size=(5, 3))  # numpy's float64
    as_float32 = method.sample(torch.from_numpy(x).float(), 4, seed=1)
    torch.testing.assert_close(method.sample(x, 4, seed=1), as_float32, rtol=0, atol=0)
    ints = torch.tensor([[1, 0, -2]])
    torch.testing.assert_close(
        method.sample(ints, 4, seed=1), method.sample(ints.float(), 4, seed=1)
    )


def test_unfitted_noise_variance_warns_until_fitted_and_survives_a_bundle(tmp_path):
    method = _fitted(val=False)
    x = torch.randn(4, 3)
    with pytest.warns(UserWarning, match="never fitted"):
        method.predict(x, samples=3)
    with pytest.warns(UserWarning, match="never fitted"):
        bayesify.load(method.save(tmp_path / "unfitted")).predict(x, samples=3)
    method.fit_noise((torch.randn(32, 3), torch.randn(32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        method.predict(x, samples=3)
        bayesify.load(method.save(tmp_path / "fitted")).predict(x, samples=3)
        _fitted(val=True).predict(x, samples=3)


def test_regression_training_on_class_scores_names_the_task():
    x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
    with pytest.raises(ValueError, match="task='classification'"):
        bayesify.MCBN(lenet(norm="batch")).fit((x, y), epochs=1, batch_size=16, progress=False)


def test_unknown_task_lists_the_choices():
    with pytest.raises(ValueError, match="unknown task 'clasification'; valid: regression, class"):
        bayesify.MCBN(mlp(3), task="clasification")
    with pytest.raises(ValueError, match="unknown noise_objective .nll.; valid: crps, pll"):
        bayesify.MCBN(mlp(3), noise_objective="nll")


# ---------------------------------------------------------------- inputs accepted the same way
def _reg_data(n: int = 96):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 3, generator=g)
    return x, x[:, 0] + 0.1 * torch.randn(n, generator=g)


NET = mlp(3, hidden=(8,), norm=None, dropout=0.1)  # every method wraps a copy of it


def _dropout_fit(x, y, xv, yv) -> bayesify.MCDropout:
    m = bayesify.MCDropout(NET)
    return m.fit((x, y), val=(xv, yv), epochs=2, batch_size=16, progress=False)


def test_column_targets_n_by_1_give_the_same_fit_as_flat_ones():
    x, y = _reg_data()
    flat = _dropout_fit(x[:64], y[:64], x[64:], y[64:])
    col = _dropout_fit(x[:64], y[:64, None], x[64:], y[64:, None])
    assert col.noise_variance == flat.noise_variance
    torch.testing.assert_close(col.sample(x[:5], 4, seed=0), flat.sample(x[:5], 4, seed=0))
    assert col.fit_noise((x[64:], y[64:, None])) == flat.fit_noise((x[64:], y[64:]))
    pred = flat.predict(x[64:], samples=4, seed=0)
    torch.testing.assert_close(pred.log_prob(y[64:, None]), pred.log_prob(y[64:]))
    torch.testing.assert_close(pred.crps(y[64:, None]), pred.crps(y[64:]))


def test_several_targets_per_row_are_refused_by_name():
    x, y = _reg_data()
    method = bayesify.MCDropout(mlp(3, dropout=0.1))
    with pytest.raises(
        ValueError, match=r"one target \(y of shape \[N\] or \[N, 1\]\), got rows of shape \[2\]"
    ):
        method.fit((x, torch.stack([y, y], 1)), epochs=1, progress=False)
    with pytest.raises(ValueError, match=r"regression targets must have shape \[N\] or \[N, 1\]"):
        method.fit_noise((x, torch.stack([y, y], 1)))


CLASSIFIER = mlp(3, 3, hidden=(8,), norm=None, dropout=0.1)


def _classifier() -> bayesify.MCDropout:
    return bayesify.MCDropout(CLASSIFIER, task="classification")


def test_class_labels_n_by_1_train_like_flat_labels():
    x, _ = _reg_data()
    labels = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # 0..2
    a = _classifier().fit((x, labels), val=(x, labels), epochs=1, batch_size=16, progress=False)
    b = _classifier().fit(
        (x, labels[:, None]), val=(x, labels[:, None]), epochs=1, batch_size=16, progress=False
    )
    torch.testing.assert_close(a.sample(x[:4], 3, seed=0), b.sample(x[:4], 3, seed=0))


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        (torch.full((96,), 0.5), r"class labels must be whole numbers, got \[0.5"),
        (
            torch.full((96,), 7),
            r"class labels must be in 0..2 \(the network has 3 outputs\), got \[7",
        ),
        (torch.full((96,), -1), r"class labels must be in 0..2 .*got \[-1"),
    ],
)
def test_bad_class_labels_get_a_named_error(labels, message):
    x, _ = _reg_data()
    with pytest.raises(ValueError, match=message):
        _classifier().fit((x, labels), epochs=1, batch_size=16, progress=False)


@pytest.mark.parametrize(
    ("samples", "message"),
    [(True, r"got True \(a bool\)"), (2.0, "got 2.0"), (0, "got 0"), ("4", "got '4'")],
)
def test_samples_must_be_a_positive_int(samples, message):
    method = _fitted(val=True)
    with pytest.raises(ValueError, match="samples must be a positive integer, " + message):
        method.predict(torch.randn(3, 3), samples=samples)
    with pytest.raises(ValueError, match="samples must be a positive integer"):
        method.sample(torch.randn(3, 3), samples)


def test_numpy_integer_samples_are_fine():
    method = _fitted(val=True)
    assert method.predict(torch.randn(3, 3), samples=np.int64(4), seed=0).num_samples == 4


def test_predict_reads_the_inputs_of_a_dataset_or_dataloader_in_order():
    from torch.utils.data import DataLoader, Dataset, TensorDataset

    method = _fitted(val=True)
    x, y = _reg_data(20)
    want = method.predict(x, samples=4, seed=0).samples

    class Rows(Dataset):  # a map-style dataset of (x, y) pairs
        def __len__(self):
            return len(x)

        def __getitem__(self, i):
            return x[i], y[i]

    for data in (
        TensorDataset(x, y),
        Rows(),
        DataLoader(TensorDataset(x, y), batch_size=7, shuffle=True),
        DataLoader(Rows(), batch_size=5),
        TensorDataset(x),
    ):
        got = method.predict(data, samples=4, seed=0).samples
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_from_pretrained_takes_a_dataset():
    from torch.utils.data import TensorDataset

    x, y = _reg_data()
    net = mlp(3)
    a = bayesify.MCBN.from_pretrained(net, TensorDataset(x, y), batch_size=16, bank_size=3)
    b = bayesify.MCBN.from_pretrained(net, (x, y), batch_size=16, bank_size=3)
    torch.testing.assert_close(a.layers[0].bank_mean, b.layers[0].bank_mean)


def test_to_device_returns_the_method_and_names_a_missing_cuda(tmp_path):
    method = _fitted(val=True)
    assert method.to("cpu") is method and method.device.type == "cpu"
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        method.to("gpu")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the missing-CUDA error cannot be shown")
    message = r"device 'cuda' asked for, but this PyTorch build sees no CUDA device"
    with pytest.raises(ValueError, match=message):
        method.to("cuda")
    x, y = _reg_data()
    with pytest.raises(ValueError, match=message):
        bayesify.MCDropout(mlp(3, dropout=0.1)).fit((x, y), epochs=1, device="cuda")
    path = method.save(tmp_path / "b")
    with pytest.raises(ValueError, match=message):
        bayesify.load(path, device="cuda")


def test_save_refuses_to_overwrite_a_bundle_unless_asked(tmp_path):
    method = _fitted(val=True)
    path = method.save(tmp_path / "b")
    before = (path / "weights.safetensors").read_bytes()
    method.noise_variance = 0.5
    with pytest.raises(FileExistsError, match="already exists.*overwrite=True"):
        method.save(path)
    assert (path / "weights.safetensors").read_bytes() == before
    method.save(path, overwrite=True)
    assert bayesify.load(path).noise_variance == 0.5
    (tmp_path / "empty").mkdir()
    method.save(tmp_path / "empty")  # an empty folder is no bundle to lose


def _data(width: int = 3, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (n, width), generator=g)
    return x, x[:, 0].float() + 0.1 * torch.randn(n, generator=g)


def _trained(x, y) -> bayesify.MCDropout:
    torch.manual_seed(0)
    method = bayesify.MCDropout(mlp(3, hidden=(8,), dropout=0.1, norm=None))
    return method.fit((x, y), val=(x, y), epochs=2, batch_size=16, progress=False)


def test_fit_casts_integer_inputs_as_predict_does():
    x, y = _data()  # int64 inputs, as numpy or a table of counts gives them
    as_ints, as_floats = _trained(x, y), _trained(x.float(), y)
    for a, b in zip(as_ints.net.parameters(), as_floats.net.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert as_ints.noise_variance == as_floats.noise_variance
    _trained(x.numpy(), y.numpy())  # numpy's int64 too


@pytest.mark.parametrize(
    "train, val, message",
    [
        ("complex", None, r"^training inputs are complex \(complex64\); bayesify takes real"),
        ("wide", None, r"^training inputs have 7 feature\(s\) per row; the network's first"),
        (None, "wide", r"^validation inputs have 7 feature\(s\) per row"),
        ("images", None, r"^training inputs of shape \[N, 3, 28, 28\] do not fit the network"),
        ("complex y", None, r"^training targets are complex \(complex64\)"),
        ("int dataset", None, r"^training inputs are int64; the network takes floating-point"),
    ],
)
def test_fit_refuses_inputs_predict_refuses_in_one_line(train, val, message):
    x, y = _data()
    bad = {
        "complex": (x.to(torch.complex64), y),
        "wide": (torch.randn(64, 7), y),
        "images": (torch.randn(64, 3, 28, 28), y),
        "complex y": (x.float(), y.to(torch.complex64)),
        "int dataset": torch.utils.data.TensorDataset(x, y),
        None: (x.float(), y),
    }
    method = bayesify.MCDropout(mlp(3, hidden=(8,), dropout=0.1, norm=None))
    if train == "images":  # a LeNet reads one channel
        method = bayesify.Deterministic(lenet(), task="classification")
    with pytest.raises(ValueError, match=message) as info:
        method.fit(bad[train], val=bad[val], epochs=1, batch_size=16, progress=False)
    assert "\n" not in str(info.value)


def test_predict_refuses_complex_inputs_instead_of_dropping_the_imaginary_part():
    method = _fitted(val=True)
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"^inputs are complex \(complex64\)"):
        method.predict(x + 1j * torch.ones(4, 3), samples=2)
    with pytest.raises(ValueError, match=r"^inputs must be numbers .*, got str"):
        method.predict(np.array([["a", "b", "c"]]), samples=2)
