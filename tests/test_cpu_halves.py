"""float16 and bfloat16, and the narrow types (float8, float4, int4, int2), on the cpu backend:
stored as bits, converted exactly one way and with round-to-nearest-even the other
(runtime/ember_math.h), computed in float32 between Casts (the graph pass
compute-halves-in-float32). The conversions are checked bit for bit against NumPy and
ml_dtypes over every 16-bit pattern, every narrow value and millions of float32 and float64
values; models on 16-bit floats against the interpreter."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember
from ember.frontends.onnx.dtypes import ONNX_TO_DTYPE

BF16 = np.dtype(ml_dtypes.bfloat16)
ONNX_TYPES = {dtype.numpy: code for code, dtype in ONNX_TO_DTYPE.items()}


def _cast_model(source: np.dtype, target: np.dtype, count: int):
    node = helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPES[target])
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", ONNX_TYPES[source], [count])],
                              [helper.make_tensor_value_info("y", ONNX_TYPES[target], [count])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _cast_on_cpu(x: np.ndarray, target) -> np.ndarray:
    model = ember.compile(_cast_model(x.dtype, np.dtype(target), x.size), backend="cpu", num_threads=1)
    return model.run({"x": x})["y"]


def _assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN (payloads are not specified)."""
    assert actual.dtype == expected.dtype
    with np.errstate(invalid="ignore"):
        a, e = actual.astype(np.float64), expected.astype(np.float64)
    nan = np.isnan(e)
    np.testing.assert_array_equal(np.isnan(a), nan)
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[actual.dtype.itemsize]
    bad = np.flatnonzero((actual.view(width) != expected.view(width)) & ~nan)
    assert bad.size == 0, (f"{bad.size} values differ, e.g. input #{bad[0]}: "
                           f"{actual[bad[0]]!r} != {expected[bad[0]]!r}")


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_every_16_bit_pattern_widens_exactly(half):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(half)
    for target in (np.float32, np.float64):
        _assert_same_bits(_cast_on_cpu(x, target), x.astype(target))


def _float32_samples() -> np.ndarray:
    rng = np.random.default_rng(0)
    random_bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # Every rounding boundary: the halfway points between neighbouring 16-bit values and their
    # float32 neighbours (ties to even), overflow thresholds, subnormals, signed zeros.
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    bf = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    finite = np.concatenate([halves[np.isfinite(halves)], bf[np.isfinite(bf)]])
    finite.sort()
    mid = (finite[:-1].astype(np.float64) + finite[1:]) / 2
    mids = mid.astype(np.float32)
    edges = np.array([65504, 65519.99, 65520, 65535.9, 65536, 3.4e38, np.inf, -np.inf, np.nan, 0.0, -0.0,
                      2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-14, 2.0**-133, 1e-45], np.float32)
    return np.concatenate([random_bits, mids, np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf)), edges, -edges])


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_float32_rounds_to_nearest_even(half):
    x = _float32_samples()
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same_bits(_cast_on_cpu(x, half), x.astype(half))


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_float64_rounds_like_the_interpreter(half):
    """double -> float16 rounds once, as NumPy does (round to odd in between); double ->
    bfloat16 rounds through float32, as ml_dtypes and ONNX Runtime do."""
    rng = np.random.default_rng(1)
    exact = _float32_samples()[-200_000:].astype(np.float64)
    # Just above or below a float32 halfway point: rounding to float32 first would give the tie.
    nudged = np.concatenate([np.nextafter(exact, np.inf), np.nextafter(exact, -np.inf)])
    x = np.concatenate([rng.standard_normal(100_000) * 10.0 ** rng.integers(-8, 6, 100_000), nudged])
    with np.errstate(over="ignore", invalid="ignore"):
        _assert_same_bits(_cast_on_cpu(x, half), x.astype(half))


