"""fuse-attention and the cpu backend's FusedAttention kernel: a transformer's
MatMul -> scale -> mask Add -> Softmax -> MatMul chain with its head reshapes and transposes
becomes one node; the kernel (one task per batch and head, reading the heads in place)
matches the interpreter, which runs the chain the node lowers back into."""
from __future__ import annotations

import numpy as np
import pytest

from ember.backends.cpu import CpuBackend
from ember.driver import compile_graph
from ember.graph import Graph
from ember.ops.fused_attention import FusedAttentionAttrs
from ember.types import DType, TensorType
from tests.filecheck import check_pass
from tests.helpers import relative_error


def _chain_ir(mask: str = "%m", scale: str = "Div(%s, @c)", extra_output: str = "") -> str:
    masked = f"%a: f32[2,3,5,7] = Add(%d, {mask}) name=\"a\"" if mask else ""
    scores = "%a" if mask else "%d"
    return f"""graph "g" {{
      input %q: f32[2,5,12]
      input %k: f32[2,7,12]
      input %v: f32[2,7,6]
      input %m: f32[2,1,1,7]
      const @c: f32[] = [2.0]
      %qr: f32[2,5,3,4] = Reshape(%q) {{shape=[2, 5, 3, 4]}} name="qr"
      %qt: f32[2,3,5,4] = Transpose(%qr) {{perm=[0, 2, 1, 3]}} name="qt"
      %kr: f32[2,7,3,4] = Reshape(%k) {{shape=[2, 7, 3, 4]}} name="kr"
      %kt: f32[2,3,4,7] = Transpose(%kr) {{perm=[0, 2, 3, 1]}} name="kt"
      %vr: f32[2,7,3,2] = Reshape(%v) {{shape=[2, 7, 3, 2]}} name="vr"
      %vt: f32[2,3,7,2] = Transpose(%vr) {{perm=[0, 2, 1, 3]}} name="vt"
      %s: f32[2,3,5,7] = MatMul(%qt, %kt) name="s"
      %d: f32[2,3,5,7] = {scale} name="d"
      {masked}
      %p: f32[2,3,5,7] = Softmax({scores}) {{axis=3}} name="p"
      %o: f32[2,3,5,2] = MatMul(%p, %vt) name="o"
      %ot: f32[2,5,3,2] = Transpose(%o) {{perm=[0, 2, 1, 3]}} name="ot"
      %y: f32[2,5,6] = Reshape(%ot) {{shape=[2, 5, 6]}} name="y"
      output "y" = %y
      {extra_output}
    }}"""


def test_the_chain_becomes_one_node_with_its_scale_and_mask():
    check_pass(_chain_ir(), "fuse-attention", """
      CHECK: %y: f32[2,5,6] = FusedAttention(%q, %k, %v, %m) {heads=3, scale=0.5}
      CHECK-NOT: Softmax
      CHECK-NOT: Transpose""")
    # A Mul by a constant scales as it is; no mask Add, no mask.
    check_pass(_chain_ir(mask="", scale="Mul(@c, %s)"), "fuse-attention",
               "CHECK: %y: f32[2,5,6] = FusedAttention(%q, %k, %v, none) {heads=3, scale=2.0}")


def test_chains_that_do_not_fit_stay_apart():
    # The scores are also a graph output; the Softmax runs over the queries, not the keys.
    for ir in (_chain_ir(extra_output='output "s" = %s'), _chain_ir().replace("{axis=3}", "{axis=2}")):
        check_pass(ir, "fuse-attention", """
          CHECK: Softmax
          CHECK-NOT: FusedAttention""")


def _attention_graph(batch, heads, s, t, d, dv, mask_shape) -> Graph:
    g = Graph("attention")
    q = g.add_input("q", TensorType(DType.FLOAT32, (batch, s, heads * d)))
    k = g.add_input("k", TensorType(DType.FLOAT32, (batch, t, heads * d)))
    v = g.add_input("v", TensorType(DType.FLOAT32, (batch, t, heads * dv)))
    m = g.add_input("m", TensorType(DType.FLOAT32, mask_shape)) if mask_shape else None
    y = g.add("FusedAttention", q, k, v, m, attrs=FusedAttentionAttrs(heads, 1.0 / np.sqrt(d)), name="y")
    g.set_outputs([("y", y)])
    return g


