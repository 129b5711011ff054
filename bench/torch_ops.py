#!/usr/bin/env python3
"""Times PyTorch on the ops ember benchmarks, for the side-by-side with `bench_ops`.

Needs only torch (and a CUDA GPU). Run it on the GPU machine:

    python3 bench/torch_ops.py                       # the table
    python3 bench/torch_ops.py --json torch_ops.json # and a JSON list of rows
    python3 bench/torch_ops.py --only softmax        # ops whose name matches a regex
    python3 bench/torch_ops.py --case 'f32$'         # cases whose name matches a regex

Method: every case is warmed up, then timed with CUDA events around the op alone, each run after
an L2 flush (a write of a buffer several times the L2 size, outside the timed interval); the median
is reported. fp32 matmuls and convolutions run without TF32 (torch.backends.cuda.matmul.allow_tf32
and torch.backends.cudnn.allow_tf32 are False), cudnn.benchmark is on. The same run measures the
two rooflines: the device-to-device copy bandwidth (bytes read + written per second, by
Tensor.copy_ of 1 GiB) and the bf16 matmul peak (the best of square bf16 GEMMs).

Columns: op, case, dtype, time_us, GB/s (the fewest bytes the op must move / time, the same
convention as ember's cost()), TFLOP/s (for GEMM and convolution).

Joining with ember's bench_ops: the key is (op, case). `op` is ember's op name (kernels/ops.def)
and `case` is the name of the matching entry of that op's `benches()`:
  softmax, log_softmax, softmax_backward, log_softmax_backward,
  cross_entropy, cross_entropy_backward   "[8192, 32768] f32", "[8192, 32768] bf16",
                                          "[64, 10] f32", "[512, 10] f32"   (kernels/ops/softmax.cpp,
                                          kernels/ops/loss.cpp; the backward rows time the gradient
                                          kernels alone, PyTorch's _softmax_backward_data etc.)
  nll_loss                                "[512, 10] f32"
  dropout                                 "2^26 f32", "2^26 bf16"            (kernels/ops/dropout.cpp)
  add, mul                                "2^26 f32", "2^26 bf16"            (kernels/ops/binary.cpp)
  relu                                    "2^26 f32", "2^26 bf16"            (kernels/ops/unary.cpp)
  sum                                     "[2^26] all f32"                   (kernels/ops/reduce.cpp)
  linear_backward_input, linear_backward_weight
                                          "[64,128] -> 64 relu f32", "[512,64] -> 10 bf16", ...
                                          (bench/op_shapes/linear_shapes.cpp; what PyTorch's
                                          autograd runs for a linear layer after a relu:
                                          threshold_backward, then mm, and sum for the bias)
Ops whose benches() were not in the repository when this script was written (matmul, linear,
conv2d and its two gradients, conv2d_max_pool2d, max_pool2d, avg_pool2d and their gradients,
batch_norm and its gradient) use descriptive shape names in the same style, defined in one place below
(gemm_cases, conv_cases, ...); rename them there if the ops' benches() choose other names.
Rows that have no ember counterpart (the rooflines, "cross_entropy fwd+bwd") are informative.
"""

import argparse
import json
import math
import re
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the script's one requirement
    sys.exit("torch_ops.py needs PyTorch (pip install torch)")


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8}
# The numels of mnist_train's CNN parameters (apps/mnist_train/models.cpp): conv1, conv2, fc1, fc2
# weights and biases (bench/op_shapes/fill_shapes.cpp has the same list).
MNIST_CNN_GRADS = (288, 32, 18432, 64, 401408, 128, 1280, 10)


class Timer:
    """CUDA-event timing with an L2 flush before every timed run."""

    def __init__(self, warmup, iters, flush):
        self.warmup = warmup
        self.iters = iters
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * 2**20
        self.flush_buf = torch.empty(max(4 * l2, 256 * 2**20) // 4, dtype=torch.float32, device="cuda") if flush else None

    def __call__(self, fn):
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.iters):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)  # ms -> us
        return statistics.median(times)


def cudnn_version():
    try:
        return torch.backends.cudnn.version()
    except Exception:  # informative only
        return None


