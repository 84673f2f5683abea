"""One fuzz case run and judged (bench/fuzz_models.py): Ember's result, ONNX Runtime's, and the
tie-breaks (ONNX's reference implementation, ONNX Runtime in float64) when they differ."""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

try:  # run as a script (bench/ on sys.path) or imported as bench.fuzz_compare
    from fuzz_mutations import Case, graphs_of, runtime_inputs
except ImportError:  # pragma: no cover
    from bench.fuzz_mutations import Case, graphs_of, runtime_inputs

# An EmberError whose message says it is a bug of Ember's own.
INTERNAL_MARKERS = ("internal error", "an Ember bug")


# ---------------------------------------------------------------------------------------------
# Comparing


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.kind != "c" else a.astype(np.complex128)


def compare(ember: list, ort: list, rtol: float, atol: float) -> str | None:
    """None when Ember's outputs match ONNX Runtime's, else what differs."""
    if len(ember) != len(ort):
        return f"{len(ember)} outputs from Ember, {len(ort)} from ONNX Runtime"
    for i, (mine, ref) in enumerate(zip(ember, ort, strict=True)):
        if isinstance(ref, list):
            if not isinstance(mine, list | tuple) or len(mine) != len(ref):
                return f"output {i}: a sequence of {len(ref)} from ONNX Runtime, {type(mine).__name__} from Ember"
            problem = compare(list(mine), ref, rtol, atol)
            if problem:
                return f"output {i}: {problem}"
            continue
        mine, ref = np.asarray(mine), np.asarray(ref)
        if ref.dtype == np.uint8 and mine.dtype.itemsize == 1 and mine.dtype.kind not in "biu":
            ref = ref.view(mine.dtype)  # ONNX Runtime hands float8 results over as their bits
        if mine.shape != ref.shape:
            return f"output {i}: shape {mine.shape} from Ember, {ref.shape} from ONNX Runtime"
        if mine.dtype != ref.dtype:
            return f"output {i}: element type {mine.dtype} from Ember, {ref.dtype} from ONNX Runtime"
        if ref.dtype == object or ref.dtype.kind in "biuSU":
            bad = np.asarray(mine != ref)
            if bad.any():
                where = np.argwhere(bad)[0]
                return (f"output {i} ({ref.dtype}): {int(bad.sum())} of {ref.size} differ, first at {tuple(where)}: "
                        f"{mine[tuple(where)]!r} vs {ref[tuple(where)]!r}")
            continue
        a, b = _as_float(mine), _as_float(ref)
        problem = _compare_float(a, b, rtol if ref.itemsize >= 4 else max(rtol, 1e-2), atol)
        if problem:
            return f"output {i} ({ref.dtype}): {problem}"
    return None


