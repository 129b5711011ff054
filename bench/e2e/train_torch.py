#!/usr/bin/env python3
"""PyTorch side of the end-to-end benchmark: the models and training recipe of mnist_train.

Trains the same models on the same IDX files with the same hyperparameters as mnist_train's
defaults (apps/mnist_train/options.h, trainer.cpp):

  mlp  784-128-64-10 with ReLU
  cnn  conv 1->32 3x3 pad 1, ReLU, maxpool 2, conv 32->64 3x3 pad 1, ReLU, maxpool 2, flatten,
       linear 3136->128, ReLU, linear 128->10
  AdamW (lr 3e-3, betas (0.9, 0.999), weight decay 1e-4), OneCycleLR stepped per batch
  (max_lr = lr, pct_start 0.25, total_steps = steps per epoch * epochs, cycle_momentum on),
  batch 128, 8 epochs, 10% of the training set held out for validation (a seeded permutation),
  pixels normalised with the training split's mean and std, cross-entropy, evaluation in batches
  of 1000 on the validation and test sets after every epoch.

Four configurations:
  plain     DataLoader defaults (no workers, pageable memory), the loss read every step
  tuned     the tuned eager loop: the whole set uploaded once as uint8 and normalised on the GPU,
            batches gathered there (or, with --tuned-loader workers, DataLoader workers, pinned
            memory and non_blocking copies), zero_grad(set_to_none=True), cudnn.benchmark, fused
            AdamW, no host read inside the step
  compiled  tuned plus torch.compile(model, mode="reduce-overhead") (CUDA graphs)
  graphed   PyTorch's strongest loop without a compiler (CUDA only): tuned with the data on the
            GPU, and the whole step (forward, loss, backward, AdamW) captured in one CUDA graph
            (torch.cuda.graph) and replayed; AdamW capturable, its lr and beta1 device tensors that
            OneCycleLR's values are written into, so the schedule runs unchanged. The batch gather
            and normalisation run outside the graph, and an epoch's last, smaller batch is dropped,
            as in ember's --device-resident --graph.

Prints one JSON line per run: config, model, wall time of the whole run (loading, compilation and
evaluation included), training samples/s, test accuracy, and the timing rule's numbers (the same
rule as mnist_train's summary line "timed", bench/e2e/README.md): warmup_s, the first optimizer step
(torch.compile's compilation, graphed's warm-up and capture, cuDNN's benchmarking) plus, for the
tuned configurations, one evaluation forward at each evaluation batch shape; timed_s, training and
the per-epoch evaluations after it; timed_samples_per_s, the samples trained after it per timed
second; startup_s, process start to the first step. compiled reports compile_s (= its warm-up) and
graphed capture_s (inside its warm-up).

  python3 train_torch.py --data /usr/share/datasets/fashion-mnist --model mlp --batch-size 64 --epochs 5
  python3 train_torch.py --check   # reads the IDX files and prints their shapes (numpy only)
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np

IDX_NAMES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# the IDX element types: magic byte 3 -> numpy dtype (multi-byte types are big-endian)
IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    """Reads one IDX file (raw, or gzip'd when it starts with the gzip magic) into a numpy array."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (magic {data[:4].hex()})")
    kind, ndim = data[2], data[3]
    if kind not in IDX_TYPES or ndim == 0:
        raise ValueError(f"{path}: unsupported IDX magic {data[:4].hex()}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{path}: truncated IDX header")
    dims = [int.from_bytes(data[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim)]
    dtype = np.dtype(IDX_TYPES[kind])
    want = int(np.prod(dims)) * dtype.itemsize
    if len(data) - header != want:
        raise ValueError(f"{path}: the header declares dims {dims} ({want} bytes), the file holds "
                         f"{len(data) - header} bytes of data")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)


def find_idx(directory, name):
    """The file `name` in `directory` (or its raw/ subdirectories), raw or .gz, with '-' or '.' before idx."""
    candidates = []
    for sub in ("", "raw", os.path.join("FashionMNIST", "raw"), os.path.join("MNIST", "raw")):
        for stem in (name, name.replace("-idx", ".idx")):
            for ext in ("", ".gz"):
                candidates.append(os.path.join(directory, sub, stem + ext))
    for c in candidates:
        if os.path.isfile(c):
            return c
    raise FileNotFoundError(f"{name} not found in {directory} (raw or .gz)")


def load_split(directory, split):
    images_name, labels_name = IDX_NAMES[split]
    images = read_idx(find_idx(directory, images_name))
    labels = read_idx(find_idx(directory, labels_name))
    if images.ndim != 3 or labels.ndim != 1 or images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise ValueError(f"{directory}: expected u8 images [N, rows, cols] and u8 labels [N], got "
                         f"{images.dtype} {list(images.shape)} and {labels.dtype} {list(labels.shape)}")
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{directory}: {images.shape[0]} {split} images but {labels.shape[0]} labels")
    return images, labels.astype(np.int64)


def load_splits(directory, val_split, seed):
    """Train/validation/test as uint8 arrays, with the training split's pixel mean and std.

    The validation split is a seeded random subset, as in mnist_train (which uses its own RNG: the
    subsets differ, their sizes and statistics match)."""
    train_x, train_y = load_split(directory, "train")
    test_x, test_y = load_split(directory, "test")
    n = train_x.shape[0]
    nv = int(round(n * val_split))
    perm = np.random.default_rng(seed).permutation(n)
    val_idx, tr_idx = np.sort(perm[:nv]), np.sort(perm[nv:])
    tr_x = train_x[tr_idx]
    pixels = tr_x.astype(np.float64) / 255.0
    mean, std = float(pixels.mean()), float(pixels.std())
    return {
        "train": (tr_x, train_y[tr_idx]),
        "val": (train_x[val_idx], train_y[val_idx]) if nv > 0 else None,
        "test": (test_x, test_y),
        "mean": mean,
        "std": max(std, 1e-6),
    }


# ---- torch: imported only by the training paths ----

def make_model(nn, name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                             nn.Linear(64, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


def run(args, config, model_name):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    t_start = time.perf_counter()
    if args.threads > 0:  # intra-op threads (run.sh --device cpu sets the same number for ember)
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    cuda = device.type == "cuda"
    tuned = config in ("tuned", "compiled", "graphed")
    graphed = config == "graphed"
    if graphed and not cuda:
        raise ValueError("--config graphed needs a CUDA device (it captures the step with torch.cuda.graph)")
    if tuned and cuda:
        torch.backends.cudnn.benchmark = True
    # fp32 throughout, as mnist_train without --amp (no TF32: ember's fp32 path is exact fp32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    s = load_splits(args.data, args.val_split, args.seed)
    mean, std = s["mean"], s["std"]
    model = make_model(nn, model_name).to(device)
    step_model = model
    if config == "compiled":
        step_model = torch.compile(model, mode="reduce-overhead")
    opt_kwargs = {"lr": args.lr, "betas": (0.9, 0.999), "weight_decay": args.weight_decay}
    if graphed:
        # capturable: step counters on the device; lr and betas are tensors the graph reads, so the
        # schedule's new values reach every replay (the fused AdamW takes betas as numbers only)
        betas = (torch.tensor(0.9, device=device), torch.tensor(0.999, device=device))
        opt_kwargs.update(lr=torch.tensor(args.lr, device=device), betas=betas, capturable=True, foreach=True)
    elif tuned and cuda:
        opt_kwargs["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)

    train_x, train_y = s["train"]
    n_train = train_x.shape[0]
    # graphed replays one static batch shape, so like mnist_train --graph it drops an epoch's last,
    # smaller batch
    steps_per_epoch = n_train // args.batch_size if graphed else (n_train + args.batch_size - 1) // args.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps_per_epoch * args.epochs,
                                                pct_start=0.25)
    step = GraphedStep(torch, F, model, opt, betas) if graphed else None

    def to_input(x_u8):  # uint8 [B, 28, 28] on the device -> normalised f32 [B, 1, 28, 28]
        return ((x_u8.float() / 255.0 - mean) / std).unsqueeze(1)

    resident = tuned and (args.tuned_loader == "resident" or not cuda)
    if resident:  # the whole set on the device once, as uint8
        dev = {k: (torch.from_numpy(v[0]).to(device), torch.from_numpy(v[1]).to(device))
               for k, v in s.items() if k in ("train", "val", "test") and v is not None}

    def batches(split, batch, shuffle, epoch):
        if resident:
            x, y = dev[split]
            n = x.shape[0]
            if shuffle:
                g = torch.Generator(device=device)
                g.manual_seed(args.seed * 1000003 + epoch)
                order = torch.randperm(n, device=device, generator=g)
            for i in range(0, n, batch):
                idx = order[i:i + batch] if shuffle else slice(i, i + batch)
                yield to_input(x[idx]), y[idx]
            return
        x_np, y_np = s[split]
        ds = torch.utils.data.TensorDataset(torch.from_numpy(x_np), torch.from_numpy(y_np))
        if tuned:
            workers = args.workers
            loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=shuffle, num_workers=workers,
                                                 pin_memory=cuda, persistent_workers=workers > 0,
                                                 generator=torch.Generator().manual_seed(args.seed + epoch))
        else:
            loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=shuffle)
        for x, y in loader:
            yield to_input(x.to(device, non_blocking=tuned)), y.to(device, non_blocking=tuned)

    def warm_evaluation_shapes():
        # one forward at each evaluation batch shape, on zeros (as mnist_train --autotune does
        # before its clock starts): cuDNN's benchmark mode and torch.compile meet them here
        model.eval()
        sizes = set()
        for split in ("val", "test"):
            if s[split] is not None:
                n = s[split][0].shape[0]
                sizes.add(min(n, 1000))
                if n > 1000 and n % 1000:
                    sizes.add(n % 1000)
        with torch.no_grad():
            for b in sorted(sizes):
                if config == "compiled":
                    torch.compiler.cudagraph_mark_step_begin()
                step_model(torch.zeros((b, 1, 28, 28), device=device)).argmax(1)
        model.train()

    def evaluate(split):
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=device)
        n = 0
        with torch.no_grad():
            for x, y in batches(split, 1000, False, 0):
                if config == "compiled":
                    torch.compiler.cudagraph_mark_step_begin()
                correct += (step_model(x).argmax(1) == y).sum()
                n += y.shape[0]
        model.train()
        return 100.0 * correct.item() / max(n, 1)

    train_seconds = 0.0
    samples = 0
    test_acc = val_acc = 0.0
    t_first = t_timed = None  # the first step's start; the warm-up's end (the timing rule's clock)
    warmup_samples = 0
    for epoch in range(args.epochs):
        model.train()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        running = 0.0
        for x, y in batches("train", args.batch_size, True, epoch):
            if t_first is None:
                t_first = time.perf_counter()
            if config == "compiled":
                torch.compiler.cudagraph_mark_step_begin()
            if step is not None:
                if y.shape[0] < args.batch_size:
                    break
                loss = step(x, y)
            else:
                loss = F.cross_entropy(step_model(x), y)
                if tuned:
                    opt.zero_grad(set_to_none=True)
                else:
                    opt.zero_grad()
                loss.backward()
                opt.step()
            sched.step()
            if step is not None:
                step.follow_schedule()
            if tuned:
                loss_sum += loss.detach()  # no host read inside the step
            else:
                running += loss.item()  # the usual tutorial loop: a host read every step
            samples += y.shape[0]
            if t_timed is None:  # the end of the warm-up: the first step, then the evaluation shapes
                if tuned:
                    warm_evaluation_shapes()
                if cuda:
                    torch.cuda.synchronize()
                t_timed = time.perf_counter()
                warmup_samples = samples
        if cuda:
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - t0
        train_loss = (loss_sum.item() if tuned else running) / steps_per_epoch
        if s["val"] is not None:
            val_acc = evaluate("val")
        test_acc = evaluate("test")
        if args.verbose:
            print(f"# {config} {model_name} epoch {epoch + 1}/{args.epochs}: train loss {train_loss:.4f} "
                  f"val acc {val_acc:.2f}% test acc {test_acc:.2f}%", file=sys.stderr, flush=True)
    t_end = time.perf_counter()  # evaluate() read its result: the device is idle
    wall = t_end - t_start
    extra = {"capture_s": round(step.capture_s, 3)} if step is not None else {}
    if t_timed is not None:
        timed = t_end - t_timed
        extra.update(startup_s=round(t_first - t_start, 3), warmup_s=round(t_timed - t_first, 3),
                     timed_s=round(timed, 3), timed_samples_per_s=round((samples - warmup_samples) / timed, 1))
        if config == "compiled":
            extra["compile_s"] = extra["warmup_s"]
    return {
        "config": config,
        "model": model_name,
        "batch_size": args.batch_size,
        "epochs": args.epochs,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if cuda else ""),
        "wall_s": round(wall, 3),
        "train_s": round(train_seconds, 3),
        "samples_per_s": round(samples / max(train_seconds, 1e-9), 1),
        "test_accuracy": round(test_acc, 2),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        **extra,
    }