def rand(shape, dt, lo=-1.0, hi=1.0):
    return torch.empty(shape, dtype=DTYPES[dt], device="cuda").uniform_(lo, hi)


def nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


# ---- the cases: each yields (op, case, dtype, fn, bytes, flops) ----


def rooflines():
    n = 2**28  # 1 GiB of f32
    src, dst = rand([n], "f32"), torch.empty(n, device="cuda")
    yield "roofline", "d2d copy 1 GiB", "f32", lambda: dst.copy_(src), 2 * nbytes(src), 0
    for m in (8192, 16384):
        a, b = rand([m, m], "bf16"), rand([m, m], "bf16")
        yield "roofline", f"bf16 matmul peak [{m}, {m}] x [{m}, {m}]", "bf16", lambda a=a, b=b: a @ b, 3 * nbytes(a), 2.0 * m**3


def gemm_cases():
    for dt in ("f32", "f16", "bf16"):
        for m in (4096, 8192):
            a, b = rand([m, m], dt), rand([m, m], dt)
            yield "matmul", f"[{m}, {m}] x [{m}, {m}] {dt}", dt, lambda a=a, b=b: a @ b, 3 * nbytes(a), 2.0 * m**3
        # MNIST MLP layers: x [B, in] W^T [in, out] + b
        for batch in (64, 512):
            for fin, fout in ((784, 128), (128, 10)):
                x, w, bias = rand([batch, fin], dt), rand([fout, fin], dt), rand([fout], dt)
                flops = 2.0 * batch * fin * fout
                yield ("linear", f"[{batch}, {fin}] -> {fout} {dt}", dt,
                       lambda x=x, w=w, bias=bias: F.linear(x, w, bias),
                       nbytes(x, w, bias) + batch * fout * SIZE[dt], flops)


def linear_backward_cases():
    """A linear layer's backward at the MNIST models' layers, as PyTorch's autograd runs it: the
    relu's threshold_backward, then mm for dx, and mm and sum for dW and db."""
    layers = ((784, 128, True), (128, 64, True), (64, 10, False), (3136, 128, True), (128, 10, False))
    for dt in ("f32", "bf16"):
        for batch in (64, 128, 512):
            for fin, fout, relu in layers:
                name = f"[{batch},{fin}] -> {fout}{' relu' if relu else ''} {dt}"
                if not case_wanted(name):
                    continue
                g, y = rand([batch, fout], dt), rand([batch, fout], dt)
                w, x = rand([fout, fin], dt), rand([batch, fin], dt)

                def dz(g=g, y=y, relu=relu):
                    return torch.ops.aten.threshold_backward(g, y, 0) if relu else g

                flops = 2.0 * batch * fin * fout
                mask = nbytes(y) if relu else 0
                if fin != 784:  # the first layer's input is the data: no dx
                    yield ("linear_backward_input", name, dt, lambda w=w, dz=dz: dz() @ w,
                           nbytes(g, w) + mask + batch * fin * SIZE[dt], flops)

                def dw_db(x=x, dz=dz):
                    d = dz()
                    return d.t() @ x, d.sum(0)

                yield ("linear_backward_weight", name, dt, dw_db,
                       nbytes(g, x) + mask + (fout * fin + fout) * SIZE[dt], flops + batch * fout)


def conv_shapes():
    """(N, C, H, W, K, R, pad, dtypes, bias) of every convolution timed; bias: the layer has one, so
    its weight gradient comes with the bias gradient (as ember's bench_ops cases at these shapes)."""
    out = []
    for batch in (64, 128, 512):  # the MNIST CNN
        out.append((batch, 1, 28, 28, 32, 3, 1, ("f32",), True))
        out.append((batch, 32, 14, 14, 64, 3, 1, ("f32",), True))
    for c, hw, k in ((64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512)):  # ResNet-50 3x3
        out.append((32, c, hw, hw, k, 3, 1, ("f32", "bf16"), False))
    for c, hw, k in ((256, 56, 64), (64, 56, 256), (512, 28, 128), (1024, 14, 256), (2048, 7, 512)):  # ResNet-50 1x1
        out.append((32, c, hw, hw, k, 1, 0, ("f32", "bf16"), False))
    return out


