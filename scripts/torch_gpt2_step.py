#!/usr/bin/env python3
"""One training step of autopar's gpt2-small in PyTorch eager, timed on one GPU.

The reference for "autopar's gpt2-small step is no slower than 1.5x PyTorch eager's":
the model, loss and optimizer are the ones `autopar run gpt2-small --train` trains
(src/zoo/gpt.cc, src/zoo/layers.cc, src/zoo/zoo.cc, src/autodiff/training_graph.cc), so
the two step times measure the same computation.

    python3 scripts/torch_gpt2_step.py --json
    python3 scripts/torch_gpt2_step.py --dtype bf16 --json
    python3 scripts/torch_gpt2_step.py --device cpu --batch 1 --seq 16 --steps 2 --warmup 1

Exits 2 when the device asked for is CUDA and there is none.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# The gpt2-small preset, gpt(12, 768, 12, 1024, 50257) in src/zoo/zoo.cc.
LAYERS = 12
HIDDEN = 768
HEADS = 12
VOCAB = 50257
SEQ = 1024
# `autopar run --train` binds the batch to 4 (dims.add_to(*run, 4) in run_command.cc) and
# has no --seq: a zoo model trains at its preset's sequence length.
BATCH = 4
LN_EPSILON = 1e-5
# GPT-2's masked_bias: exp() of it underflows to zero without inf arithmetic.
MASK_VALUE = -1e4
INIT_STDDEV = 0.02
# OptimizerSpec's defaults (include/autopar/autodiff/autodiff.h, training_graph.cc):
# Adam, lr 0.001, betas (0.9, 0.999), eps 1e-8, no weight decay.
ADAM_LR = 1e-3
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
ADAM_WEIGHT_DECAY = 0.0
# run_command.cc cycles through 4 fixed synthetic batches by default.
FIXED_BATCHES = 4


def zoo_parameter_count(layers, hidden, vocab, seq):
    """gpt_parameter_count in src/zoo/gpt.cc, to check the module against."""
    h = hidden
    return layers * (12 * h * h + 13 * h) + (vocab + seq) * h + 2 * h


def normal_parameter(shape, dtype, device, generator):
    # Drawn in fp32 so that the bf16 model starts from the rounded fp32 weights.
    w = torch.empty(shape, dtype=torch.float32, device=device)
    w.normal_(0.0, INIT_STDDEV, generator=generator)
    return nn.Parameter(w.to(dtype))


class Linear(nn.Module):
    """The zoo's linear(): weight [in, out], y = x @ W + b (HF GPT-2's Conv1D layout)."""

    def __init__(self, n_in, n_out, dtype, device, generator):
        super().__init__()
        self.weight = normal_parameter((n_in, n_out), dtype, device, generator)
        self.bias = nn.Parameter(torch.zeros(n_out, dtype=dtype, device=device))

    def forward(self, x):
        # addmm folds the bias into the GEMM, as PyTorch's own GPT-2 (Conv1D, nn.Linear)
        # runs MatMul + Add; the arithmetic is the zoo's.
        y = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return y.view(*x.shape[:-1], y.shape[-1])


class Table(nn.Module):
    """An embedding table read by Gather, so that its parameter is named <module>.weight."""

    def __init__(self, rows, hidden, dtype, device, generator):
        super().__init__()
        self.weight = normal_parameter((rows, hidden), dtype, device, generator)


class LayerNorm(nn.Module):
    def __init__(self, hidden, dtype, device):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(hidden, dtype=dtype, device=device))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, LN_EPSILON)


class Attention(nn.Module):
    """attention_heads() in layers.cc, op for op: no fused or flash attention."""

    def __init__(self, hidden, heads, dtype, device, generator):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.root = math.sqrt(self.head_dim)
        self.c_attn = Linear(hidden, 3 * hidden, dtype, device, generator)
        self.c_proj = Linear(hidden, hidden, dtype, device, generator)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q = q.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k = k.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 3, 1)
        v = v.reshape(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k) / self.root
        scores = scores + mask
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, h)
        return self.c_proj(context)


class Mlp(nn.Module):
    def __init__(self, hidden, dtype, device, generator):
        super().__init__()
        self.c_fc = Linear(hidden, 4 * hidden, dtype, device, generator)
        self.c_proj = Linear(4 * hidden, hidden, dtype, device, generator)

    def forward(self, x):
        # The zoo's Div/Erf/Add/Mul/Mul is the exported form of this erf GELU.
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    """pre_ln_block() in layers.cc: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, hidden, heads, dtype, device, generator):
        super().__init__()
        self.ln_1 = LayerNorm(hidden, dtype, device)
        self.attn = Attention(hidden, heads, dtype, device, generator)
        self.ln_2 = LayerNorm(hidden, dtype, device)
        self.mlp = Mlp(hidden, dtype, device, generator)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """build_gpt() in gpt.cc; parameter names are the zoo's. No dropout: the zoo has none."""

    def __init__(self, layers, hidden, heads, seq, vocab, dtype, device, generator):
        super().__init__()
        self.wte = Table(vocab, hidden, dtype, device, generator)
        # The position table has exactly seq rows: the zoo sizes it by --seq.
        self.wpe = Table(seq, hidden, dtype, device, generator)
        self.h = nn.ModuleList(
            Block(hidden, heads, dtype, device, generator) for _ in range(layers))
        self.ln_f = LayerNorm(hidden, dtype, device)
        self.register_buffer(
            "position_ids", torch.arange(seq, dtype=torch.int64, device=device))
        mask = torch.triu(torch.full((seq, seq), MASK_VALUE, dtype=torch.float32), diagonal=1)
        self.register_buffer("causal_mask", mask.to(device=device, dtype=dtype))

    def forward(self, ids):
        x = F.embedding(ids, self.wte.weight)
        x = x + F.embedding(self.position_ids, self.wpe.weight)
        for block in self.h:
            x = block(x, self.causal_mask)
        x = self.ln_f(x)
        # Tied LM head: Transpose(wte) then MatMul, as the zoo writes it.
        return torch.matmul(x, self.wte.weight.t())


