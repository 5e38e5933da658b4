"""autotune's report.html rendered in headless Chromium (label report): the page is
self-contained (inline SVG only: no script, nothing fetched), every picture is there, and the
screenshot shows them (not a blank page).

Run by ctest with AUTOPAR_BINARY and CHROMIUM set.
"""

import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest
import xml.etree.ElementTree as ElementTree
import zlib

BINARY = os.environ["AUTOPAR_BINARY"]
CHROMIUM = os.environ["CHROMIUM"]
WIDTH, HEIGHT = 1200, 2400


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG, without libraries."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


class ReportRenders(unittest.TestCase):
    def test_report_html_renders_every_picture(self):
        out = tempfile.mkdtemp(prefix="autopar-report-")
        self.addCleanup(shutil.rmtree, out, ignore_errors=True)
        plan = os.path.join(out, "plan")
        # Two pipeline stages, so the timeline has two ranks and the memory two bars.
        space = os.path.join(out, "space.yaml")
        with open(space, "w") as f:
            f.write("mesh: {tp: [1, 2], pp: [2], dp: auto}\nbatch: {micro: [1, 2]}\n"
                    "zero: [0, 1]\nrecompute: [none, full]\n")
        subprocess.run([BINARY, "autotune", "gpt-tiny", "--hw", "dgx-a100-80g", "--space", space,
                        "--batch", "16", "--simulate-top", "1", "-o", plan],
                       check=True, capture_output=True)
        with open(os.path.join(plan, "report.html")) as f:
            html = f.read()
        # Self-contained: nothing to run or fetch.
        self.assertNotIn("<script", html)
        self.assertEqual(re.findall(r'(?:src|href)="', html), [])
        svgs = re.findall(r"<svg.*?</svg>", html, re.S)
        self.assertEqual(len(svgs), 4)  # time breakdown, timeline, memory, candidates
        for svg in svgs:
            ElementTree.fromstring(svg)  # well-formed
        timeline, memory = ElementTree.fromstring(svgs[1]), ElementTree.fromstring(svgs[2])
        ns = "{http://www.w3.org/2000/svg}"
        labels = [t.text for t in timeline.iter(ns + "text")]
        self.assertIn("rank 0 compute", labels)
        self.assertIn("rank 1 compute", labels)
        self.assertEqual(sum(1 for t in memory.iter(ns + "text") if t.text.startswith("rank ")), 2)
        self.assertIn("Why this plan", html)

        shot = os.path.join(out, "report.png")
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                        "--user-data-dir=" + os.path.join(out, "chromium"),
                        f"--window-size={WIDTH},{HEIGHT}", "--screenshot=" + shot,
                        "file://" + os.path.join(plan, "report.html")],
                       check=True, capture_output=True, timeout=120)
        width, height, rows = png_pixels(shot)
        self.assertEqual((width, height), (WIDTH, HEIGHT))
        colours = {}
        for row in rows:
            for p in row:
                colours[p] = colours.get(p, 0) + 1
        white = colours.get((255, 255, 255), 0)
        self.assertLess(white, 0.97 * width * height, "the page is blank")
        # The pictures' own colours are on the screen: forward, backward, activations.
        for rgb in [(0x4c, 0x78, 0xa8), (0x54, 0xa2, 0x4b), (0xf5, 0x85, 0x18)]:
            self.assertGreater(colours.get(rgb, 0), 200, f"no {rgb} on the screenshot")


if __name__ == "__main__":
    unittest.main(verbosity=2)
