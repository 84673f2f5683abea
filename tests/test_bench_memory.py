"""Memory: the weight blob is laid out page-aligned once (on a huge page from 2 MB up) and the
native program runs it in place (one copy of the packed weights, not two); results are
unchanged."""
from __future__ import annotations

import numpy as np
import pytest

import ember
from ember.backends.cpu.backend import CpuBackend
from ember.backends.cpu.native import NativeProgram
from ember.codegen.emitter import BLOB_ALIGN, WeightBlob, page_aligned_zeros
from ember.driver import load_model, prepare_program
from ember.support.heap import HUGE_PAGE
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")


def _program():
    backend = CpuBackend(num_threads=1)
    program, _, _ = prepare_program(load_model(LENET, None), backend)
    return backend, program


def test_page_aligned_zeros():
    for size in (1, 64, 4097, HUGE_PAGE, 5 * HUGE_PAGE + 12345):
        block = page_aligned_zeros(size)
        assert block.ctypes.data % BLOB_ALIGN == 0 and block.size == size and not block.any()
        assert size < HUGE_PAGE or block.ctypes.data % HUGE_PAGE == 0  # huge pages can back it
        block[:] = 7  # writable, all of it
        assert block.sum() == 7 * size


def test_activation_arenas_from_a_huge_page_up_start_on_one():
    from ember.backends.cpu.native import _Arena

    assert _Arena(3 * HUGE_PAGE + 64, 2).memory.ctypes.data % HUGE_PAGE == 0
    small = _Arena(4096, 1).memory
    assert small.ctypes.data % BLOB_ALIGN == 0 and small.size == 4096


def test_weight_blob_is_page_aligned_with_each_weight_at_its_offset():
    _, program = _program()
    weights = [w for w in program.weights if w.data is not None]
    before = {id(w): np.array(w.data) for w in weights}
    blob = WeightBlob(weights)
    assert blob.data.ctypes.data % BLOB_ALIGN == 0
    for weight in weights:
        raw = before[id(weight)].view(np.uint8).reshape(-1)
        start = blob.offsets[id(weight)]
        assert start % 64 == 0
        assert np.array_equal(blob.data[start:start + raw.size], raw)
        # The weight now reads its bytes in the blob: its own array could be freed.
        assert np.shares_memory(weight.data, blob.data)
        assert weight.data.dtype == before[id(weight)].dtype and np.array_equal(weight.data, before[id(weight)])


def _collector_off(check):
    import gc

    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return check()
    finally:
        if was_enabled:
            gc.enable()


def test_constant_folding_frees_each_replaced_weight_at_once():
    """A chain of folds (transpose, then negate) keeps neither the original weight nor the
    intermediate once it is folded past, without waiting for the cycle collector."""
    import weakref

    from ember.graph import parse_graph
    from ember.passes import PassManager

    text = """graph "g" {
      input %x: f32[2,64]
      const @w: f32[64,64]
      %t: f32[64,64] = Transpose(@w) {perm=[1, 0]} name="t"
      %n: f32[64,64] = Neg(%t) name="n"
      %y: f32[2,64] = MatMul(%x, %n) name="y"
      output "y" = %y
    }"""
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

    def fold():
        graph = parse_graph(text, {"w": weight.copy()})
        original = weakref.ref(graph.constants["w"].data)
        PassManager(["constant-fold"]).run(graph)
        (folded,) = [c for c in graph.constants.values()]
        np.testing.assert_array_equal(folded.data, -weight.T)
        return original() is None

    assert _collector_off(fold)


def test_lowering_unlinks_the_node_it_replaces():
    """A lowered node leaves the graph unlinked from its operands: in its reference cycle with
    its results it would keep its weights alive beside their folded copies."""
    from ember.graph import parse_graph
    from ember.lowering import lower_graph

    graph = parse_graph("""graph "g" {
      input %x: f32[2,8]
      const @w: f32[8,4]
      const @b: f32[4]
      %y: f32[2,4] = Gemm(%x, @w, @b) name="y"
      output "y" = %y
    }""", {"w": np.ones((8, 4), np.float32), "b": np.zeros(4, np.float32)})
    (gemm,) = graph.nodes
    assert lower_graph(graph)
    assert gemm not in graph.nodes and all(v is None for v in gemm.inputs)


def test_native_program_runs_the_blob_in_place():
    backend, program = _program()
    cprogram = backend.generate(program)
    native = NativeProgram(backend._build(cprogram.source), cprogram, program)
    # No second copy of the weights: the program's weights are the generator's blob.
    assert np.shares_memory(native._weights, cprogram.weights)
    assert not native._weights.flags.writeable


