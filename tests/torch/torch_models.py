#!/usr/bin/env python3
"""Models built in PyTorch with seeded random weights, exported to ONNX, with PyTorch's own
outputs on a seeded input: the oracle autopar's torch tests check against.

  torch_models.py MODEL OPSET OUT_DIR [--mode eval|train]
  torch_models.py MODEL OPSET OUT_DIR --step

writes OUT_DIR/model.onnx, OUT_DIR/inputs/input_<i>.pb and OUT_DIR/expected/output_<i>.pb
(ONNX TensorProtos, written here without the onnx package). The batch dim is symbolic. `--mode train` exports with
TrainingMode.PRESERVE (BatchNorm kept as an op with its statistics, not folded into the
convolutions).

`--step` is the training oracle, in float64: the model (BatchNorm kept, names kept) is
exported before one training step; inputs/ holds the inputs and then the labels (class ids
under cross-entropy for class scores, else targets under the mean squared error);
expected_sgd/ and expected_adam/ hold the loss (loss.pb) and every parameter and BatchNorm
running statistic after one step of torch.optim.SGD (lr 0.1, momentum 0.9) and
torch.optim.Adam (lr 1e-3), each from the same weights, named as the model names them. The
running statistics average the batch's in with the momentum the ONNX file holds, and the
norms use its epsilons (float32 attributes: 0.9 is 0.89999998); a running variance also has
<name>.biased.pb, the update as ONNX defines it (the population variance of the batch,
where PyTorch averages the sample variance). vanishing_<optimizer>.txt names the parameters
whose gradient is zero in exact arithmetic (rounding only)."""
import argparse
import copy
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


class Conv1D(nn.Module):
    """Hugging Face GPT-2's projection: addmm over the flattened tokens, weight [in, out]."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Gpt2Block(nn.Module):
    """Hugging Face GPT-2's block: c_attn, c_proj, c_fc and mlp.c_proj as Conv1D, the tanh
    GELU written out (NewGELUActivation), LayerNorms with distinct weights."""

    def __init__(self, hidden, heads, seq=16):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        for ln in (self.ln_1, self.ln_2):
            nn.init.normal_(ln.weight, 1.0, 0.1)
            nn.init.normal_(ln.bias, 0.0, 0.1)
        self.c_attn, self.c_proj = Conv1D(hidden, 3 * hidden), Conv1D(hidden, hidden)
        self.c_fc, self.mlp_proj = Conv1D(hidden, 4 * hidden), Conv1D(4 * hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        q, k, v = split(q), split(k), split(v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        scores = torch.where(self.bias[:s, :s], scores, torch.tensor(-1e4))
        y = F.softmax(scores, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, s, h))
        f = self.c_fc(self.ln_2(x))
        f = 0.5 * f * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * torch.pow(f, 3.0))))
        return x + self.mlp_proj(f)


class Gpt2(nn.Module):
    """Hugging Face GPT-2's structure (transformer.h.N), at test size."""

    def __init__(self, vocab=96, seq=16, hidden=32, heads=4, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.h = nn.ModuleList([Gpt2Block(hidden, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
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
    if name == "gpt2":
        return Gpt2(), [torch.randint(0, 96, (2, 16), generator=g)]
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


def write(path, t, name):
    with open(path, "wb") as f:
        f.write(tensor_proto(t, name))


def training_step(args):
    torch.manual_seed(0)
    model, inputs = build(args.model)
    model = model.double()
    inputs = [t.double() if t.is_floating_point() else t for t in inputs]
    names = [f"input_{i}" for i in range(len(inputs))]
    exported = copy.deepcopy(model).eval()  # BatchNorm kept as an op, its statistics unchanged
    torch.onnx.export(exported, tuple(inputs), os.path.join(args.out, "model.onnx"),
                      opset_version=args.opset, input_names=names, output_names=["output_0"],
                      dynamic_axes={n: {0: "batch"} for n in names + ["output_0"]},
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    for i, t in enumerate(inputs):
        write(os.path.join(args.out, "inputs", f"input_{i}.pb"), t, names[i])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        out = copy.deepcopy(model).train()(*inputs)
    classes = out.shape[-1] if out.dim() >= 2 else 1
    if classes >= 2:
        labels = torch.randint(0, classes, out.shape[:-1], generator=g)
    else:
        labels = torch.randn(out.shape, generator=g, dtype=torch.float64)
    write(os.path.join(args.out, "inputs", f"input_{len(inputs)}.pb"), labels, "labels")
    # The file holds the norms' epsilons as float32 attributes (1e-5 is 9.99999975e-06): the
    # reference computes with those, as it does with the momentum below.
    for module in model.modules():
        if hasattr(module, "eps") and isinstance(module.eps, float):
            module.eps = float(struct.unpack("f", struct.pack("f", module.eps))[0])
    # The export (eval) has no Dropout (MobileNetV2's classifier has one): the reference
    # step runs without it.
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    for name, make in (("sgd", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
                       ("adam", lambda p: torch.optim.Adam(p, lr=1e-3))):
        m = copy.deepcopy(model).train()
        per_channel = {}  # BatchNorm module name -> values per channel in the batch
        for module_name, module in m.named_modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.register_forward_hook(
                    lambda mod, x, y, key=module_name: per_channel.__setitem__(
                        key, x[0].numel() // x[0].shape[1]))
        before = {k: v.clone() for k, v in m.state_dict().items()}
        optimizer = make(m.parameters())
        out = m(*inputs)
        if classes >= 2:
            loss = F.cross_entropy(out.reshape(-1, classes), labels.reshape(-1))
        else:
            loss = F.mse_loss(out, labels)
        optimizer.zero_grad()
        loss.backward()
        # Gradients that vanish in exact arithmetic (a BatchNorm bias whose output the next
        # BatchNorm re-centres) hold only rounding; Adam's first step, lr·g/(|g| + ε), turns
        # that into steps of up to lr that no other implementation reproduces.
        vanishing = [k for k, p in m.named_parameters()
                     if p.grad is not None and p.grad.abs().max().item() < 1e-10]
        optimizer.step()
        folder = os.path.join(args.out, "expected_" + name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(args.out, f"vanishing_{name}.txt"), "w") as f:
            f.write("".join(k + "\n" for k in vanishing))
        write(os.path.join(folder, "loss.pb"), loss.detach(), "loss")
        state = dict(m.named_parameters())
        for key, value in m.named_buffers():
            if key.endswith("running_mean") or key.endswith("running_var"):
                state[key] = value
        for key, value in state.items():
            if key.endswith("running_mean") or key.endswith("running_var"):
                # The ONNX file holds the momentum as a float32 attribute: the statistic the
                # batch contributed, averaged in as that momentum defines.
                module = key[: key.rindex(".")]
                keep = 1 - m.get_submodule(module).momentum
                keep32 = float(struct.unpack("f", struct.pack("f", keep))[0])
                old = before[key]
                batch_stat = (value - keep * old) / (1 - keep)
                value = keep32 * old + (1 - keep32) * batch_stat
                if key.endswith("running_var"):
                    n = per_channel[module]
                    write(os.path.join(folder, key + ".biased.pb"),
                          keep32 * old + (1 - keep32) * batch_stat * (n - 1) / n, key)
            write(os.path.join(folder, key + ".pb"), value.detach(), key)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("opset", type=int)
    parser.add_argument("out")
    parser.add_argument("--mode", choices=["eval", "train"], default="eval")
    parser.add_argument("--step", action="store_true")
    args = parser.parse_args()
    if args.step:
        return training_step(args)
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
