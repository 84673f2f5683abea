"""The data layouts and sizes the C kernel library and its Python side share: the GEMM's packed
B panels, the direct convolution's phase planes and offset table, Winograd's plan, and the
scratch each needs. Each is a mirror of a C function named in its docstring, and
tests/test_c_formulas.py checks every one against the C over a grid of shapes."""
from __future__ import annotations

import math

import numpy as np

from ember.codegen.c_constants import (
    GEMM_CHUNK_BYTES,
    LINE_FLOATS,
    MAX_VECTOR_LANES,
    MR,
    NR,
    WINOGRAD4_BLOCK_BYTES,
    WINOGRAD4_WHOLE_BYTES,
    WINOGRAD_BLOCK,
)

__all__ = ["MR", "NR", "DirectLayout", "PixelRowsLayout", "Winograd4Layout", "WinogradLayout",
           "depthwise_scratch_bytes",
           "gemm_scratch_bytes", "pack_panels", "shallow_scratch_bytes"]
# Below this many multiply-adds a parallel region costs more than it saves (a region of
# Ember's pool with its workers spinning costs about a microsecond; 256K multiply-adds take a few).
PARALLEL_MIN_MACS = 1 << 18
# GEMMs and GEMVs (MatMul, FullyConnected) from 128K multiply-adds (a few microseconds). With
# libgomp's passive waiting every region woke a sleeping thread (7-20 us on a 2-core AMD EPYC
# VM) and this was 1M; Ember's pool (backends/cpu/ember_pool.c) keeps its workers spinning
# while the cores are free, and while they are not it runs short regions on the caller alone,
# so the split pays off from here (a 2-thread GRU, per step GEMVs of 262K and 524K
# multiply-adds, bench/compare.py).
GEMM_PARALLEL_MIN_MACS = 1 << 17


def pack_panels(b: np.ndarray) -> np.ndarray:
    """[K, N] -> [ceil(N/32), K, 32] zero-padded, as float32."""
    k, n = b.shape
    panels = math.ceil(n / NR)
    padded = np.zeros((k, panels * NR), np.float32)
    padded[:, :n] = b
    return np.ascontiguousarray(padded.reshape(k, panels, NR).transpose(1, 0, 2))


def pad_to_panels(vector: np.ndarray) -> np.ndarray:
    """A per-column vector (a GEMM's bias) zero-padded to whole 32-column panels, as float32:
    the tiles read a whole panel's worth."""
    padded = np.zeros(math.ceil(vector.shape[0] / NR) * NR, np.float32)
    padded[:vector.shape[0]] = vector
    return padded