def test_integers_and_other_16_bit_types_convert():
    ints = np.concatenate([np.arange(-70000, 70000, 7), [2**31 - 1, -2**31]]).astype(np.int32)
    with np.errstate(over="ignore"):
        _assert_same_bits(_cast_on_cpu(ints, np.float16), ints.astype(np.float16))
        _assert_same_bits(_cast_on_cpu(ints.astype(np.int64) * 977, BF16), (ints.astype(np.int64) * 977).astype(BF16))
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    _assert_same_bits(_cast_on_cpu(x, BF16), x.astype(np.float32).astype(BF16))
    small = np.linspace(-300, 300, 6001).astype(np.float16)
    np.testing.assert_array_equal(_cast_on_cpu(small, np.int32), small.astype(np.float32).astype(np.int32))


def _model(half, nodes, inputs, outputs, inits):
    t = ONNX_TYPES[np.dtype(half)]
    graph = helper.make_graph(nodes, "halves", [helper.make_tensor_value_info(n, t, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, s in outputs],
                              [numpy_helper.from_array(a.astype(half), n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["f16", "bf16"])
def test_a_convolutional_block_on_16_bit_floats_matches_the_interpreter(half):
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fb"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"])]
    inits = [("w", rng.standard_normal((8, 3, 3, 3)) * 0.3), ("b", rng.standard_normal(8) * 0.1),
             ("fc", rng.standard_normal((5, 8))), ("fb", rng.standard_normal(5))]
    model = _model(half, nodes, [("x", [2, 3, 9, 9])], [("y", [2, 5])], inits)
    x = rng.standard_normal((2, 3, 9, 9)).astype(half)
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    compiled = ember.compile(model, backend="cpu", num_threads=2)
    actual = compiled.run({"x": x})["y"]
    assert actual.dtype == np.dtype(half)
    # One 16-bit rounding per op in both; the interpreter accumulates in 16 bits in places.
    tolerance = 2e-2 if half is np.float16 else 6e-2
    np.testing.assert_allclose(actual.astype(np.float32), expected.astype(np.float32), rtol=tolerance, atol=tolerance)
    lowered = compiled.stats["ops"]["lowered"]
    assert lowered.get("Cast", 0) >= 2 and "FusedConv" in lowered or "Conv" in lowered, lowered


def test_ops_that_fix_a_16_bit_result_type_are_not_widened():
    """DequantizeLinear's `to` names float16: its float32 form would give another type, so
    the pass leaves it and the backend answers for the node as it is."""
    from ember.codegen.kernels import OpView
    from ember.codegen.kernels.table import as_float32
    from ember.ops.quant import QuantizeAttrs
    from ember.ops.registry import NoAttrs
    from ember.types import DType, TensorType

    f16, f32, i8 = (TensorType(d, (3,)) for d in (DType.FLOAT16, DType.FLOAT32, DType.INT8))
    scalar16 = TensorType(DType.FLOAT16, ())
    view = OpView("DequantizeLinear", QuantizeAttrs(DType.FLOAT16, 0), (f16,),
                  (i8, scalar16, TensorType(DType.INT8, ())), (False, True, True), "dq")
    assert as_float32(view) is view
    add = OpView("Add", NoAttrs(), (f16,), (f16, f16), (False, False), "add")
    assert as_float32(add).results == (f32,) and as_float32(add).operands == (f32, f32)


# The narrow types: one element per byte; C converts them (runtime/ember_math.h) like ml_dtypes.
NARROW_FLOATS = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
                 ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn]
NARROW_INTS = {ml_dtypes.int4: 4, ml_dtypes.uint4: 4, ml_dtypes.int2: 2, ml_dtypes.uint2: 2}


def _codes(narrow) -> np.ndarray:
    """Every value of a narrow type, as ml_dtypes stores it (float4 and the integers keep their
    bits in the low part of the byte)."""
    bits = NARROW_INTS.get(narrow, 4 if narrow is ml_dtypes.float4_e2m1fn else 8)
    return np.arange(1 << bits, dtype=np.uint8).view(narrow)