def _compare_float(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> str | None:
    if a.dtype.kind == "c":
        return _compare_float(a.real, b.real, rtol, atol) or _compare_float(a.imag, b.imag, rtol, atol)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        where = tuple(np.argwhere(nan_a != nan_b)[0])
        return (f"NaN positions differ ({int((nan_a != nan_b).sum())} of {a.size}), first at {where}: "
                f"{a[where]} vs {b[where]}")
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if ((inf_a | inf_b) & (a != b)).any():
        where = tuple(np.argwhere((inf_a | inf_b) & (a != b))[0])
        return f"infinities differ, first at {where}: {a[where]} vs {b[where]}"
    finite = ~(nan_a | inf_a)
    if not finite.any():
        return None
    scale = float(np.max(np.abs(b[finite]), initial=0.0))
    tolerance = atol + rtol * np.abs(b) + 1e-6 * scale
    bad = finite & (np.abs(a - b) > tolerance)
    if bad.any():
        where = tuple(np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {a.size} values differ, first at {where}: {a[where]!r} vs {b[where]!r} "
                f"(max abs diff {float(np.max(np.abs(a - b)[finite])):.3g})")
    return None


# ---------------------------------------------------------------------------------------------
# Running one case (in a worker, or in this process with --replay)


@dataclass
class Outcome:
    status: str
    detail: str = ""
    seconds: float = 0.0


def _is_internal(message: str) -> bool:
    return any(marker in message for marker in INTERNAL_MARKERS)


def write_case_files(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    path.write_bytes(case.model)
    for name, data in case.side_files.items():
        (folder / name).write_bytes(data)
    return path


def run_ember(path: Path, inputs: dict[str, Any], backend: str) -> tuple[list | None, Outcome | None]:
    """(outputs, None) when Ember ran the model, else (None, the outcome)."""
    from ember.onnx_backend import prepare
    from ember.support.errors import EmberError

    try:
        rep = prepare(str(path), "CPU", backend=backend)
        outputs = list(rep.run(dict(inputs)))
    except EmberError as err:
        message = f"{type(err).__name__}: {err}"
        return None, Outcome("internal" if _is_internal(message) else "refused", message[:2000])
    except Exception as err:  # noqa: BLE001  (an escape: the finding this fuzzer is for)
        frames = traceback.extract_tb(err.__traceback__)
        where = "; ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-4:])
        return None, Outcome("escape", f"{type(err).__name__}: {str(err)[:600]} (at {where})")
    return outputs, None


def run_ort(path: Path, inputs: dict[str, Any], refusal: list[str] | None = None) -> list | None:
    """ONNX Runtime's outputs, or None when it refuses the model or the inputs (the first line
    of its reason appended to `refusal`)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        missing = [n for n in names if n not in inputs and n not in _initializer_names(path)]
        if missing:
            if refusal is not None:
                refusal.append(f"asks for inputs the model binds as constants: {missing[:3]}")
            return None
        # Copies: ONNX Runtime may write an output into an input's array in place (a training-mode
        # BatchNormalization's running mean, twice when the node is duplicated), which would
        # change the inputs the tie-breaks run on.
        feeds = {n: np.array(inputs[n], copy=True) if isinstance(inputs[n], np.ndarray) else inputs[n]
                 for n in names if n in inputs}
        return list(session.run(None, feeds))
    except Exception as error:  # noqa: BLE001  (ONNX Runtime refuses: not ours to judge)
        if refusal is not None:
            refusal.append(str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__)
        return None


def _initializer_names(path: Path) -> set[str]:
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        return set()
    return {t.name for t in model.graph.initializer}


def run_case(case: Case, backend: str, folder: Path, phase: Callable[[str], None] = lambda p: None) -> Outcome:
    started = time.perf_counter()
    path = write_case_files(case, folder)

    def done(outcome: Outcome) -> Outcome:
        outcome.seconds = time.perf_counter() - started
        return outcome

    phase("ember")
    mine, outcome = run_ember(path, case.inputs, backend)
    if outcome is not None:
        return done(outcome)
    assert mine is not None
    phase("ort")
    refusal: list[str] = []
    theirs = run_ort(path, case.inputs, refusal)
    phase("compare")
    if case.random_outputs:
        return done(Outcome("not-compared"))
    if theirs is None:
        split = backends_disagree(path, case, backend, mine, phase)
        if split:
            return done(Outcome("mismatch", f"ONNX Runtime refuses the model, and {split}"))
        return done(Outcome("ember-only", f"ONNX Runtime: {refusal[0] if refusal else 'refused'}"))
    problem = compare(mine, theirs, *tolerances(case, mine))
    if problem is None:
        return done(Outcome("match"))
    split = backends_disagree(path, case, backend, mine, phase)
    if split:
        return done(Outcome("mismatch", f"{problem}; and {split}"))
    # A tie-break: ONNX's reference implementation. Where Ember agrees with it and ONNX
    # Runtime does not, the difference is ONNX Runtime's (reported, not an Ember finding).
    phase("reference")
    reference = run_reference(path, case.inputs)
    if reference is not None and compare(mine, reference, case.rtol, case.atol) is None:
        return done(Outcome("ort-differs", f"{problem} (Ember matches ONNX's reference implementation)"))
    # Precision: the reference run in float64 (every float32 type, weight and input widened)
    # is the exact result; Ember matching it where ONNX Runtime does not (float32 rounding in
    # ONNX Runtime's own arithmetic, e.g. sampling coordinates on a 65536-pixel axis).
    phase("reference")
    for how, exact in (("ONNX's reference implementation", run_reference(path, case.inputs, widen=True)),
                       ("ONNX Runtime itself", run_ort_widened(path, case.inputs))):
        if exact is not None and compare_exact(mine, exact, case.rtol, case.atol) \
                and not compare_exact(theirs, exact, case.rtol, case.atol):
            return done(Outcome("ort-differs", f"{problem} (Ember matches {how} run in float64; ONNX Runtime "
                                               "in float32 does not: its own rounding)"))
    undefined = undefined_in_onnx_runtime(path, case.inputs)
    if reference is None and undefined:
        return done(Outcome("no-consensus", f"{problem} ({undefined}; the reference fails on it)"))
    if reference is None:
        return done(Outcome("mismatch", f"{problem} (the reference fails on it)"))
    if compare(theirs, reference, case.rtol, case.atol) is None:
        if undefined:
            return done(Outcome("no-consensus", f"{problem} ({undefined}; the reference agrees with ONNX Runtime)"))
        overflow = order_dependent_overflow(path, case, mine, theirs)
        if overflow:
            return done(Outcome("no-consensus", f"{problem} ({overflow})"))
        return done(Outcome("mismatch", f"{problem} (the reference agrees with ONNX Runtime)"))
    # Ember, ONNX Runtime and the reference all differ: no agreed result to hold Ember to
    # (NaN inputs to DynamicQuantizeLinear give position-dependent results in ONNX Runtime).
    return done(Outcome("no-consensus", f"{problem} (the reference agrees with neither: "
                                        f"{compare(mine, reference, case.rtol, case.atol)})"))


def undefined_in_onnx_runtime(path: Path, inputs: dict[str, Any]) -> str | None:
    """Why this case's result is left undefined by ONNX (so ONNX Runtime's answer is not one
    to hold Ember to), or None. Known, each found by running ONNX's reference implementation
    with the operands in question as extra outputs:
    - a GridSample grid holding NaN or an infinity (ONNX Runtime casts the coordinate to an
      index);
    - a Cast / CastLike of a NaN or out-of-range float to an integer (Ember saturates, ONNX
      Runtime and NumPy give the host's convert result);
    - a MaxPool window holding NaN (ONNX's reference skips NaN cells on its padded path and
      propagates them on its unpadded one; ONNX Runtime's vector max keeps one operand or the
      other by position; Ember propagates NaN, as ReduceMax, GlobalMaxPool and PyTorch do);
    - a DFT / STFT of a non-finite signal (inf - inf pairings follow the summation order, which
      differs between a direct transform and an FFT);
    - a DynamicQuantizeLinear of an empty tensor (min and max of no values: ONNX's reference
      fails, ONNX Runtime gives scale 1, Ember 1/255 as for an all-zero tensor, as the
      reference does there);
    - an integer Pow whose power leaves the type's range (converted from double by ONNX
      Runtime and the reference: the host's out-of-range conversion; Ember wraps)."""
    try:
        model = onnx.load(str(path))
    except Exception:  # noqa: BLE001
        return None
    watched = [n for n in model.graph.node if n.input and n.input[0] and n.op_type in _UNDEFINED_ON]
    values = _operand_values(model, inputs, watched)
    for node in watched:
        reason = _UNDEFINED_ON[node.op_type](node, values)
        if reason:
            return f"{node.op_type} '{node.name}' {reason}"
    return None


def _operand_values(model: ModelProto, inputs: dict[str, Any], nodes: list) -> dict[str, Any]:
    """The values of `nodes`' operands under ONNX's reference implementation (the model's
    initializers and inputs included); empty where the reference cannot run it."""
    from onnx.reference import ReferenceEvaluator

    known: dict[str, Any] = dict(inputs)
    known.update({t.name: numpy_helper.to_array(t) for t in model.graph.initializer})
    wanted = [name for name in dict.fromkeys(name for n in nodes for name in n.input if name) if name not in known]
    if not wanted:
        return known
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in wanted)
    try:
        names = [vi.name for vi in runtime_inputs(probe.graph)]
        with np.errstate(all="ignore"):
            results = ReferenceEvaluator(probe).run(None, {n: inputs[n] for n in names if n in inputs})
    except Exception:  # noqa: BLE001  (the reference cannot run it: no verdict)
        return known
    known.update(zip(wanted, results, strict=True))
    return known


def _float_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f"


def _cast_out_of_range(node, values: dict[str, Any]) -> str | None:
    x = values.get(node.input[0])
    if node.op_type == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), 0)
        target = onnx.helper.tensor_dtype_to_np_dtype(to) if to else None
    else:
        like = values.get(node.input[1]) if len(node.input) > 1 else None
        target = like.dtype if isinstance(like, np.ndarray) else None
    if not _float_array(x) or target is None or np.dtype(target).kind not in "iu":
        return None
    info = np.iinfo(target)
    wide = x.astype(np.float64)
    if np.isnan(wide).any() or (np.trunc(wide) < info.min).any() or (np.trunc(wide) >= float(info.max) + 1).any():
        return f"turns NaN or out-of-range floats into {np.dtype(target)}"
    return None