def gemm_scratch_bytes(n: int, k: int, threads: int) -> int:
    """Mirror of ember_gemm_scratch_bytes in runtime/ember_gemm.c (chunks of 384 KiB)."""
    panels = math.ceil(n / NR)
    chunk = min(max(1, GEMM_CHUNK_BYTES // (max(k, 1) * NR * 4)), panels)
    return max(chunk * k * NR * 4 * threads, panels * k * NR * 4)


def threads_for(num_threads: int, macs: int, minimum: int = PARALLEL_MIN_MACS) -> int:
    return num_threads if macs >= minimum else 1


class DirectLayout:
    """Mirror of conv_plan / ember_conv_direct_offsets in runtime/ember_conv.c: phase planes
    of the padded input and the per-tap offsets the GEMM reads B through."""

    def __init__(self, channels: int, out_hw: tuple[int, int], kernel: tuple[int, int], stride: int) -> None:
        self.channels, self.kernel, self.stride = channels, kernel, stride
        self.hph = out_hw[0] + (kernel[0] - 1) // stride + 2
        self.wph = out_hw[1] + (kernel[1] - 1) // stride
        self.plane = self.hph * self.wph
        self.grid = out_hw[0] * self.wph
        self.key = f"c{channels}_{out_hw[0]}x{out_hw[1]}_k{kernel[0]}x{kernel[1]}_s{stride}"

    def scratch_bytes(self) -> int:
        return (self.stride ** 2 * self.channels * self.plane + 2 * NR) * 4

    def offsets(self) -> np.ndarray:
        s, (kh, kw) = self.stride, self.kernel
        c, u, v = np.meshgrid(np.arange(self.channels), np.arange(kh), np.arange(kw), indexing="ij")
        phase = (u % s) * s + v % s
        koff = (phase * self.channels + c) * self.plane + (u // s) * self.wph + v // s
        return koff.reshape(-1).astype(np.int32)


def shallow_scratch_bytes(channels: int, kernel: tuple[int, int], stride_w: int, out_w: int, threads: int) -> int:
    """Mirror of ember_conv_shallow_scratch_bytes in runtime/ember_conv_shallow.c: per thread, the phase
    rows of one output row (C * KH * SW rows, each the output row rounded up to whole vectors of
    the widest target plus the kernel's reach, rounded up to whole vectors again)."""
    lanes = MAX_VECTOR_LANES
    reach = math.ceil(out_w / lanes) * lanes + (kernel[1] - 1) // stride_w
    wph = math.ceil(reach / lanes) * lanes
    return channels * kernel[0] * stride_w * wph * max(threads, 1) * 4


def taps_scratch_bytes(channels: int, kernel: tuple[int, int], stride: tuple[int, int], out_hw: tuple[int, int]) -> int:
    """Mirror of ember_conv_taps_scratch_bytes in runtime/ember_conv.c: the zero-padded
    channel-last map the taps read ((OH - 1) * SH + KH by (OW - 1) * SW + KW pixels of C floats)
    and the taps' int32 offsets after it."""
    height = (out_hw[0] - 1) * stride[0] + kernel[0]
    width = (out_hw[1] - 1) * stride[1] + kernel[1]
    return height * width * channels * 4 + channels * kernel[0] * kernel[1] * 4


class PixelRowsLayout:
    """Mirror of ember_conv_rows in runtime/ember_conv.c and its caller (conv_pixel_rows): a
    convolution as Y^T = R W^T, R the im2row of the input ([pixels][KH*KW*C], tap-major), so
    the pixels are the GEMM's rows (8-row blocks) and the output channels its 32-wide columns,
    with W^T packed at compile time. Chosen where the usual orientation, pixels as columns,
    would pad them badly: 7x7 maps fill 49 of 64 columns (77%), 14x14 ones 196 of 224."""

    # The cost model, in multiply-add slots of the FMA unit: copies run about 4 floats per
    # slot of 16 multiply-adds (memcpy rates), the blocked transposes about 1.
    COPY_MACS, TRANSPOSE_MACS = 4, 16

    def __init__(self, channels: int, out_channels: int, in_hw: tuple[int, int], out_hw: tuple[int, int],
                 kernel: tuple[int, int], trivial: bool) -> None:
        self.channels, self.out_channels = channels, out_channels
        self.pixels = out_hw[0] * out_hw[1]
        self.depth = channels * kernel[0] * kernel[1]
        self.in_pixels = in_hw[0] * in_hw[1]
        self.trivial = trivial  # 1x1, stride 1, no padding: the rows are the transposed input

    def scratch_bytes(self) -> int:
        hwc = 0 if self.trivial else self.in_pixels * self.channels
        return (hwc + self.pixels * (self.depth + self.out_channels)) * 4

    def cost(self) -> int:
        """Multiply-add slots: the GEMM with its columns padded to whole panels (a partial
        row block costs in proportion to its rows), the im2row copies and both transposes."""
        gemm = math.ceil(self.out_channels / NR) * NR * self.pixels * self.depth
        copies = 0 if self.trivial else self.pixels * self.depth * self.COPY_MACS
        transposes = (self.in_pixels * self.channels + self.pixels * self.out_channels) * self.TRANSPOSE_MACS
        return gemm + copies + transposes

    def columns_cost(self, columns: int) -> int:
        """The usual orientation's GEMM (output channels as rows in 8-row blocks, `columns`
        pixel columns padded to whole panels: the direct kernel's grid is a few columns wider
        than the map)."""
        return math.ceil(self.out_channels / MR) * MR * math.ceil(columns / NR) * NR * self.depth

    def weights(self, w: np.ndarray) -> np.ndarray:
        """W [M][C][KH][KW] as W^T in tap-major rows ([KH*KW*C][M]), packed into panels."""
        m = w.shape[0]
        return pack_panels(np.ascontiguousarray(w.transpose(2, 3, 1, 0)).reshape(-1, m).astype(np.float32))


class WinogradLayout:
    """Mirror of the plan in runtime/ember_winograd.c: F(2x2, 3x3) over 2x2 output tiles,
    taken in blocks of 32 tiles, one block per thread at a time."""

    BLOCK = WINOGRAD_BLOCK
    G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])

    def __init__(self, channels: int, out_channels: int, out_hw: tuple[int, int]) -> None:
        self.channels, self.out_channels = channels, out_channels
        tiles_w = (out_hw[1] + 1) // 2
        self.tiles = (out_hw[0] + 1) // 2 * tiles_w
        self.blocks = math.ceil(self.tiles / self.BLOCK)
        self.half = math.ceil((tiles_w + 1) / LINE_FLOATS) * LINE_FLOATS

    @classmethod
    def applies(cls, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], channels: int,
                out_channels: int, out_hw: tuple[int, int]) -> bool:
        """Where it measured faster than the direct kernel: the GEMMs need some depth and
        width (32+ channels each way), and a map of at least one full block of tiles (maps
        below ~11x11 waste most of their only block, and stream 16/9 more weights)."""
        return (kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1)
                and min(channels, out_channels) >= 32 and cls(channels, out_channels, out_hw).tiles >= cls.BLOCK)

    def scratch_bytes(self, threads: int) -> int:
        planes = 16 * ((self.channels + self.out_channels) * self.BLOCK + 2 * LINE_FLOATS)
        return (planes + 8 * self.half) * max(1, min(self.blocks, threads)) * 4

    def transformed_weights(self, w: np.ndarray) -> np.ndarray:
        """U = G g G^T per (output, input) channel pair, as [16][M][C] (4x4 position major).
        Whole [M][C] planes combined by G's few nonzero entries, the same sums in the same
        order as np.einsum, 2-4x faster (256x256 channels: 11.9 -> 3.0 ms; a cached
        compile of ResNet-18 transforms ten such weights); in blocks of output channels, so
        the float64 temporaries stay a few MB."""
        out = np.empty((16, self.out_channels, self.channels), np.float32)
        block = max(1, (1 << 20) // max(1, 9 * self.channels))  # ~8 MB of float64 taps per block

        def combine(row: int, parts: np.ndarray) -> np.ndarray:
            return sum(self.G[row, k] * parts[k] for k in range(3) if self.G[row, k])

        for start in range(0, self.out_channels, block):
            part = w[start:start + block]
            taps = np.ascontiguousarray(np.moveaxis(part, (2, 3), (0, 1)), dtype=np.float64)  # [3][3][m][C]
            rows = [combine(a, taps) for a in range(4)]  # kernel rows combined: [3][m][C] each
            for index in range(16):
                out[index, start:start + len(part)] = combine(index % 4, rows[index // 4])
        return out


def _round16(n: int) -> int:
    return -(-n // 16) * 16


class Winograd4Layout:
    """Mirror of the plan in runtime/ember_winograd4.c: F(4x4, 3x3), channel-last, 4x4 output
    tiles as the GEMMs' rows (in blocks that keep the transformed tiles in L2), output
    channels as their columns; channels padded to 16 in the transformed input."""

    # F(4x4, 3x3) with interpolation points 0, 1, -1, 2, -2 (Lavin and Gray, 2016).
    G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])

    def __init__(self, channels: int, out_channels: int, out_hw: tuple[int, int], threads: int = 1) -> None:
        self.channels, self.out_channels, self.out_hw = channels, out_channels, out_hw
        self.tiles_hw = (-(-out_hw[0] // 4), -(-out_hw[1] // 4))
        self.tiles = self.tiles_hw[0] * self.tiles_hw[1]
        self.cp, self.mp = _round16(channels), _round16(out_channels)
        per_tile = 36 * (self.cp + self.mp) * 4
        # Threads split the tiles (each runs its own from input transform to output transform,
        # in its own V and O) where the transformed weights U are smaller than the map's V and O:
        # splitting each block's 36 GEMMs instead passes V and O between cores at every phase,
        # which on a 56x56 map cost more than the second core saved. Else they split the GEMMs
        # (each reading a share of U).
        u_bytes = 36 * self.cp * -(-out_channels // NR) * NR * 4
        self.tile_split = threads > 1 and self.tiles >= 2 * MR * threads and u_bytes < self.tiles * per_tile
        self.teams = threads if self.tile_split else 1
        if self.tile_split:
            share = -(-self.tiles // threads)
            most = max(MR, WINOGRAD4_BLOCK_BYTES // per_tile)
            self.block = -(-share // -(-share // most))
        elif self.tiles * per_tile <= WINOGRAD4_WHOLE_BYTES:
            self.block = self.tiles
        else:
            self.block = max(MR, WINOGRAD4_BLOCK_BYTES // per_tile // MR * MR)

    @classmethod
    def applies(cls, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int], channels: int,
                out_channels: int, out_hw: tuple[int, int]) -> bool:
        """3x3, stride 1, 32+ channels each way, and a map of 4+ tiles each way (12x12 and
        up): below that the padded edge tiles and the 36 transformed weights per channel
        pair (4x the weights, read once per block) cost more than they save."""
        return (kernel == (3, 3) and strides == (1, 1) and dilations == (1, 1)
                and min(channels, out_channels) >= 32 and min(out_hw) >= 12)

    def scratch_bytes(self) -> int:
        padded = (4 * self.tiles_hw[0] + 2) * (4 * self.tiles_hw[1] + 2) * self.cp
        transformed = self.teams * 36 * self.block * (self.cp + self.mp)
        return (padded + transformed + self.out_hw[0] * self.out_hw[1] * self.mp) * 4

    def transformed_weights(self, w: np.ndarray) -> np.ndarray:
        """U = G g G^T per (output, input) channel pair, computed in float64, as 36 sets of
        32-column panels of U[xi]^T ([36][ceil(M/32)][Cp][32]; channels past C and columns
        past M are zero). A panel of 32 output channels at a time, written in place, so the
        float64 temporaries stay a few MB (whole, a 256-channel layer's were 19 MB)."""
        panels = -(-self.out_channels // NR)
        out = np.zeros((36, panels, self.cp, NR), np.float32)
        for p in range(panels):
            part = w[p * NR:(p + 1) * NR].astype(np.float64)  # [m][C][3][3], m <= 32
            # G g G^T as two tensordots (BLAS; 8x faster than the einsum, ResNet-18's cached
            # compile spent 0.12 s in it), [a][b][C][m] after the transpose.
            gg = np.tensordot(self.G, np.tensordot(part, self.G, axes=([3], [1])), axes=([1], [2]))
            u = gg.transpose(0, 3, 2, 1).reshape(36, self.channels, len(part))
            out[:, p, :self.channels, :len(part)] = u
        return out


# Output rows at most this wide take ember_depthwise's channel-blocked path on AVX-512, if its
# padded input has at most DEPTHWISE_BLOCKED_MAX_PIXELS pixels (mirrors of DW_BLOCKED_*).
DEPTHWISE_BLOCKED_MAX_OW = 8
DEPTHWISE_BLOCKED_MAX_PIXELS = 4096


def depthwise_kernel(kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int] = (1, 1)) -> str:
    """The specialised kernel of runtime/ember_depthwise.c a depthwise convolution of these
    taps and strides passes to ember_depthwise (ember_gemm.h), as C: "NULL" where it has none
    (mirror of the library's dw_direct: strides of 1 or 2, no dilation, taps up to 8x8). The
    name also makes the build link that kernel's piece of the library, and only that."""
    (kh, kw), (sh, sw) = kernel, strides
    if dilations != (1, 1) or sh not in (1, 2) or sw not in (1, 2) or kh > 8 or kw > 8:
        return "NULL"
    taps = "3x3" if kernel == (3, 3) else "5x5" if kernel == (5, 5) else "any"
    return f"ember_dw_{taps}_s{sh}{sw}"


def depthwise_scratch_bytes(out_hw: tuple[int, int], kernel: tuple[int, int] = (1, 1),
                            strides: tuple[int, int] = (1, 1), dilations: tuple[int, int] = (1, 1),
                            threads: int = 1) -> int:
    """Mirror of ember_depthwise_scratch_bytes in runtime/ember_depthwise.c: none, or where
    output rows are narrow (the channel-blocked path, on targets with 16-lane vectors), per
    thread the padded input and the output of 16 channels. Python does not know the target's
    lanes, so it reserves the blocked path's there."""
    (oh, ow), (kh, kw), (sh, sw), (dh, dw) = out_hw, kernel, strides, dilations
    padded = ((oh - 1) * sh + (kh - 1) * dh + 1) * ((ow - 1) * sw + (kw - 1) * dw + 1)
    if ow > DEPTHWISE_BLOCKED_MAX_OW or kh * kw > 64 or padded > DEPTHWISE_BLOCKED_MAX_PIXELS:
        return 0
    return (padded + oh * ow) * 16 * 4 * max(threads, 1)