# --case: the cases whose name matches (None: all); conv_cases asks before it sets a case up, the
# setup (a convolution that cudnn.benchmark tunes) being most of its cost
CASE_FILTER = None


def case_wanted(name):
    return CASE_FILTER is None or CASE_FILTER.search(name) is not None


def conv_cases():
    for n, c, h, w, k, r, pad, dts, bias in conv_shapes():
        for dt in dts:
            name = f"[{n}, {c}, {h}, {w}] * [{k}, {c}, {r}, {r}] pad {pad} {dt}"
            if not case_wanted(name):
                continue
            x, wt = rand([n, c, h, w], dt), rand([k, c, r, r], dt)
            y = F.conv2d(x, wt, padding=pad)
            gy = torch.randn_like(y)
            flops = 2.0 * n * k * c * r * r * y.shape[2] * y.shape[3]
            moved = nbytes(x, wt, y)
            yield "conv2d", name, dt, lambda x=x, wt=wt, pad=pad: F.conv2d(x, wt, padding=pad), moved, flops

            def bwd(mask, x=x, wt=wt, gy=gy, pad=pad, k=k):
                return torch.ops.aten.convolution_backward(
                    gy, x, wt, [k] if mask[2] else None, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, mask)

            yield "conv2d_backward_input", name, dt, lambda: bwd([True, False, False]), moved, flops
            yield ("conv2d_backward_weight", name + (" bias" if bias else ""), dt,
                   lambda bias=bias: bwd([False, True, bias]), moved, flops)


def conv_pool_cases():
    """The MNIST CNN's conv (bias), relu, 2x2 max pool layers as PyTorch runs them, beside ember's
    conv2d_max_pool2d: the forward, and the layer's whole backward (the pool's, the relu's folded
    into it by autograd, and the conv's: weight and bias, and the input where C > 1, as in training;
    ember's rows for it are conv2d_backward_weight and _input on the pooled gradient)."""
    for n in (64, 128, 512):
        for c, hw, k in ((1, 28, 32), (32, 14, 64)):
            for dt in ("f32", "bf16"):
                name = f"[{n}, {c}, {hw}, {hw}] * [{k}, {c}, 3, 3] pad 1 {dt} relu pool 2"
                if not case_wanted(name):
                    continue
                x = rand([n, c, hw, hw], dt).requires_grad_(c > 1)
                wt, b = rand([k, c, 3, 3], dt).requires_grad_(True), rand([k], dt).requires_grad_(True)

                def fwd(x=x, wt=wt, b=b):
                    return F.max_pool2d(F.relu(F.conv2d(x, wt, b, padding=1)), 2)

                y = fwd()
                gy = torch.randn_like(y)
                flops = 2.0 * n * k * c * 9 * hw * hw
                moved = nbytes(x, wt, b, y) + y.numel() * SIZE["i64"]
                yield ("conv2d_max_pool2d", name, dt, lambda x=x, wt=wt, b=b: fwd(x.detach(), wt.detach(), b.detach()),
                       moved, flops)
                wrt = [x, wt, b] if c > 1 else [wt, b]
                yield ("conv2d_max_pool2d backward", name, dt,
                       lambda y=y, gy=gy, wrt=wrt: torch.autograd.grad(y, wrt, gy, retain_graph=True),
                       moved + nbytes(gy), 2 * flops if c > 1 else flops)


def pool_cases():
    shapes = [(b, 32, 28, 28, 2, 2, 0) for b in (64, 128, 512)]
    shapes += [(b, 64, 14, 14, 2, 2, 0) for b in (64, 128, 512)]
    shapes += [(32, 64, 112, 112, 3, 2, 1)]  # ResNet-50 stem max pool
    for n, c, h, w, k, s, p in shapes:
        x = rand([n, c, h, w], "f32").requires_grad_(True)
        name = f"[{n}, {c}, {h}, {w}] k{k} s{s} p{p} f32"
        for op, fn in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
            if op == "avg_pool2d" and p:
                continue
            y = fn(x, k, s, p)
            gy = torch.randn_like(y)
            moved = nbytes(x, y)
            yield op, name, "f32", lambda fn=fn, x=x, k=k, s=s, p=p: fn(x.detach(), k, s, p), moved, 0
            yield (op + "_backward", name, "f32",
                   lambda y=y, x=x, gy=gy: torch.autograd.grad(y, x, gy, retain_graph=True), moved + nbytes(gy), 0)


