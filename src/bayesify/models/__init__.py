"""Network factories: MLP, LeNet-style CNN, small ResNet."""

from bayesify.models.architecture import (
    architecture_spec,
    net_class_name,
    net_from_reference,
    sequential,
)
from bayesify.models.lenet import lenet
from bayesify.models.mlp import Norm, mlp, teye_regression_net
from bayesify.models.multihead import MultiHeadMLP, multihead_mlp, use_head
from bayesify.models.registry import MODELS, build_model, register_model
from bayesify.models.resnet import resnet

__all__ = [
    "MODELS",
    "Norm",
    "architecture_spec",
    "build_model",
    "lenet",
    "mlp",
    "multihead_mlp",
    "MultiHeadMLP",
    "use_head",
    "net_class_name",
    "net_from_reference",
    "register_model",
    "resnet",
    "sequential",
    "teye_regression_net",
]
