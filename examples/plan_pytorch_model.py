"""Plan a PyTorch model: export it to ONNX, search for its best parallel scheme on 8 DGX H100
nodes, and print the Megatron-LM command that runs it (the README's quickstart).

    PYTHONPATH=build/python python3 examples/plan_pytorch_model.py [OUT_DIR] [--layers N ...]
"""

import argparse
import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch import nn

import autopar


class Block(nn.Module):
    """A pre-norm GPT block: causal self-attention and a GELU MLP."""

    def __init__(self, hidden, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def attention(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(h // self.heads)
        scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        return self.proj((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, s, h))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, hidden, heads, layers):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]).unsqueeze(0))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", help="folder for gpt.onnx and the plan")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seq", type=int, default=1024)
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="autopar-quickstart-")
    model = Gpt(args.vocab, args.seq, args.hidden, args.heads, args.layers)
    path = os.path.join(out, "gpt.onnx")
    ids = torch.randint(0, args.vocab, (1, args.seq))
    torch.onnx.export(model, (ids,), path, input_names=["ids"], output_names=["logits"],
                      dynamic_axes={"ids": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17)

    plan = autopar.autotune(path, hw="dgx-h100", nodes=8, batch=512, export="megatron",
                            output=os.path.join(out, "plan"))
    best = plan["best"]
    print(f"best of {plan['candidates_evaluated']} candidates: {best['mesh']}, "
          f"micro {best['micro_batch']}, ZeRO {best['zero']}, recompute {best['recompute']}, "
          f"{best['precision']}: {best['step_time_s'] * 1e3:.1f} ms per step, "
          f"MFU {best['mfu'] * 100:.1f}%")
    for b in plan["baselines"]:
        if "speedup" in b:
            print(f"  {b['speedup']:.2f}x faster than {b['name']} ({b['note']})")
    print(plan["export"]["text"], end="")


if __name__ == "__main__":
    main()