def batch_norm_cases():
    for n, c, h, w in ((64, 32, 28, 28), (512, 32, 28, 28), (512, 64, 14, 14), (32, 256, 56, 56)):
        x = rand([n, c, h, w], "f32").requires_grad_(True)
        gamma = torch.ones(c, device="cuda", requires_grad=True)
        beta = torch.zeros(c, device="cuda", requires_grad=True)
        rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
        name = f"[{n}, {c}, {h}, {w}] train f32"
        y = F.batch_norm(x, rm, rv, gamma, beta, training=True)
        gy = torch.randn_like(y)
        yield ("batch_norm", name, "f32",
               lambda x=x, rm=rm, rv=rv, g=gamma, b=beta: F.batch_norm(x.detach(), rm, rv, g.detach(), b.detach(), training=True),
               2 * nbytes(x), 0)
        yield ("batch_norm_backward", name, "f32",
               lambda y=y, x=x, g=gamma, b=beta, gy=gy: torch.autograd.grad(y, (x, g, b), gy, retain_graph=True),
               3 * nbytes(x), 0)


def softmax_cases():
    shapes = (("[8192, 32768] f32", 8192, 32768, "f32"), ("[8192, 32768] bf16", 8192, 32768, "bf16"),
              ("[64, 10] f32", 64, 10, "f32"), ("[512, 10] f32", 512, 10, "f32"))
    for name, n, c, dt in shapes:
        x = rand([n, c], dt)
        g = rand([n, c], dt)
        y = torch.softmax(x, 1)
        ly = torch.log_softmax(x, 1)
        t = torch.randint(0, c, (n,), device="cuda")
        io = nbytes(x, y)
        yield "softmax", name, dt, lambda x=x: torch.softmax(x, 1), io, 0
        yield "log_softmax", name, dt, lambda x=x: torch.log_softmax(x, 1), io, 0
        yield ("softmax_backward", name, dt,
               lambda g=g, y=y, dt=dt: torch._softmax_backward_data(g, y, 1, DTYPES[dt]), 3 * nbytes(x), 0)
        yield ("log_softmax_backward", name, dt,
               lambda g=g, ly=ly, dt=dt: torch._log_softmax_backward_data(g, ly, 1, DTYPES[dt]), 3 * nbytes(x), 0)
        ce_io = nbytes(x, t) + x.element_size()
        yield "cross_entropy", name, dt, lambda x=x, t=t: F.cross_entropy(x, t), ce_io, 0
        xl = x.detach().clone().requires_grad_(True)
        loss = F.cross_entropy(xl, t)
        yield ("cross_entropy_backward", name, dt,
               lambda loss=loss, xl=xl: torch.autograd.grad(loss, xl, retain_graph=True), 2 * nbytes(x) + nbytes(t), 0)

        def fwd_bwd(xl=xl, t=t):
            return torch.autograd.grad(F.cross_entropy(xl, t), xl)

        yield "cross_entropy fwd+bwd", name, dt, fwd_bwd, 3 * nbytes(x) + 2 * nbytes(t), 0
    lp = torch.log_softmax(rand([512, 10], "f32"), 1)
    t = torch.randint(0, 10, (512,), device="cuda")
    yield "nll_loss", "[512, 10] f32", "f32", lambda: F.nll_loss(lp, t), 512 * 4 + nbytes(t) + 4, 0


def elementwise_cases():
    n = 2**26
    for dt in ("f32", "bf16"):
        a, b = rand([n], dt), rand([n], dt)
        yield "add", f"2^26 {dt}", dt, lambda a=a, b=b: torch.add(a, b), 3 * nbytes(a), 0
        yield "mul", f"2^26 {dt}", dt, lambda a=a, b=b: torch.mul(a, b), 3 * nbytes(a), 0
        yield "relu", f"2^26 {dt}", dt, lambda a=a: torch.relu(a), 2 * nbytes(a), 0
        yield ("dropout", f"2^26 {dt}", dt, lambda a=a: F.dropout(a, 0.5, training=True), 2 * nbytes(a), 0)
    a = rand([n], "f32")
    yield "sum", "[2^26] all f32", "f32", lambda: a.sum(), nbytes(a) + 4, 0


