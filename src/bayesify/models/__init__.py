"""Network factories: MLP, LeNet-style CNN, small ResNet."""

from bayesify.models.lenet import lenet
from bayesify.models.mlp import Norm, mlp, teye_regression_net
from bayesify.models.registry import MODELS, build_model, register_model
from bayesify.models.resnet import resnet

__all__ = [
    "MODELS",
    "Norm",
    "build_model",
    "lenet",
    "mlp",
    "register_model",
    "resnet",
    "teye_regression_net",
]
