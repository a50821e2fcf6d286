"""Dataset loaders: UCI regression splits, MNIST-format images, toy 1-D sets.

Bottom layer: imports only torch, numpy and the standard library. Real data is read from
``data_root()`` (env ``BAYESIFY_DATA``, else ``../shared/data``); every loader takes ``root=``.
"""

from .errors import DataError
from .idx import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    MNIST_CLASSES,
    ImageData,
    load_fashion_mnist,
    load_mnist,
    read_idx,
)
from .paths import DATA_ENV_VAR, data_root
from .standardize import Standardizer
from .toy import toy_cubic, toy_grid, toy_teye, toy_teye_function
from .uci import (
    TEYE_N_SPLITS,
    TEYE_TEST_FRACTION,
    UCI_DATASETS,
    RegressionSplit,
    SplitProtocol,
    load_uci,
    teye_split_indices,
    uci_n_splits,
)

__all__ = [
    "DATA_ENV_VAR",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "MNIST_CLASSES",
    "TEYE_N_SPLITS",
    "TEYE_TEST_FRACTION",
    "UCI_DATASETS",
    "DataError",
    "ImageData",
    "RegressionSplit",
    "SplitProtocol",
    "Standardizer",
    "data_root",
    "load_fashion_mnist",
    "load_mnist",
    "load_uci",
    "read_idx",
    "teye_split_indices",
    "toy_cubic",
    "toy_grid",
    "toy_teye",
    "toy_teye_function",
    "uci_n_splits",
]
