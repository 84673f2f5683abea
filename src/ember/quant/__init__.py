"""Layer 5: post-training quantization: profile a float graph on calibration inputs
(profile.py), calibrate scales and insert QuantizeLinear/DequantizeLinear around Conv, MatMul
and Gemm (quantize.py). The optimizer's fold-qdq pass (transforms/) then forms the integer ops.

May import graph/, ops/, types and support/: not transforms/, lowering/ or partition/."""
from ember.quant.profile import CalibrationError, Profile, ProfileError, check_calibration, graph_hash, profile_graph
from ember.quant.quantize import METHODS, QUANTIZABLE, activation_range, int8_per_channel, quantize_graph, uint8_params

__all__ = ["METHODS", "QUANTIZABLE", "CalibrationError", "Profile", "ProfileError", "activation_range",
           "check_calibration", "graph_hash", "int8_per_channel", "profile_graph", "quantize_graph",
           "uint8_params"]