def _grid_holds_nan(node, values: dict[str, Any]) -> str | None:
    grid = values.get(node.input[1]) if len(node.input) > 1 else None
    if _float_array(grid) and not np.isfinite(grid.astype(np.float64)).all():
        return ("has a grid holding NaN or an infinity: no pixel lies there (ONNX Runtime casts the coordinate to an "
                "integer index, or reflects an infinity to a pixel; Ember gives NaN)")
    return None


def _pool_of_nan(node, values: dict[str, Any]) -> str | None:
    x = values.get(node.input[0])
    if _float_array(x) and np.isnan(x).any():
        return "pools an input holding NaN (NaN in a MaxPool window is undefined in ONNX)"
    return None


def _transform_of_nonfinite(node, values: dict[str, Any]) -> str | None:
    x = values.get(node.input[0])
    if _float_array(x) and not np.isfinite(x.astype(np.float64)).all():
        return "transforms a signal holding infinities or NaN (the result follows the summation order)"
    return None


def _power_out_of_range(node, values: dict[str, Any]) -> str | None:
    base = values.get(node.input[0])
    exponent = values.get(node.input[1]) if len(node.input) > 1 else None
    if not (isinstance(base, np.ndarray) and base.dtype.kind in "iu" and isinstance(exponent, np.ndarray)):
        return None
    with np.errstate(all="ignore"):
        power = np.power(base.astype(np.float64), exponent.astype(np.float64))
    info = np.iinfo(base.dtype)
    if (np.isnan(power) | (power < info.min) | (power >= float(info.max) + 1)).any():
        return (f"raises {base.dtype} integers past their range (ONNX Runtime and ONNX's reference convert the "
                "out-of-range double power, which C and NumPy leave undefined; Ember wraps, as integer "
                "multiplication does)")
    return None


