"""fuse-inverted-residual (before/after IR text, numerically through the reference) and the
cpu backend's InvertedResidual kernel against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.fused import FusedConvAttrs
from ember.types import DType, TensorType
from tests.filecheck import check_pass
from tests.helpers import relative_error

PW = "{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1]}"
CLIP6 = '{strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], activation="clip", beta=6.0}'


def _block_ir(stride: int, residual: bool, expanded: int = 16, group: int | None = None) -> str:
    group = expanded if group is None else group
    out = 4 if residual else 6
    dw = f'{{strides=[{stride}, {stride}], pads=[1, 1, 1, 1], dilations=[1, 1], group={group}, activation="relu"}}'
    size = 6 // stride
    tail = (f'%p: f32[1,4,{size},{size}] = FusedConv(%d, @w3, @b3, %x) {PW} name="p"' if residual else
            f'%p: f32[1,6,{size},{size}] = FusedConv(%d, @w3, @b3, none) {PW} name="p"')
    return f"""graph "g" {{
      input %x: f32[1,4,6,6]
      const @w1: f32[{expanded},4,1,1]
      const @b1: f32[{expanded}]
      const @w2: f32[{expanded},{expanded // group},3,3]
      const @b2: f32[{expanded}]
      const @w3: f32[{out},{expanded},1,1]
      const @b3: f32[{out}]
      %e: f32[1,{expanded},6,6] = FusedConv(%x, @w1, @b1, none) {CLIP6} name="e"
      %d: f32[1,{expanded},{size},{size}] = FusedConv(%e, @w2, @b2, none) {dw} name="d"
      {tail}
      output "y" = %p
    }}"""


def test_expand_depthwise_project_with_residual_becomes_one_node():
    check_pass(_block_ir(1, True), "fuse-inverted-residual", """
      CHECK-NOT: FusedConv
      CHECK: %p: f32[1,4,6,6] = InvertedResidual(%x, @w1, @b1, @w2, @b2, @w3, @b3, %x)
      CHECK-SAME: strides=[1, 1], pads=[1, 1, 1, 1], expand_activation="clip"
      CHECK-SAME: expand_beta=6.0, depthwise_activation="relu"
      CHECK-NEXT: output "y" = %p""")


def test_strided_block_without_residual_becomes_one_node():
    check_pass(_block_ir(2, False), "fuse-inverted-residual", """
      CHECK: %p: f32[1,6,3,3] = InvertedResidual(%x, @w1, @b1, @w2, @b2, @w3, @b3, none)
      CHECK-SAME: strides=[2, 2]""")


def test_blocks_the_kernel_cannot_take_stay_apart():
    # 24 expanded channels (not a multiple of 16), and a grouped (not depthwise) middle stage.
    for ir in (_block_ir(1, True, expanded=24), _block_ir(1, True, group=8)):
        check_pass(ir, "fuse-inverted-residual", """
          CHECK: %e: {{.*}} = FusedConv
          CHECK-NEXT: %d: {{.*}} = FusedConv
          CHECK-NEXT: %p: {{.*}} = FusedConv
          CHECK-NOT: InvertedResidual""")


def test_separable_pair_with_a_narrow_middle_stays_apart():
    """Pointwise -> depthwise -> pointwise whose middle is not EXPANSION times wider than both
    ends (PP-LCNet's separable pairs: the three kernels are faster)."""
    ir = (_block_ir(1, False, expanded=16).replace("f32[1,6,6,6]", "f32[1,9,6,6]").replace("@w3: f32[6,", "@w3: f32[9,")
          .replace("@b3: f32[6]", "@b3: f32[9]"))
    check_pass(ir, "fuse-inverted-residual", """
      CHECK: %p: f32[1,9,6,6] = FusedConv
      CHECK-NOT: InvertedResidual""")
    # The same block projecting to 8 channels (16 = 2 x 8) fuses.
    check_pass(ir.replace("9", "8"), "fuse-inverted-residual", "CHECK: %p: f32[1,8,6,6] = InvertedResidual")


def test_intermediate_with_another_reader_stays_apart():
    ir = _block_ir(1, False).replace('output "y" = %p', 'output "y" = %p\n      output "e" = %e')
    check_pass(ir, "fuse-inverted-residual", """
      CHECK-NOT: InvertedResidual""")


def _block_graph(channels, expanded, out, hw, stride, kernel, residual, activations) -> Graph:
    rng = np.random.default_rng(expanded * 10 + hw[1])
    g = Graph("block")
    x = g.add_input("x", TensorType(DType.FLOAT32, (2, channels, *hw)))

    def weights(*shape):
        return g.add_constant(rng.standard_normal(shape).astype(np.float32) * 0.3)

    pad = kernel // 2
    (ea, da, pa) = activations
    clip = {"clip": (0.0, 6.0), "hard_swish": (0.75, -0.125)}
    e = g.add("FusedConv", x, weights(expanded, channels, 1, 1), weights(expanded), None,
              attrs=FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, ea, *clip.get(ea, (0.0, 0.0))), name="e")
    d = g.add("FusedConv", e, weights(expanded, 1, kernel, kernel), weights(expanded), None,
              attrs=FusedConvAttrs((stride, stride), (pad,) * 4, (1, 1), expanded, da, *clip.get(da, (0.0, 0.0))),
              name="d")
    r = x if residual else None
    y = g.add("FusedConv", d, weights(out, expanded, 1, 1), weights(out), r,
              attrs=FusedConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, pa, *clip.get(pa, (0.0, 0.0))), name="p")
    g.set_outputs([("y", y)])
    return g


BLOCKS = [
    # in, expanded, out, (H, W), stride, kernel, residual, activations (expand, depthwise, project)
    (16, 96, 16, (9, 11), 1, 3, True, ("clip", "clip", "none")),   # MobileNetV2's, odd map
    (24, 144, 32, (14, 14), 2, 3, False, ("clip", "clip", "none")),  # strided, even map
    (5, 32, 7, (7, 5), 2, 3, False, ("relu", "sigmoid", "tanh")),   # odd counts, other activations
    (8, 48, 8, (6, 6), 1, 5, True, ("none", "relu", "relu")),       # 5x5 taps, activation after the residual
    (16, 64, 24, (7, 9), 1, 3, False, ("hard_swish", "hard_swish", "silu")),  # MobileNetV3's, with an affine
]


@pytest.mark.parametrize("case", BLOCKS, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}x{c[3][0]}s{c[4]}k{c[5]}")
def test_block_kernel_matches_interpreter(case, monkeypatch):
    import ember.codegen.kernels.inverted_residual as kernel

    feeds = {"x": np.random.default_rng(3).standard_normal((2, case[0], *case[3])).astype(np.float32)}
    expected = compile_graph(_block_graph(*case), "interpreter").run(feeds)["y"]
    monkeypatch.setattr(kernel, "threads_for", lambda threads, macs: threads)  # small blocks: parallel anyway
    # bands: every map counts as large; one-row bands (none fits 1 byte), then a few rows each
    for threads, split, band_bytes in ((1, "pixels", 0), (2, "pixels", 0), (2, "channels", 0), (1, "bands", 1),
                                       (2, "bands", 1), (1, "bands", 60_000), (2, "bands", 60_000)):
        monkeypatch.setattr(kernel, "_split", lambda block, threads, split=split, **_: split)
        monkeypatch.setattr(kernel, "MAX_PIXELS", 0 if split == "bands" else 10**9)
        monkeypatch.setattr(kernel, "BANDS_ABOVE_BYTES", 0)
        monkeypatch.setattr(kernel, "band_bytes", lambda options, band_bytes=band_bytes: band_bytes)
        model = compile_graph(_block_graph(*case), CpuBackend(num_threads=threads))
        source = model._executable.source
        assert ("ember_depthwise_nhwc(" in source) == (split != "bands")
        assert (".x = e," in source) == (split == "bands")
        assert ("#pragma omp parallel" in source) == (threads > 1)
        assert ("ember_transpose_f32_threads(" in source) == (split == "channels")
        assert relative_error(model.run(feeds)["y"], expected) < 1e-5, (threads, split, band_bytes)


def test_split_follows_where_the_weights_outweigh_the_expanded_tensor():
    def split(channels, expanded, out, hw):
        graph = _block_graph(channels, expanded, out, hw, 1, 3, False, ("clip", "clip", "none"))
        source = compile_graph(graph, CpuBackend(num_threads=2))._executable.source
        if ".x = e," in source:  # the band's expanded rows as the depthwise kernel's map
            return "bands"
        if "ember_depthwise_nhwc(" not in source:
            return "three steps"
        return "channels" if "ember_transpose_f32_threads(" in source else "pixels"

    assert split(32, 192, 32, (28, 28)) == "pixels"       # 12 K floats of weights, 150 K of E
    assert split(160, 960, 320, (7, 7)) == "channels"    # 460 K floats of weights, 47 K of E
    assert split(24, 144, 24, (56, 56)) == "bands"       # over MAX_PIXELS, E of 1.8 MB
    assert split(16, 96, 24, (112, 112)) == "bands"      # E of 4.8 MB
    assert split(16, 64, 16, (56, 56)) == "three steps"  # over MAX_PIXELS, E of 0.8 MB


def test_bands_are_sized_by_the_cores_l2():
    from ember.codegen.kernels.inverted_residual import band_bytes
    from ember.codegen.kernels.registry import KernelOptions

    assert band_bytes(KernelOptions(l2_bytes=2 << 20)) == 3 << 19
    assert band_bytes(KernelOptions(l2_bytes=256 << 10)) == 512 << 10  # never the 2-4x slower small bands
    rows = {}
    for l2 in (1 << 20, 2 << 20):
        backend = CpuBackend(num_threads=1)
        backend.kernel_options = lambda l2=l2: KernelOptions(num_threads=1, l2_bytes=l2)
        source = compile_graph(_block_graph(16, 96, 24, (112, 112), 1, 3, False, ("clip", "clip", "none")),
                               backend)._executable.source
        rows[l2] = source
    assert rows[1 << 20] != rows[2 << 20]  # larger bands where the L2 holds them


def test_l2_cache_size_from_sysfs(tmp_path):
    from ember.support.host import l2_cache_bytes

    for index, (level, kind, size) in enumerate((("1", "Data", "48K"), ("1", "Instruction", "32K"),
                                                 ("2", "Unified", "2048K"), ("3", "Unified", "480M"))):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(level + "\n")
        (folder / "type").write_text(kind + "\n")
        (folder / "size").write_text(size + "\n")
    assert l2_cache_bytes(tmp_path) == 2 << 20
    assert l2_cache_bytes(tmp_path / "missing") is None


def test_profiles_count_the_blocks_work_as_its_three_convolutions(monkeypatch):
    import ember.codegen.kernels.inverted_residual as kernel

    case = BLOCKS[1]
    fused = compile_graph(_block_graph(*case), CpuBackend(num_threads=1))._executable.steps
    monkeypatch.setattr(kernel, "LANES", 10**6)  # refused: lowered back into its three FusedConvs
    parts = compile_graph(_block_graph(*case), CpuBackend(num_threads=1))._executable.steps
    assert [s.op for s in fused if s.flops] == ["InvertedResidual"]
    assert [s.op for s in parts if s.flops] == ["FusedConv"] * 3
    assert sum(s.flops or 0 for s in fused) == sum(s.flops or 0 for s in parts) > 0
