"""Reference CPU training throughput of PyTorch (Debian python3-torch and
python3-torchvision) on the networks softsync trains: Caffe's MNIST LeNet, Caffe's
cifar10_full, Caffe's bvlc_alexnet and torchvision's resnet18.

    python3 torch_train_throughput.py [threads] [--nets lenet:64,cifar10_full:100] [--seconds 8]
    python3 torch_train_throughput.py [threads] --layers alexnet:32,resnet18:32
    python3 torch_train_throughput.py [threads] --profile alexnet:32

Prints "torch <version>", then per network a line
"<name> batch=<b> threads=<t> <x> images/s <y> images/cpu-s": images per second of
wall-clock time and of the process's CPU time, for a full SGD-momentum step (forward,
backward, update) on random data after 5 warm-up steps. softsync bench all runs it
(bench/torch_train_throughput.py, docs/bench.md).

--layers times each convolution and fully connected layer of the networks alone, at
its shape in the network (median of --repeats runs): per layer a line
"layer <net>/<layer> fwd <ms> ms <x> GFLOP/s <y> cpu-GFLOP/s bwd <ms> ms ...", where
bwd is the backward pass (weight and bias gradients and, except for a network's first
layer, the input gradient), GFLOP/s counts 2 FLOPs per multiply-add of each pass per
second of wall-clock time and cpu-GFLOP/s per second of the process's CPU time (the
rate per busy core).
--profile prints torch.profiler's table of one network's training step, by operator."""
import argparse, statistics, time, torch, torch.nn as nn

def lenet():
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                         nn.Flatten(), nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10))

def cifar10_full():
    return nn.Sequential(nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, 2, ceil_mode=True), nn.ReLU(),
                         nn.LocalResponseNorm(3, alpha=5e-5, beta=0.75),
                         nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(), nn.AvgPool2d(3, 2, ceil_mode=True),
                         nn.LocalResponseNorm(3, alpha=5e-5, beta=0.75),
                         nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.AvgPool2d(3, 2, ceil_mode=True),
                         nn.Flatten(), nn.Linear(64 * 4 * 4, 10))

def alexnet():
    """Caffe's bvlc_alexnet, with its layer names: grouped conv2, conv4, conv5; LRN
    across 5 channels (PyTorch's LocalResponseNorm is Caffe's ACROSS_CHANNELS);
    dropout 0.5."""
    from collections import OrderedDict
    lrn = lambda: nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)
    return nn.Sequential(OrderedDict([
        ("conv1", nn.Conv2d(3, 96, 11, stride=4)), ("relu1", nn.ReLU()), ("norm1", lrn()), ("pool1", pool()),
        ("conv2", nn.Conv2d(96, 256, 5, padding=2, groups=2)), ("relu2", nn.ReLU()), ("norm2", lrn()),
        ("pool2", pool()),
        ("conv3", nn.Conv2d(256, 384, 3, padding=1)), ("relu3", nn.ReLU()),
        ("conv4", nn.Conv2d(384, 384, 3, padding=1, groups=2)), ("relu4", nn.ReLU()),
        ("conv5", nn.Conv2d(384, 256, 3, padding=1, groups=2)), ("relu5", nn.ReLU()), ("pool5", pool()),
        ("flatten", nn.Flatten()),
        ("fc6", nn.Linear(256 * 6 * 6, 4096)), ("relu6", nn.ReLU()), ("drop6", nn.Dropout(0.5)),
        ("fc7", nn.Linear(4096, 4096)), ("relu7", nn.ReLU()), ("drop7", nn.Dropout(0.5)),
        ("fc8", nn.Linear(4096, 1000))]))

def resnet18():
    import torchvision
    return torchvision.models.resnet18(num_classes=1000)

# name: (printed name, network, input shape, classes)
NETS = {"lenet": ("lenet-mnist", lenet, (1, 28, 28), 10),
        "cifar10_full": ("cifar10_full", cifar10_full, (3, 32, 32), 10),
        "alexnet": ("alexnet", alexnet, (3, 227, 227), 1000),
        "resnet18": ("resnet18", resnet18, (3, 224, 224), 1000)}

