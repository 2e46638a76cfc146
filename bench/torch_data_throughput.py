"""Reference data-pipeline throughput of torchvision 0.14 (Debian python3-torchvision)
with PIL: the training transform of torchvision's ImageNet recipe without the
random-resized crop, the same work softsync's image pipeline does.

    /usr/bin/python3 torch_data_throughput.py DIR [--threads N] [--size 224] [--resize 256] [--passes 2]

DIR holds train/CLASS/IMAGE (torchvision's ImageFolder). Every image of DIR/train is
read, decoded, resized (shorter side --resize, bilinear), randomly cropped to
--size, randomly mirrored and turned into a float tensor (ToTensor), --passes times.
With --threads 1 the work runs in this process (torch.set_num_threads(1)); with N > 1
a DataLoader with N worker processes shares it, batch 32. Prints one JSON object:
{"images_per_sec": …, "images_per_cpu_sec": …, "threads": N, "images": n, "torchvision": version}."""
import argparse, json, os, resource, time
import torch, torchvision
from torchvision import datasets, transforms

def cpu_seconds():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir"); ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--size", type=int, default=224); ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--passes", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.Resize(a.resize), transforms.RandomCrop(a.size),
                             transforms.RandomHorizontalFlip(), transforms.ToTensor()])
    ds = datasets.ImageFolder(os.path.join(a.dir, "train"), transform=tf)
    torch.manual_seed(1)
    n, t0, c0 = 0, time.perf_counter(), cpu_seconds()
    for _ in range(a.passes):
        if a.threads <= 1:
            for i in range(len(ds)):
                x, _ = ds[i]; n += 1
        else:
            dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=a.threads)
            for x, _ in dl:
                n += x.shape[0]
    dt, dc = time.perf_counter() - t0, cpu_seconds() - c0
    print(json.dumps({"images_per_sec": n / dt, "images_per_cpu_sec": n / max(dc, 1e-9), "threads": a.threads,
                      "images": n, "torchvision": torchvision.__version__}))

if __name__ == "__main__":
    main()
