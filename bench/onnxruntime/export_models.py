"""Writes the mobile CNNs the executor is compared on (torchvision's MobileNetV2 and V3,
inference, opset 17, batch 1 × 3 × 224 × 224; V3-small once more with its BatchNormalizations
written out) and one input for them, into OUT_DIR."""

import os
import struct
import sys

import torch
import torchvision


def tensor_proto(t, name):
    """A float32 TensorProto (dims 1, data_type 2, name 8, raw_data 9), written by hand."""

    def varint(v):
        out = b""
        while True:
            byte = v & 0x7F
            v >>= 7
            out += bytes([byte | (0x80 if v else 0)])
            if not v:
                return out

    def field(number, kind):
        return varint(number << 3 | kind)

    body = b"".join(field(1, 0) + varint(d) for d in t.shape)
    body += field(2, 0) + varint(1)
    body += field(8, 2) + varint(len(name)) + name.encode()
    raw = t.contiguous().numpy().astype("<f4").tobytes()
    body += field(9, 2) + varint(len(raw)) + raw
    return body


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "inputs"), exist_ok=True)
    torch.manual_seed(0)
    x = torch.rand(1, 3, 224, 224)
    for name in ["mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large"]:
        model = getattr(torchvision.models, name)().eval()
        torch.onnx.export(model, (x,), os.path.join(out, name + ".onnx"), input_names=["x"],
                          output_names=["y"], opset_version=17)
    # The same network with its 34 BatchNormalizations written out (no constant folding):
    # both runtimes fold them into the convolutions when they load it.
    model = torchvision.models.mobilenet_v3_small().eval()
    torch.onnx.export(model, (x,), os.path.join(out, "mobilenet_v3_small_bn.onnx"),
                      input_names=["x"], output_names=["y"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.PRESERVE)
    with open(os.path.join(out, "inputs", "input_0.pb"), "wb") as f:
        f.write(tensor_proto(x, "x"))
    with open(os.path.join(out, "input.f32"), "wb") as f:
        f.write(x.numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