def disable_tf32():
    matmul = torch.backends.cuda.matmul
    # PyTorch 2.9 replaced allow_tf32 by fp32_precision and warns on the old names.
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "ieee"
    else:
        matmul.allow_tf32 = False
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False


def make_optimizer(params, impl):
    kwargs = dict(lr=ADAM_LR, betas=ADAM_BETAS, eps=ADAM_EPS, weight_decay=ADAM_WEIGHT_DECAY)
    if impl == "foreach":
        kwargs["foreach"] = True
    elif impl == "loop":
        kwargs["foreach"] = False
    elif impl == "fused":
        kwargs["fused"] = True
    return torch.optim.Adam(params, **kwargs)


def percentile(values, q):
    """Linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Time one training step of autopar's gpt2-small in PyTorch eager.")
    p.add_argument("--batch", type=int, default=BATCH,
                   help=f"sequences per step (default {BATCH}, autopar run --train's)")
    p.add_argument("--seq", type=int, default=SEQ,
                   help=f"tokens per sequence, also the position table's rows (default {SEQ})")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32 (default) or bf16: parameters, activations and Adam state "
                        "all bf16, no autocast")
    p.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed steps first (default 10)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--adam-impl", choices=("default", "foreach", "fused", "loop"),
                   default="default",
                   help="torch.optim.Adam's implementation (default: the one torch picks)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the data")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    for name in ("batch", "seq", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.warmup < 0:
        p.error(f"--warmup {args.warmup}: must be 0 or more")
    return args


def main(argv):
    args = parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print(f"no CUDA device: torch {torch.__version__} sees none "
              "(pass --device cpu to run on the CPU)", file=sys.stderr)
        return 2
    if cuda:
        if device.index is not None:
            torch.cuda.set_device(device)
        disable_tf32()
    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16

    torch.manual_seed(args.seed)
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)
    model = Gpt(LAYERS, HIDDEN, HEADS, args.seq, VOCAB, dtype, device, generator)
    model.train()
    parameters = sum(p.numel() for p in model.parameters())
    expected = zoo_parameter_count(LAYERS, HIDDEN, VOCAB, args.seq)
    if parameters != expected:
        print(f"parameter count {parameters} differs from the zoo's {expected}", file=sys.stderr)
        return 1
    optimizer = make_optimizer(model.parameters(), args.adam_impl)

    batches = []
    for _ in range(FIXED_BATCHES):
        ids = torch.randint(0, VOCAB, (args.batch, args.seq), device=device,
                            generator=generator)
        labels = torch.randint(0, VOCAB, (args.batch, args.seq), device=device,
                               generator=generator)
        batches.append((ids, labels))

    def step(i):
        ids, labels = batches[i % len(batches)]
        logits = model(ids)
        # SoftmaxCrossEntropyLoss over [batch*seq, vocab], reduction mean, as add_loss builds.
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize(device)

    seconds = []
    loss = None
    for i in range(args.warmup, args.warmup + args.steps):
        # Every step starts on an idle device and is waited for, as autopar's Device::run()
        # is, so launch overhead counts rather than hiding behind the previous step.
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(i)
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            loss = step(i)
            seconds.append(time.perf_counter() - t0)

    median = statistics.median(seconds)
    p10 = percentile(seconds, 10)
    device_name = torch.cuda.get_device_name(device) if cuda else "cpu"
    if args.json:
        print(json.dumps({
            "median_step_s": median,
            "p10_step_s": p10,
            "parameters": parameters,
            "batch": args.batch,
            "seq": args.seq,
            "dtype": args.dtype,
            "device": device_name,
        }))
        return 0
    print(f"gpt2-small in PyTorch {torch.__version__} eager on {device_name}: "
          f"{parameters:,} parameters, batch {args.batch}, seq {args.seq}, {args.dtype}, "
          f"Adam ({args.adam_impl})")
    print(f"{args.steps} steps after {args.warmup} warmup: median {median * 1e3:.3f} ms, "
          f"p10 {p10 * 1e3:.3f} ms, last loss {loss.item():.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
