#!/usr/bin/env python3
"""Models built in PyTorch with seeded random weights, exported to ONNX, with PyTorch's own
outputs on a seeded input: the oracle autopar's torch tests check against.

  torch_models.py MODEL OPSET OUT_DIR [--mode eval|train]

writes OUT_DIR/model.onnx, OUT_DIR/inputs/input_<i>.pb and OUT_DIR/expected/output_<i>.pb
(ONNX TensorProtos, written here without the onnx package). The batch dim is symbolic. `--mode train` exports with
TrainingMode.PRESERVE (BatchNorm kept as an op with its statistics, not folded into the
convolutions)."""
import argparse
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

ONNX_TYPES = {torch.float32: 1, torch.int64: 7, torch.float64: 11}


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tensor_proto(t, name):
    t = t.detach().contiguous().cpu()
    body = bytearray()
    for d in t.shape:
        body += varint(1 << 3 | 0) + varint(d)
    body += varint(2 << 3 | 0) + varint(ONNX_TYPES[t.dtype])
    encoded = name.encode()
    body += varint(8 << 3 | 2) + varint(len(encoded)) + encoded
    raw = t.numpy().tobytes()
    body += varint(9 << 3 | 2) + varint(len(raw)) + raw
    return bytes(body)


class Attention(nn.Module):
    def __init__(self, hidden, heads, causal, seq=16):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        # As GPT-2's implementations keep it: a buffer, exported as a constant.
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(h // self.heads)
        if self.causal:
            scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    def __init__(self, hidden, heads, causal):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = Attention(hidden, heads, causal)
        self.fc, self.out = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    """GPT-2 style: token and position embeddings, pre-norm causal blocks, a head tied to the
    token embedding."""

    def __init__(self, vocab=96, seq=16, hidden=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class Bert(nn.Module):
    """BERT style: embeddings with a norm, bidirectional blocks, a classifier on the first
    token."""

    def __init__(self, vocab=96, seq=16, hidden=32, heads=4, layers=2, classes=5):
        super().__init__()
        self.word, self.position = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.blocks = nn.ModuleList([Block(hidden, heads, False) for _ in range(layers)])
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.norm(self.word(ids) + self.position(pos))
        for block in self.blocks:
            x = block(x)
        return self.classifier(x[:, 0])


class Vit(nn.Module):
    """ViT: patches by a strided convolution, a class token, position embeddings, blocks and a
    head on the class token."""

    def __init__(self, image=16, patch=4, hidden=32, heads=4, layers=2, classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, hidden, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, hidden) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, hidden) * 0.02)
        self.blocks = nn.ModuleList([Block(hidden, heads, False) for _ in range(layers)])
        self.norm, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


def build(name):
    g = torch.Generator().manual_seed(1)
    if name == "mlp":
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), [torch.randn(4, 32, generator=g)]
    if name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
        return model, [torch.randn(4, 3, 16, 16, generator=g)]
    if name == "gpt":
        return Gpt(), [torch.randint(0, 96, (2, 16), generator=g)]
    if name == "bert":
        return Bert(), [torch.randint(0, 96, (2, 16), generator=g)]
    if name == "vit":
        return Vit(), [torch.randn(2, 3, 16, 16, generator=g)]
    import torchvision
    if name == "resnet18":
        return torchvision.models.resnet18(num_classes=10), [torch.randn(2, 3, 32, 32, generator=g)]
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(num_classes=10), [torch.randn(2, 3, 32, 32, generator=g)]
    raise SystemExit(f"torch_models.py: unknown model '{name}'")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("opset", type=int)
    parser.add_argument("out")
    parser.add_argument("--mode", choices=["eval", "train"], default="eval")
    args = parser.parse_args()
    torch.manual_seed(0)
    model, inputs = build(args.model)
    model.eval()
    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "expected"), exist_ok=True)
    with torch.no_grad():
        outputs = model(*inputs)
    if not isinstance(outputs, (tuple, list)):
        outputs = [outputs]
    names = [f"input_{i}" for i in range(len(inputs))]
    mode = torch.onnx.TrainingMode.PRESERVE if args.mode == "train" else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, tuple(inputs), os.path.join(args.out, "model.onnx"),
                      opset_version=args.opset, input_names=names,
                      output_names=[f"output_{i}" for i in range(len(outputs))],
                      dynamic_axes={n: {0: "batch"} for n in names + [f"output_{i}" for i in range(len(outputs))]},
                      training=mode, do_constant_folding=args.mode == "eval")
    for i, t in enumerate(inputs):
        with open(os.path.join(args.out, "inputs", f"input_{i}.pb"), "wb") as f:
            f.write(tensor_proto(t, names[i]))
    for i, t in enumerate(outputs):
        with open(os.path.join(args.out, "expected", f"output_{i}.pb"), "wb") as f:
            f.write(tensor_proto(t, f"output_{i}"))


if __name__ == "__main__":
    sys.exit(main())
