#!/usr/bin/env python3
"""Regenerates the golden forward/backward results of learner/nn (TestGolden).

Needs PyTorch (Debian 12: apt-get install python3-torch, which installs
PyTorch 1.13 for /usr/bin/python3) and NumPy. Run from anywhere:

    /usr/bin/python3 learner/nn/testdata/golden/generate.py [OUT]

It writes lenet/, cifar10_full/, layers/, alexnet/, resnet18/ and
shapes.json into OUT (default: the folder of this script), in the format
README.md describes and golden_test.go reads.

Independent of softsync: Caffe's lenet and cifar10_full are built from
PyTorch's own layers with Caffe's semantics where PyTorch's defaults differ
(pooling rounds its output size up, LRN runs within each channel). Per
network: the seed is set to 1701, every parameter in network order is drawn
from N(0, 0.05^2), then a batch of 8 inputs from N(0, 1) and 8 labels
uniform in 0..9; forward, mean softmax cross-entropy, backward, in float32.

layers/ is a small network of every layer kind softsync added to Caffe's
(grouped convolution, LRN across channels, batch norm after a
convolution and after a fully connected layer, dropout, residual adds,
global pooling, pooling with PyTorch's floor rounding); alexnet/ and
resnet18/ are the built-in networks narrowed (the same layers and
connections, fewer channels, a smaller input, 10 classes: NARROW below).
Their weights are drawn per kind (see draw), batch norm's running
statistics too; each also records, from a forward pass in training, the
batch's mean and unbiased variance at each batch norm (the values
softsync's gradient vector carries in the running statistics' slots) and,
from a forward pass in evaluation mode on the drawn running statistics,
the logits. Dropout's masks are those of softsync's engines (mask below:
the same function of the seed and the element's index, computed here in
NumPy), so that the training passes compare exactly. shapes.json lists
the parameter shapes of the full-size alexnet and torchvision's resnet18.

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
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock

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


GRAPH_SEED = 2718  # the networks below
DROPOUT_SEED = 31  # softsync's Net.SetSeed before the training pass
NARROW_BATCH = 4
M64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finaliser with its increment, on uint64 arrays:
    softsync's mix64, which derives a dropout layer's seed."""
    z = np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    return fmix64(z)


def fmix64(z):
    """SplitMix64's output function on uint64 arrays (the engines' fmix64)."""
    z = np.asarray(z, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def triple32(x):
    """Chris Wellons's 32-bit hash on uint32 arrays (the engines' triple32)."""
    x = np.asarray(x, dtype=np.uint32)
    x = x ^ (x >> np.uint32(17))
    x = x * np.uint32(0xED5AD4BB)
    x = x ^ (x >> np.uint32(11))
    x = x * np.uint32(0xAC4C1B51)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x31848BAB)
    return x ^ (x >> np.uint32(14))


