#!/usr/bin/env python3
"""Regenerates the golden forward/backward results of learner/nn (TestGolden).

Needs PyTorch (Debian 12: apt-get install python3-torch, which installs
PyTorch 1.13 for /usr/bin/python3) and NumPy. Run from anywhere:

    /usr/bin/python3 learner/nn/testdata/golden/generate.py [OUT]

It writes lenet/ and cifar10_full/ into OUT (default: the folder of this
script), in the format README.md describes and golden_test.go reads.

Independent of softsync: Caffe's lenet and cifar10_full are built from
PyTorch's own layers with Caffe's semantics where PyTorch's defaults differ
(pooling rounds its output size up, LRN runs within each channel). Per
network: the seed is set to 1701, every parameter in network order is drawn
from N(0, 0.05^2), then a batch of 8 inputs from N(0, 1) and 8 labels
uniform in 0..9; forward, mean softmax cross-entropy, backward, in float32.

With Debian 12's PyTorch 1.13 it writes the committed inputs, labels,
weights and manifests bit for bit, and logits and gradients within 7e-7 of
their largest magnitude (float32 sums in another order, as other CPUs and
PyTorch builds do them), far inside TestGolden's tolerances (1e-5, 1e-4).
"""

import json
import os
import sys

import numpy as np
import torch
from torch import nn

SEED = 1701
BATCH = 8
STD = 0.05


class WithinChannelLRN(nn.Module):
    """Caffe's LRN with norm_region WITHIN_CHANNEL: y = x * scale^-beta,
    scale = 1 + alpha * (the mean of x^2 over a size x size window, zero
    padded, always divided by size^2)."""

    def __init__(self, size, alpha, beta):
        super().__init__()
        self.size, self.alpha, self.beta = size, alpha, beta

    def forward(self, x):
        mean = nn.functional.avg_pool2d(x * x, self.size, stride=1, padding=(self.size - 1) // 2, count_include_pad=True)
        return x * (1 + self.alpha * mean).pow(-self.beta)


def lenet():
    # learner/nn/specs/lenet.net
    return nn.Sequential(
        nn.Conv2d(1, 20, 5),
        nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Conv2d(20, 50, 5),
        nn.MaxPool2d(2, 2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(800, 500),
        nn.ReLU(),
        nn.Linear(500, 10),
    ), [BATCH, 1, 28, 28]


def cifar10_full():
    # learner/nn/specs/cifar10_full.net
    return nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2),
        nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.ReLU(),
        WithinChannelLRN(3, 5e-05, 0.75),
        nn.Conv2d(32, 32, 5, padding=2),
        nn.ReLU(),
        nn.AvgPool2d(3, 2, ceil_mode=True),
        WithinChannelLRN(3, 5e-05, 0.75),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.AvgPool2d(3, 2, ceil_mode=True),
        nn.Flatten(),
        nn.Linear(1024, 10),
    ), [BATCH, 3, 32, 32]


def write(path, t, dtype="<f4"):
    np.ascontiguousarray(t.detach().numpy()).astype(dtype).tofile(path)


def generate(name, make, out):
    net, shape = make()
    torch.manual_seed(SEED)
    params = list(net.named_parameters())
    with torch.no_grad():
        for _, p in params:
            p.normal_(0, STD)
    x = torch.randn(shape)
    labels = torch.randint(0, 10, (BATCH,))
    logits = net(x)
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    write(os.path.join(d, "input.f32"), x)
    write(os.path.join(d, "labels.i32"), labels, "<i4")
    write(os.path.join(d, "logits.f32"), logits)
    manifest = {
        "net": name,
        "batch": BATCH,
        "input_shape": shape,
        "input": "input.f32",
        "labels": "labels.i32",
        "logits": "logits.f32",
        "loss": loss.item(),
        "loss_definition": "mean over the batch of softmax cross-entropy; gradients are of that mean",
        "init": f"every weight and bias drawn N(0, {STD}^2), seed {SEED} (the values are in the files)",
        "layout": "row-major float32 little-endian; conv weights [out][in][kh][kw], fc weights [out][in]; input NCHW",
        "params": [],
    }
    for i, (pname, p) in enumerate(params):
        base = f"param{i:02d}_{pname.replace('.', '_')}"
        write(os.path.join(d, base + ".f32"), p)
        write(os.path.join(d, base + ".grad.f32"), p.grad)
        manifest["params"].append({"name": pname, "shape": list(p.shape), "file": base + ".f32", "grad": base + ".grad.f32"})
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.set_num_threads(1)  # the same sums from run to run
    for name, make in [("lenet", lenet), ("cifar10_full", cifar10_full)]:
        generate(name, make, out)


if __name__ == "__main__":
    main()