def test_in_place_weights_compute_what_the_interpreter_does():
    pytest.importorskip("onnx")
    cpu = ember.compile(LENET, backend="cpu", num_threads=1)
    reference = ember.compile(LENET, backend="interpreter")
    feeds = {s.name: np.random.default_rng(1).standard_normal(s.type.shape).astype(np.float32) for s in cpu.inputs}
    for got, want in zip(cpu.run(feeds).values(), reference.run(feeds).values(), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_garbage_from_optimizing_is_collected_before_packing():
    """The collector is paused while compiling; the young generation is collected once after
    lowering, so constants that folding replaced do not live on beside the packed weights."""
    import gc

    from ember.driver import compile_model

    counts = {}

    def observe(stage, _artifact):
        counts[stage] = gc.get_count()[0]

    compile_model(LENET, "cpu", observer=observe, backend_options={"num_threads": 1})
    # Without the collection, every container allocated since the compile began is counted.
    assert counts["lowered"] < 200 < counts["optimized"], counts


def test_freed_heap_pages_are_handed_back_after_lowering_packing_and_the_compile(monkeypatch):
    import platform

    import ember.driver
    from ember.support.heap import release_freed_memory

    if platform.libc_ver()[0] == "glibc":
        assert release_freed_memory() is True
    calls = []
    monkeypatch.setattr(ember.driver, "release_freed_memory", lambda: calls.append(1) or True)
    stages = []
    ember.driver.compile_model(LENET, "cpu", observer=lambda stage, _: stages.append((stage, len(calls))),
                               backend_options={"num_threads": 1})
    # After lowering (folding's replaced constants), after the kernels' packed weights are made
    # (the "lir" stage), and once the compile has dropped its graph and program.
    assert ("optimized", 0) in stages and ("lowered", 1) in stages and ("lir", 2) in stages, stages
    assert len(calls) == 3


def test_a_compile_leaves_no_cyclic_garbage_holding_weights():
    """The IR's node/value cycles hold the graph's weights and the packed copies after a
    compile; the compile collects them itself rather than leaving them resident until the
    collector's next full pass (ResNet-18: 164 -> 120 MB resident after a cached compile)."""
    import gc

    from ember.driver import compile_model

    def compile_and_count() -> int:
        assert compile_model(LENET, "cpu", backend_options={"num_threads": 1}) is not None
        return gc.collect()

    leftover = _collector_off(compile_and_count)
    assert leftover < 20, f"{leftover} unreachable objects were left for the collector"


def test_a_file_read_for_one_compile_hands_its_proto_back_after_import():
    from ember.frontends.onnx.importer import load_onnx
    from ember.frontends.onnx.loader import load_model as read_onnx
    from ember.support.errors import ModelImportError

    loaded = read_onnx(LENET, single_use=True)
    assert loaded.model.graph.initializer and loaded.payloads is not None
    graph = load_onnx(loaded)
    assert graph.constants and loaded.released and loaded.model.ByteSize() == 0
    with pytest.raises(ModelImportError, match="read for one compile"):
        load_onnx(loaded)
    # A caller's own ModelProto is never released: it can be imported again.
    proto = read_onnx(LENET).complete()
    given = read_onnx(proto, single_use=True)
    load_onnx(given)
    assert not given.released and given.model.ByteSize() > 0
    assert load_onnx(given).constants


def test_a_folded_graph_output_stays_when_a_later_fold_reads_it():
    from ember.graph import parse_graph
    from ember.passes import PassManager

    graph = parse_graph("""graph "g" {
      input %x: f32[4]
      const @w: f32[4]
      %n: f32[4] = Neg(@w) name="n"
      %m: f32[4] = Neg(%n) name="m"
      %y: f32[4] = Add(%x, %m) name="y"
      output "n" = %n
      output "y" = %y
    }""", {"w": np.arange(4, dtype=np.float32)})
    PassManager(["constant-fold"], verify=True).run(graph)
    (n,) = [o.value for o in graph.outputs if o.name == "n"]
    assert graph.constants.get(n.name) is n
    np.testing.assert_array_equal(n.data, -np.arange(4, dtype=np.float32))


def test_a_scalar_weight_keeps_its_shape_in_the_blob():
    from ember.lir.ir import Buffer

    _, program = _program()
    template = next(w for w in program.weights if w.data is not None)
    scalar = Buffer(**{**{f: getattr(template, f) for f in template.__dataclass_fields__}, "data": np.float32(2.5)})
    blob = WeightBlob([scalar])
    assert scalar.data.shape == () and float(scalar.data) == 2.5 and np.shares_memory(scalar.data, blob.data)