class GraphedStep:
    """One training step (forward, loss, backward, AdamW) captured in a CUDA graph and replayed.

    Captured at its first call, following PyTorch's whole-network capture recipe: a few warm-up
    steps on a side stream (cuDNN and the allocator settle), then the capture, with the gradients
    set to None so that backward allocates them from the graph's pool. The warm-up steps are undone
    in place (parameters and AdamW's state copied back into the very tensors the graph reads), so
    the run trains on exactly the steps the other configurations take.
    """

    def __init__(self, torch, F, model, opt, betas):
        self.torch, self.F, self.model, self.opt = torch, F, model, opt
        self.beta1, self.beta2 = betas  # the tensors AdamW was made with (OneCycleLR replaced beta1)
        self.graph = None
        self.capture_s = 0.0
        self.follow_schedule()

    def follow_schedule(self):
        # OneCycleLR writes lr into the lr tensor in place, but beta1 as a new number: copy it into
        # the tensor the graph reads (stream-ordered, no host sync)
        group = self.opt.param_groups[0]
        b1 = group["betas"][0]
        if not isinstance(b1, self.torch.Tensor):
            self.beta1.fill_(b1)
            group["betas"] = (self.beta1, self.beta2)

    def capture(self, x, y):
        torch, F = self.torch, self.F
        t0 = time.perf_counter()
        params = [p for p in self.model.parameters()]
        saved = [p.detach().clone() for p in params]
        self.x, self.y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                F.cross_entropy(self.model(self.x), self.y).backward()
                self.opt.step()
        torch.cuda.current_stream().wait_stream(side)
        with torch.no_grad():  # undo the warm-up: AdamW's state was fresh (zeros, step 0)
            for p, v in zip(params, saved):
                p.copy_(v)
            for state in self.opt.state.values():
                for k in ("exp_avg", "exp_avg_sq", "step"):
                    state[k].zero_()
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = F.cross_entropy(self.model(self.x), self.y)
            self.loss.backward()
            self.opt.step()
        torch.cuda.synchronize()
        self.capture_s = time.perf_counter() - t0

    def __call__(self, x, y):
        if self.graph is None:
            self.capture(x, y)
        self.x.copy_(x)
        self.y.copy_(y)
        self.graph.replay()
        return self.loss


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist", help="directory with the IDX files")
    p.add_argument("--model", choices=["mlp", "cnn", "all"], default="all")
    p.add_argument("--config", choices=["plain", "tuned", "compiled", "graphed", "all"], default="all",
                   help="all: plain, tuned and compiled, and graphed on a GPU")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3, help="AdamW lr (OneCycleLR's max_lr)")
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--val-split", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0: PyTorch's default, one per physical core)")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers for --tuned-loader workers")
    p.add_argument("--tuned-loader", choices=["resident", "workers"], default="resident",
                   help="tuned/compiled data path: the whole set on the GPU, or workers + pinned memory")
    p.add_argument("--verbose", action="store_true", help="per-epoch lines on stderr")
    p.add_argument("--check", action="store_true", help="only read the IDX files and print their shapes (no torch)")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.lr <= 0 or not 0 <= a.val_split <= 0.5 or a.workers < 0 or a.threads < 0:
        p.error("need --epochs >= 1, --batch-size >= 1, --lr > 0, 0 <= --val-split <= 0.5, --workers >= 0, "
                "--threads >= 0")
    return a


def uses_cuda(device):
    """Whether --device names a GPU (auto: when torch sees one)."""
    if device != "auto":
        return device.startswith("cuda")
    import torch
    return torch.cuda.is_available()


def main(argv=None):
    args = parse_args(argv)
    if args.check:
        s = load_splits(args.data, args.val_split, args.seed)
        summary = {k: list(s[k][0].shape) for k in ("train", "val", "test") if s[k] is not None}
        summary.update(mean=round(s["mean"], 4), std=round(s["std"], 4),
                       classes=sorted(set(s["train"][1].tolist())))
        print(json.dumps(summary))
        return 0
    models = ["mlp", "cnn"] if args.model == "all" else [args.model]
    configs = [args.config]
    if args.config == "all":
        configs = ["plain", "tuned", "compiled"] + (["graphed"] if uses_cuda(args.device) else [])
    for m in models:
        for c in configs:
            print(json.dumps(run(args, c, m)), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ValueError) as e:
        print(f"train_torch.py: error: {e}", file=sys.stderr)
        sys.exit(1)
