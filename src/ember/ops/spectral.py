"""Spectral ops: DFT (forward or inverse, full or one-sided, along one signal axis) and STFT
(windowed DFTs of frames of a signal). Signals are real [..., 1] or complex [..., 2] (real,
imaginary) tensors, as ONNX represents them. Computed with NumPy's FFT in float64."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.ops.registry import OpDef, OpError, define_op
from ember.ops.shape_util import require_float


def _complex(x: np.ndarray) -> np.ndarray:
    xf = x.astype(np.float64)
    return xf[..., 0] if x.shape[-1] == 1 else xf[..., 0] + 1j * xf[..., 1]


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([np.real(z), np.imag(z)], axis=-1)


@dataclass(frozen=True)
class DFTAttrs:
    """axis: the signal axis (never the last, which holds the real/imaginary parts); length:
    the DFT length (the input is cut or zero-padded to it)."""

    axis: int
    length: int
    inverse: bool = False
    onesided: bool = False


def _dft_infer(attrs: DFTAttrs, types):
    (x,) = types
    require_float(x, "DFT")
    if x.rank < 2 or x.shape[-1] not in (1, 2) or not 0 <= attrs.axis < x.rank - 1 or attrs.length < 1:
        raise OpError(f"DFT needs a [..., 1 or 2] signal and a signal axis before the last, got {x} and "
                      f"axis {attrs.axis}")
    shape = list(x.shape)
    if attrs.inverse and attrs.onesided:
        shape[attrs.axis], shape[-1] = attrs.length, 1
    else:
        shape[attrs.axis] = attrs.length // 2 + 1 if attrs.onesided else attrs.length
        shape[-1] = 2
    return (x.with_shape(tuple(shape)),)


def _dft(attrs: DFTAttrs, arrays):
    (x,) = arrays
    z = _complex(x)
    if attrs.inverse and attrs.onesided:
        out: np.ndarray = np.fft.irfft(z, n=attrs.length, axis=attrs.axis)[..., None]
    elif attrs.inverse:
        out = _pairs(np.fft.ifft(z, n=attrs.length, axis=attrs.axis))
    else:
        out = np.fft.fft(z, n=attrs.length, axis=attrs.axis)
        if attrs.onesided:
            out = np.take(out, range(attrs.length // 2 + 1), axis=attrs.axis)
        out = _pairs(out)
    return (out.astype(x.dtype),)


define_op(OpDef("DFT", ("x",), ("y",), _dft_infer, _dft, attrs=DFTAttrs))


@dataclass(frozen=True)
class STFTAttrs:
    frame_step: int
    frame_length: int
    onesided: bool = True


def _stft_infer(attrs: STFTAttrs, types):
    x, window = types
    require_float(x, "STFT")
    if x.rank != 3 or x.shape[-1] not in (1, 2) or attrs.frame_step < 1 or not 0 < attrs.frame_length <= x.shape[1]:
        raise OpError(f"STFT needs a [batch, length, 1 or 2] signal longer than the frame, got {x} "
                      f"and frame {attrs.frame_length}")
    if window is not None and window.shape != (attrs.frame_length,):
        raise OpError(f"STFT window {window} must have the frame length {attrs.frame_length}")
    frames = (x.shape[1] - attrs.frame_length) // attrs.frame_step + 1
    bins = attrs.frame_length // 2 + 1 if attrs.onesided else attrs.frame_length
    return (x.with_shape((x.shape[0], frames, bins, 2)),)


def _stft(attrs: STFTAttrs, arrays):
    x, window = arrays
    z = _complex(x)
    frames = (x.shape[1] - attrs.frame_length) // attrs.frame_step + 1
    starts = np.arange(frames) * attrs.frame_step
    framed = z[:, starts[:, None] + np.arange(attrs.frame_length)[None, :]]  # [batch, frames, length]
    if window is not None:
        framed = framed * window.astype(np.float64)
    spectrum = np.fft.fft(framed, axis=-1)
    if attrs.onesided:
        spectrum = spectrum[..., :attrs.frame_length // 2 + 1]
    return (_pairs(spectrum).astype(x.dtype),)


define_op(OpDef("STFT", ("signal", "window?"), ("y",), _stft_infer, _stft, attrs=STFTAttrs))

__all__ = ["DFTAttrs", "STFTAttrs"]
