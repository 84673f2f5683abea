"""The HTML report of one compiled and profiled model: a single self-contained file (inline
CSS, SVG and a few lines of JavaScript; nothing fetched when it is viewed).

Sections: the graph the backend runs (the lowered graph: fused ops coloured apart, each
node's profiled time in its label and a heat colour), op counts per stage, the memory plan
as a timeline (each activation a rectangle: instructions across, arena offsets down), per-op
and per-node times with GFLOP/s, and the compile's stages and passes with their times.

The graph is laid out by Graphviz (`dot -Tsvg`) when it is installed; otherwise by a small
layered layout here (ranks by longest path). Either way each op node is an SVG element with
id "op_<i>" (the page script counts them into #graph-count)."""
from __future__ import annotations

import html
import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Ops that stand for several graph ops (fusion) get their own colour.
FUSED_OPS = ("FusedConv", "FullyConnected", "ElementwiseChain", "Attention", "LayerNormalization", "Gelu")
_FAMILY_COLOURS = {"fused": "#f4a261", "conv": "#e9c46a", "matrix": "#e9c46a", "other": "#a8dadc"}


@dataclass
class GraphPicture:
    """What the report draws of a graph: op nodes (op, name), inputs and outputs, edges."""

    name: str
    nodes: list[tuple[str, str]]  # (op, node name)
    inputs: list[str]
    outputs: list[str]
    edges: list[tuple[str, str, str]]  # (source id, target id, label)
    # Node name -> the backend of its segment, for a partitioned model (coloured by backend).
    backends: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of_partition(partition: Any) -> GraphPicture:
        """The partitioned graph, each node tagged with its segment's backend."""
        picture = GraphPicture.of(partition.graph)
        picture.backends = {node.name: segment.backend for segment in partition.segments for node in segment.nodes}
        return picture

    @staticmethod
    def of(graph: Any) -> GraphPicture:
        """Captured from an ember Graph (cheap: no layout), while the compile observes it."""
        from ember.graph.ir import Constant

        ids: dict[int, str] = {}
        inputs = []
        for i, placeholder in enumerate(graph.inputs):
            ids[id(placeholder)] = f"in_{i}"
            inputs.append(placeholder.name)
        nodes, edges = [], []
        for i, node in enumerate(graph.nodes):
            nodes.append((node.op, node.name))
            for value in node.inputs:
                if value is None or isinstance(value, Constant):
                    continue
                source = ids.get(id(value.producer) if value.producer is not None else id(value))
                if source is not None:
                    edges.append((source, f"op_{i}", str(value.type)))
            ids[id(node)] = f"op_{i}"
        outputs = []
        for k, output in enumerate(graph.outputs):
            producer = getattr(output.value, "producer", None)
            source = ids.get(id(producer)) if producer is not None else ids.get(id(output.value))
            outputs.append(output.name)
            if source is not None:
                edges.append((source, f"out_{k}", str(output.value.type)))
        return GraphPicture(graph.name, nodes, inputs, outputs, edges)


def _family(op: str) -> str:
    if op in FUSED_OPS:
        return "fused"
    if "Conv" in op:
        return "conv"
    if op in ("MatMul", "Gemm"):
        return "matrix"
    return "other"


_BACKEND_COLOURS = ("#8ecae6", "#ffb703", "#b5e48c", "#cdb4db", "#f4a261", "#e5e5e5")


def node_colour(picture: GraphPicture, op: str, name: str) -> str:
    """By backend for a partitioned model, else by op family (fused ops apart)."""
    if picture.backends:
        names = sorted(set(picture.backends.values()))
        backend = picture.backends.get(name)
        return _BACKEND_COLOURS[names.index(backend) % len(_BACKEND_COLOURS)] if backend in names else "#ffffff"
    return _FAMILY_COLOURS[_family(op)]


def legend(picture: GraphPicture) -> str:
    if picture.backends:
        names = sorted(set(picture.backends.values()))
        spans = "".join(f'<span style="background:{_BACKEND_COLOURS[k % len(_BACKEND_COLOURS)]}">{html.escape(n)}'
                        "</span>" for k, n in enumerate(names))
        return f'<p class="legend">segments by backend: {spans} outline: share of the run time (red: most)</p>'
    return ('<p class="legend"><span style="background:#f4a261">fused</span><span style="background:#e9c46a">'
            'convolution / matrix</span><span style="background:#a8dadc">other</span> outline: share of the '
            "run time (red: most)</p>")


