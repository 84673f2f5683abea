"""Layer 5: post-training quantization: profile a float graph on calibration inputs
(profile.py), choose ranges (calibrate.py: minmax, percentile, entropy) and scales (schemas.py:
asymmetric, symmetric, symmetric-uint8, power2), insert QuantizeLinear/DequantizeLinear around
Conv, MatMul and Gemm (quantize.py); calibration files (data.py) and the accuracy report of a
quantized model against float (report.py). The optimizer's fold-qdq pass (transforms/) then
forms the integer ops.

May import graph/, ops/, types and support/: not transforms/, lowering/ or partition/."""
from ember.quant.calibrate import METHODS, activation_range, entropy_bins
from ember.quant.data import load_calibration, split_held_out
from ember.quant.profile import (
    CalibrationError,
    Profile,
    ProfileError,
    check_calibration,
    check_options,
    graph_hash,
    profile_graph,
)
from ember.quant.quantize import QUANTIZABLE, int8_per_channel, quantize_graph, uint8_params
from ember.quant.report import AccuracyReport, OutputAccuracy, accuracy_report, compare_outputs, cosine
from ember.quant.schemas import SCHEMAS, Schema, get_schema

__all__ = ["METHODS", "QUANTIZABLE", "SCHEMAS", "AccuracyReport", "CalibrationError", "OutputAccuracy", "Profile",
           "ProfileError", "Schema", "accuracy_report", "activation_range", "check_calibration", "check_options",
           "compare_outputs", "cosine", "entropy_bins", "get_schema", "graph_hash", "int8_per_channel",
           "load_calibration", "profile_graph", "quantize_graph", "split_held_out", "uint8_params"]
