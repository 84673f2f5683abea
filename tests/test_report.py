"""`ember report`: one self-contained HTML file (no network at view time) with the graph the
backend runs (every op node drawn, Graphviz or the built-in layout), op counts per stage, the
memory plan, the profile and the pass log; loaded in headless Chromium: no console errors,
the page counts the graph's nodes, and a screenshot shows the graph."""
from __future__ import annotations

import argparse
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from ember.cli import main
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")
FUSED_COLOUR = (0xF4, 0xA2, 0x61)  # tools/report.py: fused ops


def _lowered_node_count(model: str) -> int:
    from ember.backends import get_backend
    from ember.driver import load_model, prepare_program

    counts: dict[str, int] = {}
    prepare_program(load_model(model), get_backend("cpu"),
                    lambda stage, graph: counts.setdefault(stage, len(graph.nodes)) if stage == "lowered" else None)
    return counts["lowered"]


def _report(tmp_path: Path, model: str = LENET) -> tuple[Path, str]:
    path = tmp_path / "report.html"
    assert main(["report", model, "--runs", "1", "--threads", "1", "-o", str(path)]) == 0
    return path, path.read_text()


def test_report_is_self_contained_with_every_section(tmp_path):
    _, text = _report(tmp_path)
    # Nothing fetched at view time: no external scripts, styles, images or links.
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", text)
    assert "<link" not in text and "@import" not in text
    nodes = set(re.findall(r'id="(op_\d+)"', text))
    assert len(nodes) == _lowered_node_count(LENET)
    for heading in ("Graph the backend runs", "Ops per stage", "Memory plan", "Run time per op",
                    "Run time per node", "Compile: stages and passes"):
        assert heading in text
    assert "select-kernels" in text and "fully_connected_gemm" in text and 'class="buffer"' in text


def test_built_in_layout_without_graphviz(tmp_path, monkeypatch):
    import ember.tools.report as report

    monkeypatch.setattr(report.shutil, "which", lambda name: None)
    args = argparse.Namespace(model=LENET, backend="interpreter", threads=None, shape=[], input=[],
                              precision="fp32", runs=1)
    from ember.tools.report_command import build_report

    text = build_report(args)
    assert "layout: layered" in text
    assert len(set(re.findall(r'id="(op_\d+)"', text))) > 0
    assert re.search(r"Graph the backend runs \((\d+) ops", text)


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered rows of an 8-bit RGB or RGBA PNG, not interlaced."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    idat = b""
    while offset < len(data):
        length, kind = struct.unpack(">I4s", data[offset:offset + 8])
        body = data[offset + 8:offset + 8 + length]
        if kind == b"IDAT":
            idat += body
        else:
            chunks[kind] = body
        offset += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and colour in (2, 6) and interlace == 0
    step = 4 if colour == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * step
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - step] if x >= step else 0
            up, corner = previous[x], previous[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + left) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + up) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(bytes(line[i] for i in range(stride) if i % step < 3))  # RGB only
        previous = line
    return width, height, rows


def test_report_in_headless_chromium(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium; .ci/run installs it)")
    path, text = _report(tmp_path)
    expected = len(set(re.findall(r'id="(op_\d+)"', text)))
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              "--virtual-time-budget=5000", "--window-size=1200,1000"]
    loaded = subprocess.run([*common, "--enable-logging=stderr", "--v=0", "--dump-dom", path.as_uri()],
                            capture_output=True, text=True, timeout=120, check=False)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert 'data-ready="yes"' in loaded.stdout  # the page's script ran to its end
    assert f'<span id="graph-count">{expected}</span>' in loaded.stdout
    console = re.findall(r'CONSOLE[^\]]*\] "(.*?)", source', loaded.stderr)
    # The page logs one line when ready; anything else (an uncaught error, a failed load) is an error.
    assert console == [f"ember-report-ready nodes={expected}"], console
    shot = tmp_path / "report.png"
    taken = subprocess.run([*common, f"--screenshot={shot}", path.as_uri()], capture_output=True, text=True,
                           timeout=120, check=False)
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    width, height, rows = _png_pixels(shot)
    assert (width, height) == (1200, 1000)
    fused = bytes(FUSED_COLOUR)
    # The graph is at the top of the page: its fused-op boxes show in the screenshot.
    painted = sum(row[i:i + 3] == fused for row in rows for i in range(0, len(row), 3))
    assert painted > 500, f"only {painted} pixels of the fused-op colour in the screenshot"


def test_partitioned_report_colours_nodes_by_segment_backend():
    from ember.runtime.profile import RunProfile
    from ember.tools.report import GraphPicture, ReportData, node_colour, render_report
    from tests.test_profile import fork_model

    graph, backends, feeds, compile_partitioned = fork_model()
    seen = {}
    model = compile_partitioned(graph, backends, observer=lambda stage, p: seen.setdefault(stage, p))
    picture = GraphPicture.of_partition(seen["partition"])
    colours = {name: node_colour(picture, op, name) for op, name in picture.nodes}
    assert len(set(colours.values())) == 2 and set(picture.backends.values()) == {"a", "b"}
    profile = RunProfile.merge([model.run(feeds, profile=True)[1]])
    text = render_report(ReportData("fork", model.backend, picture, {}, model.stats, profile=profile))
    assert "Partitioned graph" in text and "segments by backend" in text
    for colour in set(colours.values()):
        assert colour in text
    assert len(set(re.findall(r'id="(op_\d+)"', text))) == len(picture.nodes)