def _heat(share: float) -> str:
    """A red outline whose strength grows with the node's share of the run time."""
    level = max(0, min(255, int(255 * min(1.0, share * 4))))
    return f"#{level:02x}{max(0, 80 - level // 4):02x}{max(0, 80 - level // 4):02x}"


def graph_svg(picture: GraphPicture, node_ms: dict[str, float], total_ms: float) -> tuple[str, str]:
    """(the SVG, the layout engine's name)."""
    if shutil.which("dot"):
        try:
            return _graphviz_svg(picture, node_ms, total_ms), "graphviz"
        except (OSError, subprocess.SubprocessError):
            pass
    return _layered_svg(picture, node_ms, total_ms), "layered"


def _label(op: str, name: str, ms: float | None) -> str:
    short = name if len(name) <= 40 else "~" + name[-39:]
    return f"{op}\n{short}" + (f"\n{ms:.3f} ms" if ms is not None else "")


def _graphviz_svg(picture: GraphPicture, node_ms: dict[str, float], total_ms: float) -> str:
    q = json.dumps
    lines = [f"digraph {q(picture.name)} {{", "  rankdir=TB;",
             '  node [fontname="Helvetica", fontsize=10, style=filled, shape=box];',
             '  edge [fontname="Helvetica", fontsize=8, color="#888888"];']
    for i, name in enumerate(picture.inputs):
        lines.append(f"  in_{i} [id=\"in_{i}\", shape=oval, fillcolor=\"#ffffff\", label={q(name)}];")
    for i, (op, name) in enumerate(picture.nodes):
        ms = node_ms.get(name)
        colour = node_colour(picture, op, name)
        outline = _heat(ms / total_ms) if ms is not None and total_ms > 0 else "#555555"
        tooltip = f"{op} {name}" + (f": {ms:.3f} ms" if ms is not None else "")
        lines.append(f"  op_{i} [id=\"op_{i}\", class=\"op {_family(op)}\", fillcolor=\"{colour}\", "
                     f"color=\"{outline}\", penwidth=2, label={q(_label(op, name, ms))}, tooltip={q(tooltip)}];")
    for k, name in enumerate(picture.outputs):
        lines.append(f"  out_{k} [id=\"out_{k}\", shape=oval, fillcolor=\"#ffffff\", label={q(name)}];")
    for source, target, label in picture.edges:
        lines.append(f"  {source} -> {target} [label={q(label)}];")
    lines.append("}")
    result = subprocess.run(["dot", "-Tsvg"], input="\n".join(lines), capture_output=True, text=True,
                            timeout=120, check=True)
    svg = result.stdout
    return svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inline in HTML