def _range_of_nothing(node, values: dict[str, Any]) -> str | None:
    x = values.get(node.input[0])
    if isinstance(x, np.ndarray) and x.size == 0:
        return "quantizes an empty tensor (its scale comes from the min and max of no values)"
    return None


_UNDEFINED_ON: dict[str, Callable[[Any, dict[str, Any]], str | None]] = {
    "Cast": _cast_out_of_range, "CastLike": _cast_out_of_range, "GridSample": _grid_holds_nan,
    "MaxPool": _pool_of_nan, "DFT": _transform_of_nonfinite, "STFT": _transform_of_nonfinite,
    "DynamicQuantizeLinear": _range_of_nothing, "Pow": _power_out_of_range,
}


def tolerances(case: Case, outputs: list) -> tuple[float, float]:
    """The case's tolerances, widened to 4 units of a 16-bit float output's format: Ember's
    compiled backends compute 16-bit floats in float32 between conversions, the interpreter
    and ONNX Runtime round each op's result (and accumulate in orders of their own)."""
    halves = [float(np.finfo(o.dtype).eps) for o in outputs if isinstance(o, np.ndarray) and o.dtype.kind == "f"
              and o.dtype.itemsize == 2] + [float(ml_dtypes.finfo(o.dtype).eps) for o in outputs
                                             if isinstance(o, np.ndarray) and o.dtype.name == "bfloat16"]
    if not halves:
        return case.rtol, case.atol
    return max(case.rtol, 4 * max(halves)), max(case.atol, 4 * max(halves))


def backends_disagree(path: Path, case: Case, backend: str, mine: list, phase: Callable[[str], None]) -> str | None:
    """Where ONNX Runtime cannot vouch for a compiled backend's result, Ember's interpreter (the
    oracle) can: what differs between the two, or None (also when the interpreter refuses)."""
    if backend == "interpreter":
        return None
    phase("interpreter")
    oracle, _ = run_ember(path, case.inputs, "interpreter")
    rtol, atol = tolerances(case, mine)
    if oracle is None:
        return None
    # A Fourier transform of an infinite input: where either gives a non-finite value, NaN
    # against inf (or against a 0 that one order never sums an inf into) is the summation
    # order: a direct DFT and an FFT pair inf with -inf, and inf with 0 twiddles, differently.
    if _has_ops(path, ("DFT", "STFT")):
        mine = [_nonfinite_as(o, m) for m, o in zip(mine, oracle, strict=False)] + mine[len(oracle):]
    problem = compare(mine, oracle, rtol, atol)
    if problem is not None and order_dependent_overflow(path, case, mine, oracle):
        return None
    return None if problem is None else f"the {backend} backend differs from Ember's interpreter: {problem}"


