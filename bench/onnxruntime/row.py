"""One row of compare.sh: MODEL AUTOPAR_JSON ORT_JSON OUTPUT_PB. Prints both medians, the ratio
onnxruntime / autopar, and how far autopar's output is from onnxruntime's (the largest absolute
difference over the largest absolute value)."""

import json
import struct
import sys


def varint(data, at):
    value, shift = 0, 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def float_tensor(path):
    """The float32 values of a TensorProto holding raw_data (field 9)."""
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        kind = key & 7
        if kind == 0:
            _, at = varint(data, at)
        elif kind == 2:
            size, at = varint(data, at)
            if key >> 3 == 9:
                raw = data[at:at + size]
                return struct.unpack("<%df" % (len(raw) // 4), raw)
            at += size
        elif kind == 5:
            at += 4
        elif kind == 1:
            at += 8
    raise SystemExit(path + ": no raw_data")


def main():
    model, ours_path, theirs_path, output_path = sys.argv[1:5]
    ours = json.load(open(ours_path))["median_s"]
    theirs_json = json.load(open(theirs_path))
    theirs = theirs_json["median_s"]
    mine = float_tensor(output_path)
    reference = theirs_json["output"]
    scale = max(abs(v) for v in reference) or 1.0
    diff = max(abs(a - b) for a, b in zip(mine, reference)) / scale
    print(f"{model:<22} {ours * 1e3:14.2f} {theirs * 1e3:18.2f} {theirs / ours:8.2f} {diff:14.1e}")


if __name__ == "__main__":
    main()