def _layered_svg(picture: GraphPicture, node_ms: dict[str, float], total_ms: float) -> str:
    """Ranks by longest path from the inputs, nodes side by side within a rank."""
    rank: dict[str, int] = {f"in_{i}": 0 for i in range(len(picture.inputs))}
    incoming: dict[str, list[str]] = {}
    for source, target, _ in picture.edges:
        incoming.setdefault(target, []).append(source)
    order = [f"in_{i}" for i in range(len(picture.inputs))] + [f"op_{i}" for i in range(len(picture.nodes))] + \
        [f"out_{k}" for k in range(len(picture.outputs))]
    for key in order[len(picture.inputs):]:
        rank[key] = 1 + max((rank.get(s, 0) for s in incoming.get(key, [])), default=0)
    columns: dict[int, int] = {}
    position: dict[str, tuple[int, int]] = {}
    width, height, gap_x, gap_y = 180, 44, 20, 40
    for key in order:
        column = columns.get(rank[key], 0)
        columns[rank[key]] = column + 1
        position[key] = (10 + column * (width + gap_x), 10 + rank[key] * (height + gap_y))
    total_w = 20 + max(columns.values(), default=1) * (width + gap_x)
    total_h = 20 + (max(rank.values(), default=0) + 1) * (height + gap_y)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
             f'viewBox="0 0 {total_w} {total_h}">']
    for source, target, label in picture.edges:
        (x1, y1), (x2, y2) = position[source], position[target]
        parts.append(f'<line x1="{x1 + width // 2}" y1="{y1 + height}" x2="{x2 + width // 2}" y2="{y2}" '
                     f'stroke="#888"><title>{html.escape(label)}</title></line>')
    texts = {f"in_{i}": (name, "#ffffff", "") for i, name in enumerate(picture.inputs)}
    texts.update({f"out_{k}": (name, "#ffffff", "") for k, name in enumerate(picture.outputs)})
    for i, (op, name) in enumerate(picture.nodes):
        ms = node_ms.get(name)
        texts[f"op_{i}"] = (_label(op, name, ms), node_colour(picture, op, name), f"op {_family(op)}")
    for key in order:
        x, y = position[key]
        text, fill, cls = texts[key]
        lines = "".join(f'<tspan x="{x + 6}" dy="12">{html.escape(t)}</tspan>' for t in text.split("\n"))
        parts.append(f'<g id="{key}" class="node {cls}"><rect x="{x}" y="{y}" width="{width}" height="{height}" '
                     f'fill="{fill}" stroke="#555"/><text x="{x + 6}" y="{y}" font-size="10">{lines}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def memory_svg(placements: Sequence[Any], instructions: int, arena_bytes: int) -> str:
    """The memory plan: each activation a rectangle from its first to its last instruction,
    at its arena offset; hovering names it."""
    width, height = 900, 300
    if not placements or arena_bytes <= 0:
        return "<p>no activations: every tensor is an input, an output or a weight</p>"
    x_scale = width / max(instructions, 1)
    y_scale = height / arena_bytes
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="memory" width="{width + 60}" height="{height + 30}" '
             f'viewBox="0 0 {width + 60} {height + 30}"><rect x="50" y="0" width="{width}" height="{height}" '
             'fill="#f8f8f8" stroke="#ccc"/>']
    for k, placement in enumerate(placements):
        x = 50 + placement.start * x_scale
        w = max(1.0, (placement.end - placement.start + 1) * x_scale)
        y = placement.offset * y_scale
        h = max(1.0, placement.size * y_scale)
        hue = (k * 47) % 360
        title = (f"{placement.buffer.name}: {placement.size} B at offset {placement.offset}, instructions "
                 f"{placement.start}-{placement.end}")
        parts.append(f'<rect class="buffer" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
                     f'fill="hsl({hue},55%,65%)" stroke="#444" stroke-width="0.3"><title>{html.escape(title)}'
                     "</title></rect>")
    parts.append(f'<text x="0" y="12" font-size="10">0 B</text><text x="0" y="{height}" font-size="10">'
                 f"{arena_bytes // 1024} KiB</text><text x=\"50\" y=\"{height + 20}\" font-size=\"10\">instruction 0"
                 f"</text><text x=\"{width - 40}\" y=\"{height + 20}\" font-size=\"10\">{instructions}</text></svg>")
    return "".join(parts)


@dataclass
class ReportData:
    model: str
    backend: str
    picture: GraphPicture
    ops: dict[str, dict[str, int]]
    stats: dict[str, Any]
    placements: list[Any] = field(default_factory=list)
    instructions: int = 0
    profile: Any = None
    trace: Any = None
    plain_ms: list[float] = field(default_factory=list)


_STYLE = """body{font-family:Helvetica,Arial,sans-serif;margin:20px;color:#222}h1{font-size:20px}
h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}th{background:#f0f0f0;cursor:pointer}
td.n{text-align:right;font-variant-numeric:tabular-nums}.bar{background:#e76f51;height:9px;display:inline-block}
#graph{overflow:auto;max-height:900px;border:1px solid #ddd}.legend span{padding:2px 8px;margin-right:6px}"""

_SCRIPT = """(function(){
  var count=document.querySelectorAll('#graph [id^="op_"]').length;
  document.getElementById('graph-count').textContent=String(count);
  document.querySelectorAll('table.sortable th').forEach(function(th,col){
    th.addEventListener('click',function(){
      var body=th.closest('table').tBodies[0];var rows=Array.prototype.slice.call(body.rows);
      var asc=th.dataset.asc!=='1';th.dataset.asc=asc?'1':'0';
      rows.sort(function(a,b){var x=a.cells[col].dataset.v||a.cells[col].textContent,
        y=b.cells[col].dataset.v||b.cells[col].textContent,fx=parseFloat(x),fy=parseFloat(y);
        var r=(isNaN(fx)||isNaN(fy))?x.localeCompare(y):fx-fy;return asc?r:-r;});
      rows.forEach(function(r){body.appendChild(r);});});});
  document.body.dataset.ready='yes';
  console.log('ember-report-ready nodes='+count);
})();"""