@pytest.mark.parametrize("narrow", NARROW_FLOATS + list(NARROW_INTS), ids=lambda t: np.dtype(t).name)
def test_every_narrow_value_widens_exactly(narrow):
    x = _codes(narrow)
    for target in (np.float32, np.float64, np.float16):
        with np.errstate(invalid="ignore"):
            _assert_same_bits(_cast_on_cpu(x, target), x.astype(target))
    if narrow in NARROW_INTS:
        np.testing.assert_array_equal(_cast_on_cpu(x, np.int32), x.astype(np.int32))


@pytest.mark.parametrize("narrow", NARROW_FLOATS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("saturate", [1, 0])
def test_float32_rounds_to_narrow_floats_like_ml_dtypes(narrow, saturate):
    """Round to nearest even; out of range saturates to the largest value (saturate=1, and
    always for float4) or gives infinity or NaN, as the type has them."""
    codes = _codes(narrow).astype(np.float32)
    finite = np.unique(codes[np.isfinite(codes)])
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    x = np.concatenate([_float32_samples()[::5], mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(-np.inf)), finite * 1.5, -finite * 1.5])
    node = helper.make_node("Cast", ["x"], ["y"], to=ONNX_TYPES[np.dtype(narrow)], saturate=saturate)
    graph = helper.make_graph([node], "cast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
                              [helper.make_tensor_value_info("y", ONNX_TYPES[np.dtype(narrow)], [x.size])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    expected = ember.compile(model, backend="interpreter").run({"x": x})["y"]
    actual = ember.compile(model, backend="cpu", num_threads=1).run({"x": x})["y"]
    _assert_same_bits(actual, expected)


@pytest.mark.parametrize("narrow", list(NARROW_INTS), ids=lambda t: np.dtype(t).name)
def test_numbers_truncate_and_wrap_into_narrow_integers(narrow):
    floats = np.concatenate([np.linspace(-40, 40, 3201), [np.nan, np.inf, -np.inf, 1e30, -1e30]]).astype(np.float32)
    ints = np.arange(-300, 300, dtype=np.int64)
    for x in (floats, floats.astype(np.float64), ints, ints.astype(np.int16)):
        with np.errstate(invalid="ignore", over="ignore"):
            expected = x.astype(narrow)
        actual = _cast_on_cpu(x, narrow)
        np.testing.assert_array_equal(actual.view(np.uint8), expected.view(np.uint8), err_msg=str(x.dtype))


def test_bitcast_is_a_byte_copy():
    x = np.arange(-5, 5, dtype=np.int16)
    node = helper.make_node("BitCast", ["x"], ["y"], to=TensorProto.FLOAT16)
    graph = helper.make_graph([node], "bitcast", [helper.make_tensor_value_info("x", TensorProto.INT16, [10])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [10])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    actual = ember.compile(model, backend="cpu", num_threads=1).run({"x": x})["y"]
    np.testing.assert_array_equal(actual.view(np.int16), x)


@pytest.mark.parametrize("narrow", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float4_e2m1fn,
                                    ml_dtypes.int4, ml_dtypes.uint2], ids=lambda t: np.dtype(t).name)
def test_quantize_and_dequantize_with_narrow_types_match_the_interpreter(narrow):
    """QuantizeLinear to and DequantizeLinear from the narrow types, per axis, with a float16
    output for the round trip: the linear kernels convert each element on the fly."""
    rng = np.random.default_rng(3)
    t = ONNX_TYPES[np.dtype(narrow)]
    scale = numpy_helper.from_array((rng.random(4) * 0.5 + 0.1).astype(np.float32), "s")
    scale16 = numpy_helper.from_array((rng.random(4) * 0.5 + 0.1).astype(np.float16), "s16")
    zero = numpy_helper.from_array(_codes(narrow)[[1, 2, 0, 1]], "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s16", "z"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                              [helper.make_tensor_value_info("q", t, [3, 4, 5]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 4, 5])],
                              [scale, scale16, zero])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    x = (rng.standard_normal((3, 4, 5)) * 3).astype(np.float32)
    expected = ember.compile(model, backend="interpreter").run({"x": x})
    actual = ember.compile(model, backend="cpu", num_threads=2).run({"x": x})
    _assert_same_bits(actual["q"], expected["q"])
    _assert_same_bits(actual["y"], expected["y"])