def make(key, batch):
    name, build, shape, classes = NETS[key]
    torch.manual_seed(0)
    net = build()
    net.train()
    x = torch.randn(batch, *shape); y = torch.randint(0, classes, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = loss_fn(net(x), y); loss.backward(); opt.step()
    return name, net, x, step

def bench(key, batch, seconds):
    name, _, _, step = make(key, batch)
    for _ in range(5): step()
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        step(); n += 1
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"{name} batch={batch} threads={torch.get_num_threads()} {rate(n*batch/dt)} images/s "
          f"{rate(n*batch/max(dc, 1e-9))} images/cpu-s", flush=True)

def rate(v):
    """v with three significant digits below 100 (the ImageNet networks run a
    few images per second), as an integer above."""
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"

def layer_inputs(net, x):
    """The input of every Conv2d and Linear of net in a forward pass on x, by name."""
    seen, hooks = {}, []
    def keep(lname):
        def hook(m, i, o):
            seen.setdefault(lname, (m, i[0].detach()))
        return hook
    for lname, m in net.named_modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            hooks.append(m.register_forward_hook(keep(lname)))
    with torch.no_grad():
        net(x)
    for h in hooks: h.remove()
    return seen

def time_layers(key, batch, repeats):
    """Times each layer's forward and backward pass alone, on its input in the network."""
    name, net, x, _ = make(key, batch)
    for i, (lname, (m, inp)) in enumerate(layer_inputs(net, x).items()):
        first = i == 0
        inp = inp.clone().requires_grad_(not first)
        out = m(inp)
        gy = torch.randn_like(out)
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            macs = out.numel() * (m.in_channels // m.groups) * kh * kw
        else:
            macs = out.numel() * m.in_features
        fwd, bwd, cfwd, cbwd = [], [], [], []
        for _ in range(repeats + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            out = m(inp)
            t1, c1 = time.perf_counter(), time.process_time()
            out.backward(gy)
            t2, c2 = time.perf_counter(), time.process_time()
            fwd.append(t1 - t0); bwd.append(t2 - t1); cfwd.append(c1 - c0); cbwd.append(c2 - c1)
            m.zero_grad(set_to_none=True); inp.grad = None
        med = lambda v: max(statistics.median(v[1:]), 1e-9)
        ff, fb = 2 * macs / 1e9, (2 if first else 4) * macs / 1e9
        print(f"layer {name}/{lname} fwd {1e3*med(fwd):.2f} ms {ff/med(fwd):.1f} GFLOP/s "
              f"{ff/med(cfwd):.1f} cpu-GFLOP/s bwd {1e3*med(bwd):.2f} ms {fb/med(bwd):.1f} GFLOP/s "
              f"{fb/med(cbwd):.1f} cpu-GFLOP/s", flush=True)

def profile(key, batch):
    from torch.profiler import profile as prof, ProfilerActivity
    name, _, _, step = make(key, batch)
    for _ in range(3): step()
    with prof(activities=[ProfilerActivity.CPU]) as p:
        step()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), flush=True)

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("threads", nargs="?", type=int, default=2)
    p.add_argument("--nets", default="lenet:64,cifar10_full:100", help="comma-separated name:batch")
    p.add_argument("--seconds", type=float, default=8.0, help="timed seconds per network")
    p.add_argument("--layers", default="", help="comma-separated name:batch: time each layer alone instead")
    p.add_argument("--repeats", type=int, default=5, help="runs per layer of --layers (median)")
    p.add_argument("--profile", default="", help="name:batch: profile one training step instead")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}", flush=True)
    if a.profile:
        key, batch = a.profile.split(":")
        profile(key, int(batch))
    elif a.layers:
        for item in a.layers.split(","):
            key, batch = item.split(":")
            time_layers(key, int(batch), a.repeats)
    else:
        for item in a.nets.split(","):
            key, batch = item.split(":")
            bench(key, int(batch), a.seconds)
