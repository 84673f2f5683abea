"""Converters for the ai.onnx.ml domain (classical machine learning, as scikit-learn models
exported with skl2onnx use it), built from existing ops: Scaler (Sub, Mul), Normalizer
(reductions), Binarizer (Greater, Where), Imputer (Equal or IsNaN, Where), ArrayFeatureExtractor
(Gather), OneHotEncoder and numeric LabelEncoder (Equal against the categories, ArgMax,
Gather, Where), LinearRegressor and LinearClassifier (Gemm, the post transform, ArgMax and
Gather of the labels). The tree ensembles are in ml_trees.py (one TreeEnsemble op, compiled
natively); `post_transform` and `class_labels` here are shared with them.

Semantics follow ONNX Runtime, the runtime these models are exported for, including its
float32 arithmetic (inputs are cast to float where it casts them) and its binary-classifier
conventions. What Ember cannot represent is refused naming the node and the reason: string
tensors (string labels, string categories), and ZipMap's sequences of maps (export
classifiers with skl2onnx's option zipmap=False)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx.defs

from ember.frontends.onnx.context import NodeContext
from ember.frontends.onnx.registry import converter
from ember.graph.ir import Value
from ember.ops.elementwise import CastAttrs
from ember.ops.nn import GemmAttrs
from ember.ops.normalization import SoftmaxAttrs
from ember.ops.reduce import ArgReduceAttrs, ReduceAttrs
from ember.ops.tensor import AxisAttrs
from ember.support.errors import ModelImportError, UnsupportedError
from ember.types import DType

ML_DOMAIN = "ai.onnx.ml"
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")  # TreeEnsemble-5's enum order
_NUMERIC_IN = (DType.FLOAT32, DType.FLOAT64, DType.INT32, DType.INT64)


def check_attributes(ctx: NodeContext) -> None:
    """Unknown attributes are refused, never ignored (the default-domain importer checks
    against ONNX's schemas; for this domain, the newest schema of the op)."""
    try:
        schema = onnx.defs.get_schema(ctx.op_type, 1 << 20, ML_DOMAIN)
    except onnx.defs.SchemaError:
        return
    unknown = sorted({a.name for a in ctx.node.attribute} - set(schema.attributes))
    if unknown:
        raise ModelImportError(f"unknown attribute{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                               f"({ML_DOMAIN}.{ctx.op_type} has: {', '.join(sorted(schema.attributes))})")


def numeric_input(ctx: NodeContext, i: int = 0, what: str = "X") -> Value:
    x = ctx.require(i, what)
    if x.type.dtype not in _NUMERIC_IN:
        raise UnsupportedError(f"input {i} ({what}) is {x.type.dtype}; {ML_DOMAIN}.{ctx.op_type} takes "
                               f"{', '.join(str(d) for d in _NUMERIC_IN)}")
    return x


def as_float(ctx: NodeContext, x: Value, dtype: DType = DType.FLOAT32) -> Value:
    return x if x.type.dtype is dtype else ctx.emit1("Cast", [x], CastAttrs(dtype))


def as_matrix(ctx: NodeContext, x: Value) -> Value:
    """[N, C] as ONNX Runtime reads this domain's inputs: a vector is one row; rank 3+ refused."""
    if x.type.rank == 2:
        return x
    if x.type.rank == 1:
        return ctx.reshape(x, (1, x.type.shape[0]))
    raise UnsupportedError(f"input of shape {list(x.type.shape)}: {ML_DOMAIN}.{ctx.op_type} takes [N, C] or [C]")


def const(ctx: NodeContext, values: float | Sequence[float] | np.ndarray, dtype: DType, name: str) -> Value:
    return ctx.add_constant(np.asarray(values, dtype=dtype.numpy), f"{ctx.name}_{name}")


def per_feature(ctx: NodeContext, values: Sequence[float], features: int, what: str) -> np.ndarray:
    """An attribute that holds one value for all features or one per feature."""
    if len(values) not in (1, features):
        raise ModelImportError(f"attribute '{what}' has {len(values)} values; the input has {features} features "
                               "(one value, or one per feature)")
    return np.asarray(values)


def post_transform_name(ctx: NodeContext, default: str = "NONE") -> str:
    name = ctx.attr_str("post_transform", default)
    if name not in POST_TRANSFORMS:
        raise ModelImportError(f"post_transform '{name}' is not one of {', '.join(POST_TRANSFORMS)}")
    return name


def post_transform(ctx: NodeContext, scores: Value, name: str) -> Value:
    """scores [N, K] through ONNX Runtime's post transform, on the last axis."""
    dtype = scores.type.dtype
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return ctx.emit1("Sigmoid", [scores])
    if name == "SOFTMAX":
        return ctx.emit1("Softmax", [scores], SoftmaxAttrs(-1))
    if name == "SOFTMAX_ZERO":
        # exp(v - max) where |v| > 1e-7, v * exp(-max) elsewhere (about 0), over the sum of the former.
        reduce = ReduceAttrs((scores.type.rank - 1,), True)
        peak = ctx.emit1("ReduceMax", [scores], reduce)
        mask = ctx.emit1("Greater", [ctx.emit1("Abs", [scores]), const(ctx, 1e-7, dtype, "tiny")])
        shifted = ctx.emit1("Exp", [ctx.emit1("Sub", [scores, peak])])
        small = ctx.emit1("Mul", [scores, ctx.emit1("Exp", [ctx.emit1("Neg", [peak])])])
        zero = const(ctx, 0.0, dtype, "zero")
        total = ctx.emit1("ReduceSum", [ctx.emit1("Where", [mask, shifted, zero])], reduce)
        return ctx.emit1("Div", [ctx.emit1("Where", [mask, shifted, small]), total])
    return probit(ctx, scores)


def probit(ctx: NodeContext, p: Value) -> Value:
    """ONNX Runtime's probit: sqrt(2) * erfinv(2p - 1) with erfinv by Winitzki's approximation
    (a = 0.147), the formula ml_common.h evaluates, in the same order."""
    dtype = p.type.dtype

    def c(value: float, name: str) -> Value:
        return const(ctx, value, dtype, name)

    x = ctx.emit1("Sub", [ctx.emit1("Mul", [p, c(2.0, "two")]), c(1.0, "one")])
    sign = ctx.emit1("Where", [ctx.emit1("Less", [x, c(0.0, "zero")]), c(-1.0, "minus_one"), c(1.0, "plus_one")])
    t = ctx.emit1("Mul", [ctx.emit1("Sub", [c(1.0, "one"), x]), ctx.emit1("Add", [c(1.0, "one"), x])])
    log = ctx.emit1("Log", [t])
    # The constants as C computes them in float: 2 / (3.14159f * 0.147f) and 1 / 0.147f.
    f32 = np.float32
    v = ctx.emit1("Add", [c(float(f32(2) / (f32(3.14159) * f32(0.147))), "v0"),
                          ctx.emit1("Mul", [c(0.5, "half"), log])])
    v2 = ctx.emit1("Mul", [c(float(f32(1) / f32(0.147)), "inv_a"), log])
    v3 = ctx.emit1("Sub", [ctx.emit1("Sqrt", [ctx.emit1("Sub", [ctx.emit1("Mul", [v, v]), v2])]), v])
    root = ctx.emit1("Mul", [sign, ctx.emit1("Sqrt", [v3])])
    return ctx.emit1("Mul", [c(1.41421356, "sqrt2"), root])


def class_labels(ctx: NodeContext, ints: str, strings: str) -> np.ndarray | None:
    """The int64 class labels, or None when the labels are strings (usable only while the
    label output is unused: Ember has no string tensors)."""
    labels = ctx.attr_ints(ints, None)
    names = ctx.attr_strs(strings, None)
    if labels and names:
        raise ModelImportError(f"both '{ints}' and '{strings}' are set; one of them names the classes")
    if names:
        if ctx.output_used(0):
            raise UnsupportedError(f"string class labels ('{strings}'): Ember has no string tensors, and the label "
                                   "output is used (train on integer labels, or use only the scores output)")
        return None
    return np.asarray(labels or (), np.int64)


def pick_labels(ctx: NodeContext, labels: np.ndarray | None, scores: Value) -> Value | None:
    """labels[argmax(scores, axis 1)] (the first maximum, as ONNX Runtime's strict '>' scan)."""
    if labels is None:
        return None
    index = ctx.emit1("ArgMax", [scores], ArgReduceAttrs(1, False, False))
    return ctx.result("Gather", [const(ctx, labels, DType.INT64, "labels"), index], AxisAttrs(0))[0]


def threshold_labels(ctx: NodeContext, labels: np.ndarray | None, score: Value, threshold: float) -> Value | None:
    """labels[1] where score > threshold, else labels[0] (score [N, 1] or [N])."""
    if labels is None:
        return None
    if labels.size != 2:
        raise UnsupportedError(f"a binary classifier needs two class labels, got {labels.size}")
    flat = ctx.reshape(score, (score.type.shape[0],))
    above = ctx.emit1("Greater", [flat, const(ctx, threshold, score.type.dtype, "threshold")])
    return ctx.result("Where", [above, const(ctx, labels[1], DType.INT64, "positive"),
                                const(ctx, labels[0], DType.INT64, "negative")])[0]


# preprocessing --------------------------------------------------------------------------


@converter("Scaler", domain=ML_DOMAIN)
def scaler(ctx: NodeContext) -> Value:
    """Y = (float(X) - offset) * scale, per feature (the last axis) or one value for all."""
    check_attributes(ctx)
    x = as_float(ctx, numeric_input(ctx))
    features = x.type.shape[-1] if x.type.rank else 1
    offset = per_feature(ctx, ctx.attr_floats("offset", None) or (0.0,), features, "offset")
    scale = per_feature(ctx, ctx.attr_floats("scale", None) or (1.0,), features, "scale")
    y = ctx.emit1("Sub", [x, const(ctx, offset, DType.FLOAT32, "offset")]) if np.any(offset != 0) else x
    return ctx.result("Mul", [y, const(ctx, scale, DType.FLOAT32, "scale")])[0]


@converter("Normalizer", domain=ML_DOMAIN)
def normalizer(ctx: NodeContext) -> Value:
    """Each row over its MAX (the largest value, not magnitude), L1 or L2 norm in float; a row
    whose norm is 0 is copied unchanged (ONNX Runtime's rule)."""
    check_attributes(ctx)
    norm = ctx.attr_str("norm", "MAX")
    x = numeric_input(ctx)
    if x.type.rank not in (1, 2):
        raise UnsupportedError(f"input of shape {list(x.type.shape)}: Normalizer takes [N, C] or [C]")
    xf = as_float(ctx, x)
    reduce = ReduceAttrs((x.type.rank - 1,), True)
    zero = const(ctx, 0.0, DType.FLOAT32, "zero")
    if norm == "MAX":
        z = ctx.emit1("ReduceMax", [xf], reduce)
        scaled = ctx.emit1("Div", [xf, z])
    elif norm == "L1":
        z = ctx.emit1("ReduceSum", [ctx.emit1("Abs", [xf])], reduce)
        scaled = ctx.emit1("Div", [xf, z])
    elif norm == "L2":
        z = ctx.emit1("ReduceSum", [ctx.emit1("Mul", [xf, xf])], reduce)
        scaled = ctx.emit1("Div", [xf, ctx.emit1("Sqrt", [z])])
    else:
        raise ModelImportError(f"norm '{norm}' is not one of MAX, L1, L2")
    return ctx.result("Where", [ctx.emit1("Equal", [z, zero]), xf, scaled])[0]


@converter("Binarizer", domain=ML_DOMAIN)
def binarizer(ctx: NodeContext) -> Value:
    """1 where X > threshold, else 0, in X's type (NaN gives 0: ONNX Runtime refuses it)."""
    check_attributes(ctx)
    x = numeric_input(ctx)
    dtype = x.type.dtype
    threshold = ctx.attr_float("threshold", 0.0)
    above = ctx.emit1("Greater", [x, const(ctx, threshold, dtype, "threshold")])
    return ctx.result("Where", [above, const(ctx, 1, dtype, "one"), const(ctx, 0, dtype, "zero")])[0]


@converter("Imputer", domain=ML_DOMAIN)
def imputer(ctx: NodeContext) -> Value:
    """Values equal to the replaced value (NaN: any NaN) become the imputed value of their
    feature (or the one imputed value)."""
    check_attributes(ctx)
    x = numeric_input(ctx)
    floats = ctx.attr_floats("imputed_value_floats", None)
    ints = ctx.attr_ints("imputed_value_int64s", None)
    if bool(floats) == bool(ints):
        raise ModelImportError("exactly one of 'imputed_value_floats' and 'imputed_value_int64s' must be set")
    if floats:
        if not x.type.dtype.is_float:
            raise ModelImportError(f"imputed_value_floats needs a float input, got {x.type.dtype}")
        imputed: Sequence[float] = floats
        replaced: float = ctx.attr_float("replaced_value_float", 0.0)
    else:
        if x.type.dtype not in (DType.INT32, DType.INT64):
            raise ModelImportError(f"imputed_value_int64s needs an integer input, got {x.type.dtype}")
        imputed, replaced = ints or (), float(ctx.attr_int("replaced_value_int64", 0))
    features = x.type.shape[-1] if x.type.rank else 1
    values = const(ctx, per_feature(ctx, imputed, features, "imputed_value"), x.type.dtype, "imputed")
    if isinstance(replaced, float) and np.isnan(replaced):
        match = ctx.emit1("IsNaN", [x])
    else:
        match = ctx.emit1("Equal", [x, const(ctx, replaced, x.type.dtype, "replaced")])
    return ctx.result("Where", [match, values, x])[0]


@converter("ArrayFeatureExtractor", domain=ML_DOMAIN)
def array_feature_extractor(ctx: NodeContext) -> Value:
    """X[..., Y]: the features Y (int64 indices) of the last axis; a vector X gives [1, k]."""
    check_attributes(ctx)
    x, indices = ctx.require(0, "X"), ctx.require(1, "Y")
    if indices.type.dtype is not DType.INT64:
        raise ModelImportError(f"indices Y must be int64, got {indices.type.dtype}")
    if x.type.rank == 0:
        raise ModelImportError("X must have at least one dimension")
    if ctx.is_constant(1):
        data = ctx.constant(1).reshape(-1)
        size = x.type.shape[-1]
        if np.any((data < 0) | (data >= size)):  # ONNX Runtime refuses negative indices too
            raise ModelImportError(f"indices {data.tolist()} are out of range for the last axis of X ({size})")
    flat = ctx.reshape(indices, (indices.type.size,))
    taken = ctx.emit1("Gather", [x, flat], AxisAttrs(x.type.rank - 1))
    shape = (1, indices.type.size) if x.type.rank == 1 else x.type.shape[:-1] + (indices.type.size,)
    return ctx.reshape(taken, shape, final=True)


def _lookup(ctx: NodeContext, x: Value, keys: np.ndarray, values: np.ndarray, default: np.ndarray) -> Value:
    """values[i] where x == keys[i] (the first such i; NaN keys match NaN), default elsewhere."""
    column = ctx.reshape(x, x.type.shape + (1,))
    keyset = ctx.add_constant(keys.astype(x.type.dtype.numpy), f"{ctx.name}_keys")
    match = ctx.emit1("Equal", [column, keyset])
    if keys.dtype.kind == "f" and np.any(np.isnan(keys)):
        nan_key = ctx.add_constant(np.isnan(keys), f"{ctx.name}_nan_keys")
        match = ctx.emit1("Or", [match, ctx.emit1("And", [ctx.emit1("IsNaN", [column]), nan_key])])
    hits = ctx.emit1("Cast", [match], CastAttrs(DType.INT32))
    axis = x.type.rank
    index = ctx.emit1("ArgMax", [hits], ArgReduceAttrs(axis, False, False))
    found = ctx.emit1("Cast", [ctx.emit1("ReduceMax", [hits], ReduceAttrs((axis,), False))], CastAttrs(DType.BOOL))
    looked_up = ctx.emit1("Gather", [ctx.add_constant(values, f"{ctx.name}_values"), index], AxisAttrs(0))
    return ctx.result("Where", [found, looked_up, ctx.add_constant(default.reshape(()), f"{ctx.name}_default")])[0]


_LABEL_KEYS = {"keys_floats": np.float32, "keys_int64s": np.int64}
_LABEL_VALUES = {"values_floats": (np.float32, "default_float", -0.0), "values_int64s": (np.int64, "default_int64", -1)}


@converter("LabelEncoder", domain=ML_DOMAIN)
def label_encoder(ctx: NodeContext) -> Value:
    """A map from numeric keys to numeric values (keys_floats / keys_int64s / keys_tensor to
    values_floats / values_int64s / values_tensor, with the matching default). A NaN key
    matches a NaN input, as the specification says (ONNX Runtime does so from ai.onnx.ml
    opset 4 on, not at opset 2). String keys or values are refused: Ember has no string
    tensors."""
    check_attributes(ctx)
    if ctx.has_attr("classes_strings") or ctx.has_attr("keys_strings") or ctx.has_attr("values_strings"):
        raise UnsupportedError("string keys or values: Ember has no string tensors (numeric LabelEncoders only)")
    x = ctx.require(0, "X")
    keys = ctx.attr_tensor("keys_tensor", None)
    for name, dtype in _LABEL_KEYS.items():
        if ctx.has_attr(name):
            if keys is not None:
                raise ModelImportError("more than one keys_* attribute is set")
            keys = np.asarray(ctx.attr_floats(name) if dtype is np.float32 else ctx.attr_ints(name), dtype)
    values = ctx.attr_tensor("values_tensor", None)
    default = ctx.attr_tensor("default_tensor", None)
    for name, (dtype, default_name, fallback) in _LABEL_VALUES.items():
        if ctx.has_attr(name):
            if values is not None:
                raise ModelImportError("more than one values_* attribute is set")
            values = np.asarray(ctx.attr_floats(name) if dtype is np.float32 else ctx.attr_ints(name), dtype)
            if default is None:
                given = ctx.attr_float(default_name, fallback) if dtype is np.float32 else \
                    ctx.attr_int(default_name, int(fallback))
                default = np.asarray(given, dtype)
    if keys is None or values is None:
        raise ModelImportError("needs numeric keys and values (keys_floats/keys_int64s/keys_tensor and "
                               "values_floats/values_int64s/values_tensor)")
    if keys.dtype.kind not in "iuf" or values.dtype.kind not in "iuf":
        raise UnsupportedError(f"keys of type {keys.dtype} and values of type {values.dtype}: numeric only "
                               "(Ember has no string tensors)")
    keys, values = keys.reshape(-1), values.reshape(-1)
    if keys.size != values.size:
        raise ModelImportError(f"{keys.size} keys but {values.size} values")
    if x.type.dtype.numpy != keys.dtype:
        raise ModelImportError(f"input X is {x.type.dtype} but the keys are {keys.dtype}")
    if default is None:  # the tensor form without default_tensor: ONNX's defaults by value type
        default = np.asarray(-0.0 if values.dtype.kind == "f" else -1, values.dtype)
    default = np.asarray(default, values.dtype).reshape(-1)
    if default.size != 1:
        raise ModelImportError(f"the default value must be one value, got {default.size}")
    if keys.size == 0:
        return ctx.filled_result(x.type.shape, default)
    return _lookup(ctx, x, keys, values, default)


@converter("OneHotEncoder", domain=ML_DOMAIN)
def one_hot_encoder(ctx: NodeContext) -> Value:
    """[..., len(cats)] floats: 1 where the (integer-truncated) input equals the category.
    An unknown category gives a row of zeros; with zeros=0 ONNX Runtime fails the run
    instead, which Ember cannot (it gives the zeros)."""
    check_attributes(ctx)
    if ctx.has_attr("cats_strings"):
        raise UnsupportedError("string categories (cats_strings): Ember has no string tensors")
    cats = ctx.attr_ints("cats_int64s", None)
    if not cats:
        raise ModelImportError("needs the categories (cats_int64s)")
    ctx.attr_bool("zeros", True)
    x = numeric_input(ctx)
    xi = x if x.type.dtype is DType.INT64 else ctx.emit1("Cast", [x], CastAttrs(DType.INT64))
    column = ctx.reshape(xi, xi.type.shape + (1,))
    match = ctx.emit1("Equal", [column, const(ctx, cats, DType.INT64, "cats")])
    return ctx.result("Cast", [match], CastAttrs(DType.FLOAT32))[0]


@converter("ZipMap", domain=ML_DOMAIN)
def zip_map(ctx: NodeContext) -> Value:
    raise UnsupportedError("ZipMap outputs a sequence of maps (class label -> probability), and Ember has only "
                           "tensors: export the classifier without it, e.g. skl2onnx.to_onnx(model, X, "
                           "options={'zipmap': False}), and read the probabilities as one [N, classes] tensor")


# linear models ---------------------------------------------------------------------------


def _linear_scores(ctx: NodeContext, targets: int | None) -> tuple[Value, int]:
    """float(X) @ coefficients^T + intercepts: [N, targets]."""
    x = as_matrix(ctx, as_float(ctx, numeric_input(ctx)))
    features = x.type.shape[1]
    coefficients = np.asarray(ctx.attr_floats("coefficients"), np.float32)
    intercepts = ctx.attr_floats("intercepts", None)
    if targets is None:
        targets = len(intercepts) if intercepts else (coefficients.size // features if features else 0)
    if targets < 1 or coefficients.size != targets * features:
        raise ModelImportError(f"{coefficients.size} coefficients do not make {targets} rows of the input's "
                               f"{features} features")
    weights = ctx.add_constant(coefficients.reshape(targets, features), f"{ctx.name}_coefficients")
    bias = None
    if intercepts:
        if len(intercepts) != targets:
            if ctx.op_type == "LinearClassifier":
                raise ModelImportError(f"{len(intercepts)} intercepts for {targets} classes")
        else:  # ONNX Runtime's LinearRegressor ignores intercepts of any other length
            bias = const(ctx, intercepts, DType.FLOAT32, "intercepts")
    return ctx.emit1("Gemm", [x, weights, bias], GemmAttrs(transB=True)), targets


@converter("LinearRegressor", domain=ML_DOMAIN)
def linear_regressor(ctx: NodeContext) -> Value:
    check_attributes(ctx)
    scores, targets = _linear_scores(ctx, ctx.attr_int("targets", 1))
    name = post_transform_name(ctx)
    if targets == 1 and name != "PROBIT":
        name = "NONE"  # ONNX Runtime applies only PROBIT to a single target
    return post_transform(ctx, scores, name)


@converter("LinearClassifier", domain=ML_DOMAIN)
def linear_classifier(ctx: NodeContext) -> list[Value | None]:
    """Labels by the raw scores' argmax; scores through the post transform. One coefficient
    row with two labels is the binary form: the label is labels[1] where the score s is > 0,
    and the scores [1 - p, p] with p = sigmoid(s) for LOGISTIC, else p = s untransformed
    (ONNX Runtime's rule; PROBIT, which it writes into one column of two, is refused)."""
    check_attributes(ctx)
    labels = class_labels(ctx, "classlabels_ints", "classlabels_strings")
    ctx.attr_int("multi_class", 0)  # ignored, as ONNX Runtime ignores it
    scores, classes = _linear_scores(ctx, None)
    name = post_transform_name(ctx)
    if classes == 1:
        n_labels = len(ctx.attr_ints("classlabels_ints", None) or ctx.attr_strs("classlabels_strings", None) or ())
        label = None
        if labels is not None:
            label = threshold_labels(ctx, labels if n_labels == 2 else np.asarray([0, 1], np.int64), scores, 0.0)
        if n_labels == 2 and name == "PROBIT":
            raise UnsupportedError("a binary LinearClassifier (one coefficient row, two labels) with PROBIT: ONNX "
                                   "Runtime writes one probit score into a two-column output")
        if n_labels == 2:  # [1 - p, p], p the score (its sigmoid with LOGISTIC; no other transform)
            p = ctx.emit1("Sigmoid", [scores]) if name == "LOGISTIC" else scores
            pair = [ctx.emit1("Sub", [const(ctx, 1.0, DType.FLOAT32, "one"), p]), p]
            return [label, ctx.emit1("Concat", pair, AxisAttrs(1))]
        return [label, post_transform(ctx, scores, name)]
    return [pick_labels(ctx, labels, scores), post_transform(ctx, scores, name)]