def order_dependent_overflow(path: Path, case: Case, mine: list, theirs: list) -> str | None:
    """Why the two results may differ where they are not finite, or None: the model overflows
    float32 (ONNX's reference run in float64 is finite where its float32 run is not), and which
    partial sums overflow follows each implementation's summation order. Only where the two
    agree wherever both are finite."""
    narrow, wide = run_reference(path, case.inputs), run_reference(path, case.inputs, widen=True)
    if narrow is None or wide is None or len(narrow) != len(wide):
        return None
    overflows = any(isinstance(n, np.ndarray) and isinstance(w, np.ndarray) and n.shape == w.shape
                    and n.dtype.kind in "fc" and bool((np.isfinite(w) & ~np.isfinite(n)).any())
                    for n, w in zip(narrow, wide, strict=True))
    if not overflows:
        return None
    relaxed = [_nonfinite_as(t, m) for m, t in zip(mine, theirs, strict=False)] + mine[len(theirs):]
    if compare(relaxed, theirs, *tolerances(case, mine)) is not None:
        return None
    return ("float32 overflows in this model (ONNX's reference is finite in float64, not in float32): which "
            "sums overflow follows the summation order; the results agree wherever both are finite")


def _has_ops(path: Path, ops: tuple[str, ...]) -> bool:
    try:
        return any(n.op_type in ops for n in onnx.load(str(path), load_external_data=False).graph.node)
    except Exception:  # noqa: BLE001
        return False


def _nonfinite_as(oracle: Any, mine: Any) -> Any:
    """`mine` with the oracle's value where either is non-finite, for floats of one shape."""
    if not (isinstance(mine, np.ndarray) and isinstance(oracle, np.ndarray) and mine.dtype == oracle.dtype
            and mine.shape == oracle.shape and mine.dtype.kind in "fc"):
        return mine
    either = ~np.isfinite(mine) | ~np.isfinite(oracle)
    return np.where(either, oracle, mine) if either.any() else mine


def run_reference(path: Path, inputs: dict[str, Any], widen: bool = False) -> list | None:
    """The outputs of onnx.reference.ReferenceEvaluator, or None when it fails. widen: every
    float32 type, weight, constant and input made float64 first (see widen_model)."""
    from onnx.reference import ReferenceEvaluator

    try:
        model = onnx.load(str(path))
        names = [vi.name for vi in runtime_inputs(model.graph)]
        feeds = {n: inputs[n] for n in names if n in inputs}
        if widen:
            widen_model(model)
            feeds = {n: v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v
                     for n, v in feeds.items()}
        evaluator = ReferenceEvaluator(model)
        return [np.asarray(v) if not isinstance(v, list) else v for v in evaluator.run(None, feeds)]
    except Exception:  # noqa: BLE001
        return None


def run_ort_widened(path: Path, inputs: dict[str, Any]) -> list | None:
    """ONNX Runtime's outputs for the model and inputs widened to float64 (widen_model)."""
    try:
        model = onnx.load(str(path))
        widen_model(model)
        wide = path.with_name("model-float64.onnx")
        wide.write_bytes(model.SerializeToString())
    except Exception:  # noqa: BLE001
        return None
    return run_ort(wide, {n: v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype == np.float32 else v
                          for n, v in inputs.items()})


def widen_model(model: ModelProto) -> None:
    """float32 -> float64 everywhere in the model: value types, initializers, tensor
    attributes, Cast/CastLike/RandomX 'to'/'dtype' attributes, and GroupNormalization's
    statistics (its stash_type, float32 when absent: ONNX's function body casts to it, so a
    widened model would still overflow there; the reference's LayerNormalization and
    RMSNormalization implement float32 statistics only and are left as they are)."""
    def widen_tensor(t: TensorProto) -> None:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    for g in graphs_of(model.graph):
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type == TensorProto.FLOAT:
                vi.type.tensor_type.elem_type = TensorProto.DOUBLE
        for t in g.initializer:
            widen_tensor(t)
        for n in g.node:
            for a in n.attribute:
                if a.type == AttributeProto.TENSOR:
                    widen_tensor(a.t)
                elif a.type == AttributeProto.INT and a.name in ("to", "dtype") and a.i == TensorProto.FLOAT:
                    a.i = TensorProto.DOUBLE
            if n.op_type == "GroupNormalization" and n.domain in ("", "ai.onnx"):
                kept = [a for a in n.attribute if a.name != "stash_type"]
                del n.attribute[:]
                n.attribute.extend([*kept, helper.make_attribute("stash_type", TensorProto.DOUBLE)])


def compare_exact(outputs: list, exact: list, rtol: float, atol: float) -> bool:
    """Whether float32 `outputs` match float64 `exact` ones (compared as float32 would be)."""
    if len(outputs) != len(exact):
        return False
    narrowed = [np.asarray(e).astype(np.asarray(o).dtype) if isinstance(o, np.ndarray) and isinstance(e, np.ndarray)
                and np.asarray(e).dtype == np.float64 and o.dtype == np.float32 else e
                for o, e in zip(outputs, exact, strict=True)]
    return compare(outputs, narrowed, rtol, atol) is None