def mask(layer_index, shape, cnhw, ratio):
    """The keep mask (1 or 0) of softsync's dropout layer number
    layer_index (in the spec, from 0) for a tensor of shape (N, C, H, W).
    The layer's seed is mix64(DROPOUT_SEED ^ mix64(index + 1)) (nn's
    dropoutLayer); element i of the batch's tensor, numbered in its layout
    (CNHW after a convolution, NCHW after a fully connected layer), is kept
    as kernels.Dropout's doc says: with key = uint32(fmix64(fmix64(seed) +
    i>>32)), when triple32(uint32(i) ^ key) >= uint32(ratio·2^32)."""
    with np.errstate(over="ignore"):
        seed = mix64(np.uint64(DROPOUT_SEED) ^ mix64(np.uint64(layer_index + 1)))
        n, c, h, w = shape
        idx = np.arange(n * c * h * w, dtype=np.uint64)
        key = (fmix64(fmix64(seed) + (idx >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        low = (idx & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        h32 = triple32(low ^ key)
        thr = np.uint32(int(float(np.float32(ratio)) * (1 << 32)))
    keep = (h32 >= thr).astype(np.float32)
    if cnhw:
        keep = keep.reshape(c, n, h, w).transpose(1, 0, 2, 3)
    return torch.from_numpy(np.ascontiguousarray(keep.reshape(n, c, h, w)))


class Dropout(nn.Module):
    """Inverted dropout with softsync's mask (see mask) and scale (the
    float32 1/(1 − ratio)); identity in eval."""

    def __init__(self, index, ratio, cnhw):
        super().__init__()
        self.index, self.ratio, self.cnhw = index, ratio, cnhw
        if index is None:  # a full-size network, for its shapes only
            self.index = -1

    def forward(self, x):
        if not self.training:
            return x
        shape = tuple(x.shape) + (1,) * (4 - x.dim())
        m = mask(self.index, shape, self.cnhw, self.ratio).reshape(x.shape)
        return x * (m * np.float32(1) / np.float32(1 - np.float32(self.ratio)))


def layer_index(spec_text, name):
    """The index of layer name among the spec's layers (from 0); None
    without a spec."""
    if not spec_text:
        return None
    layers = [l.split("#")[0].split() for l in spec_text.splitlines()]
    layers = [f for f in layers if f and f[0] != "input"]
    return [f[1] if len(f) > 1 and "=" not in f[1] else None for f in layers].index(name)


# The small network of every new layer kind, as a spec and as modules.
LAYERS_SPEC = """input channels=3 height=10 width=10
conv c0 out=6 kernel=3 pad=1 group=3
batchnorm b0
relu r0
lrn n0 size=3 alpha=0.2 beta=0.75 k=1.5 region=across_channels
pool p0 mode=max kernel=3 stride=2 pad=1 round=floor
conv c1 out=6 kernel=3 pad=1 bias=none
batchnorm b1
add s0 from=b1,p0
relu r1
dropout d0 ratio=0.25
conv c2 out=8 kernel=3 stride=2 pad=1 from=d0
conv c3 out=8 kernel=1 stride=2 from=r1
add s1 from=c2,c3
pool g0 mode=avg global=true
fc f0 out=12
batchnorm b2
relu r2
dropout d1 ratio=0.5
fc f1 out=10
softmax loss
"""


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.c0 = nn.Conv2d(3, 6, 3, padding=1, groups=3)
        self.b0 = nn.BatchNorm2d(6)
        self.n0 = nn.LocalResponseNorm(3, alpha=0.2, beta=0.75, k=1.5)
        self.p0 = nn.MaxPool2d(3, 2, 1)
        self.c1 = nn.Conv2d(6, 6, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(6)
        self.d0 = Dropout(layer_index(LAYERS_SPEC, "d0"), 0.25, True)
        self.c2 = nn.Conv2d(6, 8, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(6, 8, 1, stride=2)
        self.f0 = nn.Linear(8, 12)
        self.b2 = nn.BatchNorm1d(12)
        self.d1 = Dropout(layer_index(LAYERS_SPEC, "d1"), 0.5, False)
        self.f1 = nn.Linear(12, 10)

    def forward(self, x):
        p0 = self.p0(self.n0(torch.relu(self.b0(self.c0(x)))))
        r1 = torch.relu(self.b1(self.c1(p0)) + p0)
        s1 = self.c2(self.d0(r1)) + self.c3(r1)
        g0 = torch.flatten(nn.functional.adaptive_avg_pool2d(s1, 1), 1)
        return self.f1(self.d1(torch.relu(self.b2(self.f0(g0)))))


# The narrowed networks: the built-in spec's channels (and fc6, fc7,
# fc8 for alexnet) replaced, the input made smaller, 10 classes.
NARROW = {
    "alexnet": {"input": 67, "out": {96: 8, 256: 16, 384: 12, 4096: 32, 1000: 10}},
    "resnet18": {"input": 32, "out": {64: 4, 128: 6, 256: 8, 512: 10, 1000: 10}},
}


class AlexNet(nn.Module):
    """Caffe's bvlc_alexnet with channels c (96, 256, 384, 256, 4096)."""

    def __init__(self, c1, c2, c3, fc, classes, side, spec_text):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c1, 11, stride=4)
        self.conv2 = nn.Conv2d(c1, c2, 5, padding=2, groups=2)
        self.conv3 = nn.Conv2d(c2, c3, 3, padding=1)
        self.conv4 = nn.Conv2d(c3, c3, 3, padding=1, groups=2)
        self.conv5 = nn.Conv2d(c3, c2, 3, padding=1, groups=2)
        s = (side - 11) // 4 + 1
        for _ in range(3):
            s = -(-(s - 3) // 2) + 1  # Caffe's ceil rounding
        self.fc6 = nn.Linear(c2 * s * s, fc)
        self.fc7 = nn.Linear(fc, fc)
        self.fc8 = nn.Linear(fc, classes)
        self.drop6 = Dropout(layer_index(spec_text, "drop6"), 0.5, False)
        self.drop7 = Dropout(layer_index(spec_text, "drop7"), 0.5, False)

    def forward(self, x):
        lrn = nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1)
        pool = nn.MaxPool2d(3, 2, ceil_mode=True)
        x = pool(lrn(torch.relu(self.conv1(x))))
        x = pool(lrn(torch.relu(self.conv2(x))))
        x = torch.relu(self.conv4(torch.relu(self.conv3(x))))
        x = pool(torch.relu(self.conv5(x)))
        x = self.drop6(torch.relu(self.fc6(torch.flatten(x, 1))))
        x = self.drop7(torch.relu(self.fc7(x)))
        return self.fc8(x)


class ResNet18(nn.Module):
    """torchvision's resnet18 with the stages' channels w; the same
    module names, so the same state_dict keys."""

    def __init__(self, w, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, w[0], 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = w[0]
        for i, c in enumerate(w):
            stride = 1 if i == 0 else 2
            blocks = []
            for b in range(2):
                down = None
                if b == 0 and (stride != 1 or cin != c):
                    down = nn.Sequential(nn.Conv2d(cin, c, 1, stride=stride, bias=False), nn.BatchNorm2d(c))
                blocks.append(BasicBlock(cin, c, stride if b == 0 else 1, down))
                cin = c
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w[3], classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def narrow_spec(name, spec_dir):
    """The built-in spec of name with NARROW's substitutions."""
    n = NARROW[name]
    with open(os.path.join(spec_dir, name + ".net")) as f:
        text = f.read()
    lines = []
    for line in text.splitlines():
        if line.startswith("input "):
            line = f"input channels=3 height={n['input']} width={n['input']}"
        else:
            for old, new in n["out"].items():
                line = line.replace(f" out={old} ", f" out={new} ")
        lines.append(line)
    return "\n".join(lines) + "\n"


def draw(model, gen):
    """Weights of a well-conditioned network: conv and fc weights
    N(0, 1/fan_in), biases and batch norm's shifts N(0, 0.1²), batch
    norm's scales 1 + N(0, 0.1²), running means N(0, 0.1²), running
    variances uniform on [0.5, 1.5)."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            mod = model.get_submodule(name.rsplit(".", 1)[0])
            kind = name.rsplit(".", 1)[1]
            bn = isinstance(mod, nn.modules.batchnorm._BatchNorm)
            if kind == "running_var":
                t.copy_(0.5 + torch.rand(t.shape, generator=gen))
            elif kind == "running_mean" or kind == "bias":
                t.copy_(0.1 * torch.randn(t.shape, generator=gen))
            elif bn:
                t.copy_(1 + 0.1 * torch.randn(t.shape, generator=gen))
            else:
                fan_in = t[0].numel()
                t.copy_(torch.randn(t.shape, generator=gen) / fan_in ** 0.5)


def generate_graph(name, model, spec_text, side, out):
    """Writes the golden files of a network given as a spec text and the
    matching module (see the module doc)."""
    gen = torch.Generator().manual_seed(GRAPH_SEED)
    draw(model, gen)
    x = torch.randn((NARROW_BATCH, 3, side, side), generator=gen)
    labels = torch.randint(0, 10, (NARROW_BATCH,), generator=gen)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    stats = {}

    def hook(mod, inputs, _):
        t = inputs[0].detach().double()
        dims = [0] + list(range(2, t.dim()))
        stats[mod] = (t.mean(dims), t.var(dims, unbiased=True))

    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    handles = [m.register_forward_hook(hook) for m in bns]
    model.train()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, labels)
    loss.backward()
    for h in handles:
        h.remove()
    model.load_state_dict(state)  # the drawn running statistics, before training updated them
    model.eval()
    with torch.no_grad():
        eval_logits = model(x)

    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "spec.net"), "w") as f:
        f.write(spec_text)
    write(os.path.join(d, "input.f32"), x)
    write(os.path.join(d, "labels.i32"), labels, "<i4")
    write(os.path.join(d, "logits.f32"), logits)
    write(os.path.join(d, "eval_logits.f32"), eval_logits)
    manifest = {
        "net": name,
        "spec": "spec.net",
        "batch": NARROW_BATCH,
        "input_shape": list(x.shape),
        "input": "input.f32",
        "labels": "labels.i32",
        "logits": "logits.f32",
        "eval_logits": "eval_logits.f32",
        "dropout_seed": DROPOUT_SEED,
        "loss": loss.item(),
        "loss_definition": "mean over the batch of softmax cross-entropy; gradients are of that mean",
        "init": f"drawn per kind (generate.py: draw), seed {GRAPH_SEED} (the values are in the files)",
        "layout": "row-major float32 little-endian; conv weights [out][in/groups][kh][kw], fc weights [out][in]; input NCHW; "
        "for running statistics, grad holds the batch's mean or unbiased variance of the training pass",
        "params": [],
    }
    params = dict(model.named_parameters())
    owner = {}
    for m in bns:
        for k in ("running_mean", "running_var"):
            owner[id(getattr(m, k))] = (m, k)
    i = 0
    for pname, t in model.state_dict(keep_vars=True).items():
        if pname.endswith("num_batches_tracked"):
            continue
        base = f"param{i:02d}_{pname.replace('.', '_')}"
        if pname in params:
            write(os.path.join(d, base + ".f32"), state[pname])
            write(os.path.join(d, base + ".grad.f32"), params[pname].grad)
        else:
            m, k = owner[id(t)]
            write(os.path.join(d, base + ".f32"), state[pname])
            write(os.path.join(d, base + ".grad.f32"), stats[m][0 if k == "running_mean" else 1].float())
        manifest["params"].append({"name": pname, "shape": list(t.shape), "file": base + ".f32", "grad": base + ".grad.f32"})
        i += 1
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def shapes(out):
    """The parameter shapes (state_dict, without num_batches_tracked) of
    the full-size alexnet and of torchvision's resnet18."""
    full = {
        "alexnet": AlexNet(96, 256, 384, 4096, 1000, 227, ""),
        "resnet18": torchvision.models.resnet18(),
    }
    # The narrowed resnet's modules are torchvision's, at full width.
    mine = ResNet18([64, 128, 256, 512], 1000).state_dict()
    tv = full["resnet18"].state_dict()
    assert [(k, v.shape) for k, v in mine.items()] == [(k, v.shape) for k, v in tv.items()]
    res = {}
    for name, model in full.items():
        res[name] = [[k, list(v.shape)] for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")]
    with open(os.path.join(out, "shapes.json"), "w") as f:
        json.dump(res, f, indent=0)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    spec_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "specs")
    torch.set_num_threads(1)  # the same sums from run to run
    for name, make in [("lenet", lenet), ("cifar10_full", cifar10_full)]:
        generate(name, make, out)
    torch.manual_seed(GRAPH_SEED)
    generate_graph("layers", Layers(), LAYERS_SPEC, 10, out)
    a, r = NARROW["alexnet"], NARROW["resnet18"]
    ao, text = a["out"], narrow_spec("alexnet", spec_dir)
    generate_graph("alexnet", AlexNet(ao[96], ao[256], ao[384], ao[4096], 10, a["input"], text), text, a["input"], out)
    ro = r["out"]
    generate_graph("resnet18", ResNet18([ro[64], ro[128], ro[256], ro[512]], 10), narrow_spec("resnet18", spec_dir), r["input"], out)
    shapes(out)


if __name__ == "__main__":
    main()