def zero_grad_cases():
    # zero_many: Optimizer.zero_grad(set_to_none=False) of the MNIST CNN's gradients, PyTorch's
    # foreach zero_ (bench/op_shapes/fill_shapes.cpp)
    grads = [rand([n], "f32") for n in MNIST_CNN_GRADS]
    yield ("zero_many", "the MNIST CNN's 8 gradients f32", "f32", lambda: torch._foreach_zero_(grads),
           nbytes(*grads), 0)


GROUPS = (rooflines, gemm_cases, linear_backward_cases, conv_cases, conv_pool_cases, pool_cases, batch_norm_cases, softmax_cases, elementwise_cases, zero_grad_cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--only", help="regex: run the ops whose name matches (the rooflines always run)")
    ap.add_argument("--case", help="regex: run the cases whose name matches (the rooflines always run)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--no-flush", action="store_true", help="do not flush L2 between runs")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        sys.exit("torch_ops.py: no CUDA device (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    timer = Timer(args.warmup, args.iters, not args.no_flush)
    only = re.compile(args.only) if args.only else None
    global CASE_FILTER
    CASE_FILTER = re.compile(args.case) if args.case else None

    props = torch.cuda.get_device_properties(0)
    print(f"# {props.name}, torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {cudnn_version()}")
    print(f"# median of {args.iters} runs after {args.warmup} warm-up runs, "
          f"{'no L2 flush' if args.no_flush else 'L2 flushed before each run'}, TF32 off, cudnn.benchmark on")
    header = f"{'op':<24} {'case':<52} {'dtype':<5} {'time_us':>11} {'GB/s':>9} {'TFLOP/s':>9}"
    print(header)
    print("-" * len(header))
    rows = []
    for group in GROUPS:
        try:
            cases = list(group())
        except Exception as e:  # a whole group failing to set up (e.g. out of memory) is reported, not fatal
            print(f"{group.__name__:<24} setup failed: {type(e).__name__}: {e}")
            continue
        for op, case, dt, fn, moved, flops in cases:
            if op != "roofline" and ((only is not None and not only.search(op)) or not case_wanted(case)):
                continue
            try:
                us = timer(fn)
            except Exception as e:
                print(f"{op:<24} {case:<52} {dt:<5} failed: {type(e).__name__}: {e}")
                continue
            gbs = moved / (us * 1e-6) / 1e9 if moved else 0.0
            tfs = flops / (us * 1e-6) / 1e12 if flops else 0.0
            rows.append({"op": op, "case": case, "dtype": dt, "time_us": us, "GB/s": gbs, "TFLOP/s": tfs,
                         "bytes": moved, "flops": flops})
            print(f"{op:<24} {case:<52} {dt:<5} {us:>11.2f} {gbs:>9.1f} {tfs:>9.2f}" if flops else
                  f"{op:<24} {case:<52} {dt:<5} {us:>11.2f} {gbs:>9.1f} {'':>9}")
        del cases
        torch.cuda.empty_cache()

    copy = [r for r in rows if r["op"] == "roofline" and "copy" in r["case"]]
    peak = [r for r in rows if r["op"] == "roofline" and "matmul" in r["case"]]
    if copy:
        print(f"# roofline: d2d copy {copy[0]['GB/s']:.1f} GB/s")
    if peak:
        print(f"# roofline: bf16 matmul peak {max(r['TFLOP/s'] for r in peak):.1f} TFLOP/s")
    if args.json:
        meta = {"device": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
                "cudnn": cudnn_version(), "iters": args.iters, "warmup": args.warmup,
                "l2_flush": not args.no_flush,
                "copy_GBps": copy[0]["GB/s"] if copy else math.nan,
                "bf16_peak_TFLOPs": max((r["TFLOP/s"] for r in peak), default=math.nan)}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"# wrote {len(rows)} rows to {args.json}")


if __name__ == "__main__":
    main()
