"""assign-layouts (transforms/layouts.py): before/after IR text with the cpu backend as the
target, numerically through the reference, and chains of channels-last blocks on the cpu
backend against the interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.driver import compile_graph
from ember.graph import parse_graph
from ember.passes import PassContext
from ember.transforms.layouts import MIN_CHAIN
from tests.conftest import require_shared_models
from tests.filecheck import check_pass, random_weights
from tests.helpers import relative_error

CPU = PassContext(backend=CpuBackend(num_threads=1))
PIPELINE = ["assign-layouts", "optimize-transposes", "dce"]
BLOCK = '{strides=[STRIDE, STRIDE], pads=[1, 1, 1, 1], expand_activation="clip", expand_beta=6.0, ' \
        'depthwise_activation="clip", depthwise_beta=6.0}'


def _chain_ir(blocks: int, hw: int = 8, extra_output: str = "", batch: int = 1) -> str:
    """`blocks` MobileNetV2 blocks on [batch, 16, hw, hw] (96 expanded), the first strided and
    widening to 24 channels, the others with the residual; then a Relu."""
    out = hw // 2
    lines = ['graph "g" {', f"  input %x: f32[{batch},16,{hw},{hw}]",
             "  const @we0: f32[96,16,1,1]", "  const @be0: f32[96]", "  const @wd0: f32[96,1,3,3]",
             "  const @bd0: f32[96]", "  const @wp0: f32[24,96,1,1]", "  const @bp0: f32[24]"]
    for i in range(1, blocks):
        lines += [f"  const @we{i}: f32[144,24,1,1]", f"  const @be{i}: f32[144]", f"  const @wd{i}: f32[144,1,3,3]",
                  f"  const @bd{i}: f32[144]", f"  const @wp{i}: f32[24,144,1,1]", f"  const @bp{i}: f32[24]"]
    lines.append(f"  %b0: f32[{batch},24,{out},{out}] = InvertedResidual(%x, @we0, @be0, @wd0, @bd0, @wp0, @bp0, none) "
                 f"{BLOCK.replace('STRIDE', '2')} name=\"b0\"")
    for i in range(1, blocks):
        lines.append(f"  %b{i}: f32[{batch},24,{out},{out}] = InvertedResidual(%b{i - 1}, @we{i}, @be{i}, @wd{i}, "
                     f"@bd{i}, @wp{i}, @bp{i}, %b{i - 1}) {BLOCK.replace('STRIDE', '1')} name=\"b{i}\"")
    lines += [f"  %r: f32[{batch},24,{out},{out}] = Relu(%b{blocks - 1}) name=\"r\"", '  output "y" = %r',
              extra_output, "}"]
    return "\n".join(lines)


def test_a_chain_of_blocks_stays_channels_last_between_them():
    # The first block reads NCHW x, the last writes NCHW y (the kernels convert); the last
    # one's residual, NHWC inside the chain, is transposed to y's layout.
    check_pass(_chain_ir(3), PIPELINE, """
      CHECK-NOT: Transpose
      CHECK: %b0.nhwc: f32[1,4,4,24] = InvertedResidual(%x, {{.*}}, none)
      CHECK-NOT: x_channels_last
      CHECK-SAME: y_channels_last=true
      CHECK-NEXT: %b1.nhwc: f32[1,4,4,24] = InvertedResidual(%b0.nhwc, {{.*}}, %b0.nhwc)
      CHECK-SAME: x_channels_last=true, y_channels_last=true
      CHECK-NEXT: %b1.to_nchw: f32[1,24,4,4] = Transpose(%b1.nhwc) {perm=[0, 3, 1, 2]}
      CHECK-NEXT: %b2: f32[1,24,4,4] = InvertedResidual(%b1.nhwc, {{.*}}, %b1.to_nchw)
      CHECK-SAME: x_channels_last=true
      CHECK-NOT: y_channels_last
      CHECK-NEXT: %r: f32[1,24,4,4] = Relu(%b2)""", context=CPU)


def test_mobilenetv2_runs_its_small_maps_channels_last_with_no_transposes():
    from ember.driver import load_model, optimize_graph

    graph = load_model(require_shared_models() / "mobilenetv2.onnx")
    optimize_graph(graph, CpuBackend(num_threads=1))
    blocks = [node for node in graph.nodes if node.op == "InvertedResidual"]
    assert [(n.attrs.x_channels_last, n.attrs.y_channels_last) for n in blocks] == \
        [(False, False)] * 2 + [(False, True)] + [(True, True)] * 13
    # The last block's NHWC y goes on to the final 1x1 convolution, which writes NCHW.
    (last,) = [node for node in graph.nodes if node.op == "FusedConv" and node.input(0) is blocks[-1].outputs[0]]
    assert (last.attrs.x_channels_last, last.attrs.y_channels_last) == (True, False)
    assert not any(node.op == "Transpose" for node in graph.nodes)


def test_a_value_read_outside_the_chain_is_transposed_back_for_that_reader():
    graph = check_pass(_chain_ir(3, extra_output='  output "mid" = %b1'), PIPELINE, """
      CHECK: %b1.nhwc: f32[1,4,4,24] = InvertedResidual
      CHECK: %b2: f32[1,24,4,4] = InvertedResidual(%b1.nhwc,
      CHECK: output "mid" = %""", context=CPU)
    mid = next(o.value for o in graph.outputs if o.name == "mid")
    assert mid.producer.op == "Transpose" and mid.producer.input(0).name == "b1.nhwc"


def test_a_lone_block_keeps_its_layout():
    assert MIN_CHAIN == 4  # convolutions: a lone block is worth 3
    check_pass(_chain_ir(1), PIPELINE, """
      CHECK-NOT: Transpose
      CHECK: %b0: f32[1,24,4,4] = InvertedResidual(%x,
      CHECK-NOT: channels_last=""", context=CPU)


def test_blocks_the_backend_runs_channels_first_keep_their_layout():
    # 64x64 maps: over the kernel's MAX_PIXELS, so the cpu kernel runs them in bands, NCHW.
    check_pass(_chain_ir(3, hw=64), PIPELINE, """
      CHECK-NOT: Transpose
      CHECK-NOT: channels_last=""", context=CPU)


def test_without_a_target_backend_nothing_changes():
    check_pass(_chain_ir(3), PIPELINE, """
      CHECK-NOT: Transpose
      CHECK-NOT: channels_last""")


@pytest.mark.parametrize("threads", [1, 2])
def test_channels_last_chain_on_cpu_matches_interpreter(threads, monkeypatch):
    """The whole pipeline, batch 2: the chain goes channels last (each of the kernel's splits: rows,
    the default on 2 threads, with its re-expanded rows at the threads' boundary and its
    thread slabs; pixels; and channels where the weights outweigh the expanded tensor), 24
    output channels (a partial GEMM panel stored straight into y), the residual added in the
    projection's tile."""
    import ember.codegen.kernels.inverted_residual as kernel

    ir = _chain_ir(4, batch=2)
    weights = {name: data * np.float32(0.3) for name, data in random_weights(ir, 5).items()}
    feeds = {"x": np.random.default_rng(7).standard_normal((2, 16, 8, 8)).astype(np.float32)}
    expected = compile_graph(parse_graph(ir, weights), "interpreter").run(feeds)["y"]
    monkeypatch.setattr(kernel, "threads_for", lambda threads, macs: threads)  # small blocks: parallel anyway
    # rows in bands of one output row (no band fits 1 byte) re-expand every band's input rows
    for split, band in (("rows", 1 << 30), ("rows", 1), ("pixels", 1 << 30), ("channels", 1 << 30)):
        monkeypatch.setattr(kernel, "_split", lambda block, threads, split=split, **_: split)
        monkeypatch.setattr(kernel, "band_bytes", lambda options, band=band: band)
        model = compile_graph(parse_graph(ir, weights), CpuBackend(num_threads=threads))
        source = model._executable.source
        assert source.count("ember_transpose_f32") == 0  # inside the kernels: none
        assert ("thread_rows[" in source) == (split == "rows")
        assert ("i0 + 1 < thread_rows[task][1]" in source) == (split == "rows" and band == 1)
        # the last block's residual, NHWC in the chain, to its NCHW y: the one transpose
        assert [s.op for s in model._executable.steps].count("Transpose") == 1
        assert relative_error(model.run(feeds)["y"], expected) < 1e-5, split


def test_two_threads_split_a_channels_last_chain_by_rows(monkeypatch):
    """The default split of channels-last blocks on 2 threads: rows, each thread's scratch
    in a slab at the same offset in every block."""
    import ember.codegen.kernels.inverted_residual as kernel

    monkeypatch.setattr(kernel, "threads_for", lambda threads, macs: threads)  # small blocks: parallel anyway
    ir = _chain_ir(3, hw=16)
    source = compile_graph(parse_graph(ir, random_weights(ir, 2)), CpuBackend(num_threads=2))._executable.source
    assert source.count("static const long thread_rows[2][2]") == 3
    slabs = re.findall(r"float \*e = .* \+ task \* (\d+);", source)
    assert len(slabs) == 3 and len(set(slabs)) == 1  # thread 1's slab: the same offset in every block
    assert int(slabs[0]) * 4 % kernel.THREAD_SLAB_BYTES == 0


def _conv_chain_ir(batch: int = 1, hw: tuple[int, int] = (12, 20), mid: int = 32) -> str:
    """A text recognizer's backbone in small: pointwise and depthwise FusedConvs alternating on
    [batch, 16, h, w] (16 -> mid -> 64 channels; 3x3 taps at stride 2x1, 5x5 at 1x2), the last
    pointwise one adding c3's result as its residual; then a Relu."""
    h, w = hw
    h2, w2 = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    act = 'activation="hard_swish", alpha=1.0'
    return "\n".join([
        'graph "g" {', f"  input %x: f32[{batch},16,{h},{w}]",
        f"  const @w0: f32[{mid},16,1,1]", f"  const @b0: f32[{mid}]",
        f"  const @w1: f32[{mid},1,3,3]", f"  const @b1: f32[{mid}]",
        f"  const @w2: f32[64,{mid},1,1]", "  const @b2: f32[64]", "  const @w3: f32[64,1,5,5]", "  const @b3: f32[64]",
        "  const @w4: f32[64,64,1,1]", "  const @b4: f32[64]",
        f"  %c0: f32[{batch},{mid},{h},{w}] = FusedConv(%x, @w0, @b0, none) "
        f'{{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], {act}}} name="c0"',
        f"  %c1: f32[{batch},{mid},{h2},{w}] = FusedConv(%c0, @w1, @b1, none) "
        f'{{strides=[2, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group={mid}, {act}}} name="c1"',
        f"  %c2: f32[{batch},64,{h2},{w}] = FusedConv(%c1, @w2, @b2, none) "
        f'{{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], activation="clip", beta=6.0}} name="c2"',
        f"  %c3: f32[{batch},64,{h2},{w2}] = FusedConv(%c2, @w3, @b3, none) "
        f'{{strides=[1, 2], pads=[2, 2, 2, 2], dilations=[1, 1], group=64, activation="silu"}} name="c3"',
        f"  %c4: f32[{batch},64,{h2},{w2}] = FusedConv(%c3, @w4, @b4, %c3) "
        f'{{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], activation="relu"}} name="c4"',
        f"  %r: f32[{batch},64,{h2},{w2}] = Relu(%c4) name=\"r\"", '  output "y" = %r', "}"])


def test_a_chain_of_pointwise_and_depthwise_convolutions_stays_channels_last():
    # Ends NCHW (the kernels convert), NHWC between; c4 writes NCHW y (read outside), so its
    # residual, c3's result, takes the one Transpose back, while c4 reads c3's x NHWC.
    check_pass(_conv_chain_ir(), PIPELINE, """
      CHECK: %c0.nhwc: f32[1,12,20,32] = FusedConv(%x,
      CHECK-NOT: x_channels_last
      CHECK-SAME: y_channels_last=true
      CHECK-NEXT: %c1.nhwc: f32[1,6,20,32] = FusedConv(%c0.nhwc,
      CHECK-SAME: group=32, {{.*}}x_channels_last=true, y_channels_last=true
      CHECK-NEXT: %c2.nhwc: f32[1,6,20,64] = FusedConv(%c1.nhwc,
      CHECK-NEXT: %c3.nhwc: f32[1,6,10,64] = FusedConv(%c2.nhwc,
      CHECK-NEXT: %c3.to_nchw: f32[1,64,6,10] = Transpose(%c3.nhwc) {perm=[0, 3, 1, 2]}
      CHECK-NEXT: %c4: f32[1,64,6,10] = FusedConv(%c3.nhwc, @w4, @b4, %c3.to_nchw)
      CHECK-SAME: x_channels_last=true
      CHECK-NOT: y_channels_last
      CHECK-NEXT: %r: f32[1,64,6,10] = Relu(%c4)""", context=CPU)


def test_convolutions_the_backend_keeps_channels_first_break_the_chain():
    # 24 channels: c0's output fills 3/4 of a GEMM panel (under MIN_PANEL_FILL) and c1's are not
    # a whole number of 16-channel vectors; what is left, c2 to c4, is worth three convolutions,
    # under MIN_CHAIN: nothing changes.
    check_pass(_conv_chain_ir(mid=24), PIPELINE, """
      CHECK-NOT: Transpose
      CHECK-NOT: channels_last""", context=CPU)


@pytest.mark.parametrize("threads", [1, 2])
def test_channels_last_convolutions_on_cpu_match_interpreter(threads, monkeypatch):
    """Batch 2, both splits of the pointwise GEMMs (each thread's rows; the output channels),
    every convolution on conv_channels_last; the one Transpose: the last one's NCHW residual."""
    import ember.codegen.kernels.conv_channels_last as kernel

    ir = _conv_chain_ir(batch=2)
    weights = {name: data * np.float32(0.3) for name, data in random_weights(ir, 5).items()}
    feeds = {"x": np.random.default_rng(7).standard_normal((2, 16, 12, 20)).astype(np.float32)}
    expected = compile_graph(parse_graph(ir, weights), "interpreter").run(feeds)["y"]
    monkeypatch.setattr(kernel, "threads_for", lambda threads, macs, minimum: threads)  # small: parallel anyway
    for split in ("rows", "channels"):
        monkeypatch.setattr(kernel, "_split", lambda s, threads, split=split: split)
        model = compile_graph(parse_graph(ir, weights), CpuBackend(num_threads=threads))
        steps = model._executable.steps
        assert [step.op for step in steps].count("Transpose") == 1
        assert [step.kernel for step in steps if step.op == "FusedConv"] == ["conv_channels_last"] * 5
        assert relative_error(model.run(feeds)["y"], expected) < 1e-5, split