CASES = [
    # batch, heads, S, T, d, dv, mask shape
    (1, 12, 16, 16, 32, 32, (1, 1, 1, 16)),   # BERT's: one padding mask per batch
    (2, 3, 5, 37, 8, 6, (2, 1, 1, 37)),       # keys off the 16-lane blocks, dv != d
    (2, 2, 9, 7, 4, 4, (1, 2, 9, 7)),         # a mask per head and query
    (1, 4, 33, 40, 16, 8, (40,)),             # a 1-D mask
    (3, 1, 6, 6, 5, 7, None),                 # no mask, odd head sizes
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"b{c[0]}h{c[1]}s{c[2]}t{c[3]}d{c[4]}v{c[5]}")
def test_kernel_matches_interpreter(case):
    batch, heads, s, t, d, dv, mask_shape = case
    rng = np.random.default_rng(5)
    feeds = {"q": rng.standard_normal((batch, s, heads * d)).astype(np.float32),
             "k": rng.standard_normal((batch, t, heads * d)).astype(np.float32),
             "v": rng.standard_normal((batch, t, heads * dv)).astype(np.float32)}
    if mask_shape:
        mask = np.where(rng.random(mask_shape) < 0.2, -1e4, 0.0).astype(np.float32)
        feeds["m"] = mask
    expected = compile_graph(_attention_graph(*case), "interpreter").run(feeds)["y"]
    for threads in (1, 2):
        model = compile_graph(_attention_graph(*case), CpuBackend(num_threads=threads))
        assert "ember_attention_heads(" in model._executable.source
        assert relative_error(model.run(feeds)["y"], expected) < 1e-5, threads


def test_a_row_masked_out_entirely_is_nan_as_softmax_gives():
    case = (1, 2, 3, 5, 4, 4, (1, 1, 3, 5))
    feeds = {"q": np.ones((1, 3, 8), np.float32), "k": np.ones((1, 5, 8), np.float32),
             "v": np.arange(40, dtype=np.float32).reshape(1, 5, 8)}
    mask = np.zeros((1, 1, 3, 5), np.float32)
    mask[0, 0, 1] = -np.inf
    feeds["m"] = mask
    y = compile_graph(_attention_graph(*case), CpuBackend(num_threads=1)).run(feeds)["y"]
    reference = compile_graph(_attention_graph(*case), "interpreter").run(feeds)["y"]
    assert np.isnan(y[0, 1]).all() and np.isnan(reference[0, 1]).all()
    np.testing.assert_allclose(y[0, [0, 2]], reference[0, [0, 2]], rtol=1e-6)


def test_keys_masked_with_minus_infinity_or_the_float_minimum_get_no_weight():
    """Scores far below their row's peak (here -inf and float32's minimum, as exporters write
    masks) take the kernel's vector exp to exactly 0: the result is attention over the other
    keys alone."""
    case = (1, 2, 4, 32, 8, 8, (1, 1, 1, 32))
    rng = np.random.default_rng(7)
    feeds = {"q": rng.standard_normal((1, 4, 16)).astype(np.float32),
             "k": rng.standard_normal((1, 32, 16)).astype(np.float32),
             "v": rng.standard_normal((1, 32, 16)).astype(np.float32)}
    for masked_value in (-np.inf, np.finfo(np.float32).min):
        mask = np.zeros((1, 1, 1, 32), np.float32)
        mask[..., 5:29] = masked_value
        feeds["m"] = mask
        y = compile_graph(_attention_graph(*case), CpuBackend(num_threads=1)).run(feeds)["y"]
        kept = np.r_[0:5, 29:32]
        short = (1, 2, 4, 8, 8, 8, None)
        alone = compile_graph(_attention_graph(*short), "interpreter").run(
            {"q": feeds["q"], "k": feeds["k"][:, kept], "v": feeds["v"][:, kept]})["y"]
        np.testing.assert_allclose(y, alone, rtol=1e-5, atol=1e-6)