def _table(headers: list[str], rows: list[list[Any]], sortable: bool = True) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            if isinstance(value, float):
                cells.append(f'<td class="n" data-v="{value}">{value:.3f}</td>')
            elif isinstance(value, int):
                cells.append(f'<td class="n">{value}</td>')
            elif isinstance(value, tuple):  # (html, sort key): trusted markup made here
                cells.append(f'<td data-v="{value[1]}">{value[0]}</td>')
            else:
                cells.append(f"<td>{html.escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="{"sortable" if sortable else ""}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def render_report(data: ReportData) -> str:
    profile = data.profile
    node_ms: dict[str, float] = {}
    total_ms = 0.0
    if profile is not None:
        for row in profile.by_node():
            # A fused chain's step is named 'a+b+c' after its nodes: its time goes to the last one.
            name = row["node"].rsplit("+", 1)[-1]
            node_ms[name] = node_ms.get(name, 0.0) + row["seconds"] * 1e3
        total_ms = profile.steps_total * 1e3
    svg, engine = graph_svg(data.picture, node_ms, total_ms)
    e = html.escape
    stats = data.stats
    sections = [f"<h1>Ember report: {e(data.model)}</h1>",
                f"<p>backend <b>{e(data.backend)}</b>; compiled in {stats.get('compile_seconds', 0.0):.2f} s; "
                f"{stats.get('instructions', 0)} instructions; weights {stats.get('weight_bytes', 0)} B; "
                f"activation arena {stats.get('arena_bytes', 0)} B "
                f"({100 * float(stats.get('arena_efficiency', 1.0)):.1f}% of it the lower bound)"
                + (f"; latency (plain runs) median {sorted(data.plain_ms)[len(data.plain_ms) // 2]:.3f} ms"
                   if data.plain_ms else "") + "</p>",
                f"<h2>{'Partitioned graph' if data.picture.backends else 'Graph the backend runs'} "
                f"({len(data.picture.nodes)} ops, <span id=\"graph-count\"></span> drawn; layout: {engine})</h2>",
                legend(data.picture),
                f'<div id="graph">{svg}</div>']
    stages = list(data.ops)
    op_names = sorted({op for counts in data.ops.values() for op in counts})
    sections += ["<h2>Ops per stage</h2>",
                 _table(["op", *stages], [[op, *[data.ops[s].get(op, 0) for s in stages]] for op in op_names]),
                 "<h2>Memory plan</h2>"]
    if data.picture.backends:
        sections.append("<p>each segment has a memory plan of its own: <code>ember dump MODEL --stage memory "
                        "--backend B</code> shows one backend's</p>")
    else:
        sections += [f"<p>{len(data.placements)} activations in a {stats.get('arena_bytes', 0)} B arena over "
                     f"{data.instructions} instructions (hover a rectangle for the buffer)</p>",
                     memory_svg(data.placements, data.instructions, int(stats.get("arena_bytes", 0)))]
    if profile is not None:
        worst = max((row["seconds"] for row in profile.by_op()), default=0.0) or 1.0
        by_op = [[row["op"], row["kernel"], row["steps"], row["seconds"] * 1e3, 100 * row["share"],
                  (f'<span class="bar" style="width:{int(200 * row["seconds"] / worst)}px"></span>', row["seconds"]),
                  row["gflop_per_second"] if row["gflop_per_second"] is not None else "-"]
                 for row in profile.by_op()]
        by_node = [[row["node"], row["op"], row["kernel"], row["seconds"] * 1e3, 100 * row["share"],
                    row["gflop_per_second"] if row["gflop_per_second"] is not None else "-"]
                   for row in profile.by_node()]
        sections += [f"<h2>Run time per op ({len(profile.runs)} profiled runs; steps sum to "
                     f"{profile.steps_total * 1e3:.3f} ms of {profile.wall_total * 1e3:.3f} ms measured)</h2>",
                     _table(["op", "kernel", "steps", "ms", "%", "", "GFLOP/s"], by_op),
                     "<h2>Run time per node</h2>",
                     _table(["node", "op", "kernel", "ms", "%", "GFLOP/s"], by_node)]
    if data.trace is not None:
        rows = [[event.name, event.category, event.seconds * 1e3,
                 str(event.args.get("changed", "")), event.args.get("size_after", "")]
                for event in data.trace.events]
        sections += [f"<h2>Compile: stages and passes ({data.trace.seconds:.3f} s)</h2>",
                     _table(["name", "kind", "ms", "changed", "IR size after"], rows)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Ember report: {e(data.model)}</title><style>{_STYLE}</style></head><body>"
            + "\n".join(sections) + f"<script>{_SCRIPT}</script></body></html>\n")
