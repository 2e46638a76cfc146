"""Reference CPU training throughput of PyTorch (Debian python3-torch) on the two
networks softsync trains: Caffe's MNIST LeNet and Caffe's cifar10_full.

    python3 torch_train_throughput.py [threads] [--nets lenet:64,cifar10_full:100] [--seconds 8]

Prints "torch <version>", then per network a line
"<name> batch=<b> threads=<t> <x> images/s <y> images/cpu-s": images per second of
wall-clock time and of the process's CPU time, for a full SGD-momentum step (forward,
backward, update) on random data after 5 warm-up steps. softsync bench all runs it
(bench/torch_train_throughput.py, docs/bench.md)."""
import argparse, time, torch, torch.nn as nn

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

# name: (printed name, network, input shape)
NETS = {"lenet": ("lenet-mnist", lenet, (1, 28, 28)), "cifar10_full": ("cifar10_full", cifar10_full, (3, 32, 32))}

def bench(name, net, shape, batch, seconds):
    x = torch.randn(batch, *shape); y = torch.randint(0, 10, (batch,))
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = loss_fn(net(x), y); loss.backward(); opt.step()
    for _ in range(5): step()
    n, t0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        step(); n += 1
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"{name} batch={batch} threads={torch.get_num_threads()} {n*batch/dt:.0f} images/s "
          f"{n*batch/max(dc, 1e-9):.0f} images/cpu-s", flush=True)

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("threads", nargs="?", type=int, default=2)
    p.add_argument("--nets", default="lenet:64,cifar10_full:100", help="comma-separated name:batch")
    p.add_argument("--seconds", type=float, default=8.0, help="timed seconds per network")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}", flush=True)
    for item in a.nets.split(","):
        key, batch = item.split(":")
        name, make, shape = NETS[key]
        torch.manual_seed(0)
        bench(name, make(), shape, int(batch), a.seconds)
