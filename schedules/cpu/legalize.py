"""Our lowering of conv2d and matmul with constant weights: the weight is re-laid out once, at compile time, so
the innermost `lanes` output channels / columns are contiguous and a template can keep a vector of them per FMA.

Data stays NCHW / row-major and outputs keep their shapes, so nothing changes at graph level. Layout transforms
without padding are lowered as gathers, which fuse with the ops beside them. Anything we do not handle
(non-constant or non-fp32 weights, other layouts, depthwise convs with a channel multiplier) goes to TVM's own
legalization.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..analysis import DEPTHWISE_INPUT, ROLE
from .vector_math import legalize_map as vector_math_map
from .vector_math import tvm_legalization

# Rows a symbolic-M matmul is padded to a multiple of (see _matmul_compute): the row tiles it allows are its
# divisors. The padding is wasted work at small M (3 rows at M = 1); tiles of 4 rows reuse each weight vector 4x
# (docs/decisions/symbolic-shapes.md).
SYMBOLIC_ROW_BLOCK = 4

# A packed weight's column panels are padded to a multiple of this many when that adds at most 1/PANEL_WASTE of
# them, so that the register tiles of 1, 2, 3, 4, 6 and 8 vectors all divide them: 50257 columns make
# 3142 panels, whose only divisors 1 and 2 left a GEMV with two weight streams per core, at half the bandwidth of
# those with six (docs/decisions/kv-cache-decoding.md).
PANEL_GROUP = 24
PANEL_WASTE = 64


def constant_f32(expr):
    """The numpy value of a float32 relax constant, else None."""
    import tvm

    if not isinstance(expr, tvm.ir.expr.Constant):
        return None
    value = expr.value.numpy()
    return value if value.dtype == np.float32 else None


def _static_dims(dims) -> bool:
    """Every dim a constant (a symbolic batch is fine for our conv; a symbolic image size is left to TVM)."""
    return all(hasattr(d, "value") for d in dims)


def _pack_lanes(channels: int, lanes: int, minimum: int = 4) -> int:
    """Vector block for `channels` outputs: the spec's lanes when they divide it, else the widest power of two
    that does (>= minimum, below that a vector is not worth the pack)."""
    block = math.gcd(channels, lanes)
    return block if block >= minimum else 0


def _grouped_minimum(lanes: int, kernel: tuple, out_pixels: int) -> int:
    """Narrowest channel vector worth packing a grouped conv's weights for; narrower groups run unpacked, on
    pixel vectors with the weights broadcast. Half the SIMD width in general, and the full width for a 1x1 conv
    on a map of at least lanes x lanes pixels, whose pixel rows make whole vectors with room for a register
    tile. Narrower packed vectors still win on small maps and for 3x3 kernels (docs/decisions/conv-pixel-vectors.md)."""
    if tuple(kernel) == (1, 1) and out_pixels >= lanes * lanes:
        return lanes
    return max(4, lanes // 2)


def pack_conv_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """OIHW -> [O/block, I, KH, KW, block]: one vector of output channels per (ci, kh, kw)."""
    o, i, kh, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(o // block, block, i, kh, kw).transpose(0, 2, 3, 4, 1))


def pack_matmul_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """[K, N] -> [panels, K, block]: each column panel one contiguous stream; columns past N are zero. The
    panels are ceil(N/block), rounded up to a multiple of PANEL_GROUP where that adds few (see there)."""
    k, n = weight.shape
    panels = -(-n // block)
    grouped = -(-panels // PANEL_GROUP) * PANEL_GROUP
    padded = (grouped if (grouped - panels) * PANEL_WASTE <= panels else panels) * block
    if padded != n:
        weight = np.pad(weight, ((0, 0), (0, padded - n)))
    return np.ascontiguousarray(weight.reshape(k, padded // block, block).transpose(1, 0, 2))


def _out_size(padded: int, kernel: int, stride: int, dilation: int) -> int:
    """Output rows (or columns) of a conv window over `padded` input rows (or columns)."""
    return (padded - (kernel - 1) * dilation - 1) // stride + 1


def packed_conv2d(data, packed, strides, padding, dilation, groups):
    """NCHW conv2d reading a [O/V, I/groups, KH, KW, V] weight; padding is (top, left, bottom, right). The batch
    may be symbolic; the image size is static (see _conv2d)."""
    from tvm import te, topi

    n, h, w = data.shape[0], int(data.shape[2]), int(data.shape[3])
    oblocks, in_per_group, kh, kw, lanes = (int(d) for d in packed.shape)
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    out_channels = oblocks * lanes
    blocks_per_group = out_channels // groups // lanes
    if any(padding):
        data = topi.nn.pad(data, [0, 0, top, left], [0, 0, bottom, right], name="pad_temp")
    oh, ow = _out_size(h + top + bottom, kh, sh, dh), _out_size(w + left + right, kw, sw, dw)
    rc = te.reduce_axis((0, in_per_group), "rc")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")

    def body(b, o, y, x):
        # the group from the vector block (o // lanes), so splitting o by lanes leaves no div/mod on the lane
        ci = rc if groups == 1 else (o // lanes) // blocks_per_group * in_per_group + rc
        return te.sum(data[b, ci, y * sh + ry * dh, x * sw + rx * dw] * packed[o // lanes, rc, ry, rx, o % lanes],
                      axis=[rc, ry, rx])

    return te.compute((n, out_channels, oh, ow), body, name="conv2d_nchw")


def blocked_conv2d(data, weight, strides, padding, dilation, spec=None):
    """Conv2d writing blocked channels (NCHW{V}c), from blocked data with an OIHW{V}i{V}o weight
    ([O/V, I/V, KH, KW, V, V]) or from NCHW data with an OIHW{V}o weight ([O/V, I, KH, KW, V]). The iteration
    is (n, co/V, oh, ow, V | ci, kh, kw) with one input-channel axis, which the conv template splits by V on
    blocked data so each tap reads V contiguous input channels.

    With a `spec`, rows the conv template cannot tile well are computed over a few more columns
    (conv.padded_width), each extra one repeating the last real column, and cropped, as _matmul_compute pads
    rows."""
    from tvm import te, tirx, topi

    from .conv import padded_width

    blocked_in = len(data.shape) == 5
    h, w = int(data.shape[2]), int(data.shape[3])
    oblocks, kh, kw, lanes = int(weight.shape[0]), int(weight.shape[2]), int(weight.shape[3]), int(weight.shape[-1])
    in_channels = int(data.shape[1]) * (lanes if blocked_in else 1)
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    if any(padding):
        tail = [0] if blocked_in else []
        data = topi.nn.pad(data, [0, 0, top, left, *tail], [0, 0, bottom, right, *tail], name="pad_temp")
    oh, ow = _out_size(h + top + bottom, kh, sh, dh), _out_size(w + left + right, kw, sw, dw)
    width = padded_width(spec, lanes, oblocks, oh, ow, in_channels * kh * kw, blocked_in) if spec else ow
    rc = te.reduce_axis((0, in_channels), "rc")
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")

    def body(b, ob, y, x, v):
        if width != ow:
            x = tirx.min(x, ow - 1)
        y, x = y * sh + ry * dh, x * sw + rx * dw
        if blocked_in:
            tap, wt = data[b, rc // lanes, y, x, rc % lanes], weight[ob, rc // lanes, ry, rx, rc % lanes, v]
        else:
            tap, wt = data[b, rc, y, x], weight[ob, rc, ry, rx, v]
        return te.sum(tap * wt, axis=[rc, ry, rx])

    conv = te.compute((data.shape[0], oblocks, oh, width, lanes), body, name="conv2d_nchwc")
    if width == ow:
        return conv
    return te.compute((data.shape[0], oblocks, oh, ow, lanes), lambda *idx: conv[idx], name="conv2d_columns")


def _depthwise_input(read, shape, padding, dtype):
    """The padded input of a depthwise conv in channel vectors ([N, C/V, H, W, V] padded: `shape`), a stage of
    ROLE DEPTHWISE_INPUT: each tap then loads one contiguous vector of V channels. `read(b, cb, y, x, v)` is an
    element of the unpadded input."""
    from tvm import te, tirx

    top, left, bottom, right = padding
    h, w = shape[2] - top - bottom, shape[3] - left - right

    def pack(b, cb, y, x, v):
        inside = tirx.all(y >= top, y < top + h, x >= left, x < left + w)
        value = read(b, cb, tirx.max(y - top, 0), tirx.max(x - left, 0), v)
        return tirx.if_then_else(inside, value, tirx.const(0.0, dtype))

    return te.compute(shape, pack, name="data_pack", attrs={ROLE: DEPTHWISE_INPUT})


def _depthwise_taps(padded, packed, strides, dilation):
    """(output rows, output columns, tap(b, cb, y, x, v)): the sum over one channel's kernel window of the
    `padded` input (_depthwise_input) times its [C/V, 1, KH, KW, V] weight."""
    from tvm import te

    _, _, kh, kw, _ = (int(d) for d in packed.shape)
    sh, sw = strides
    dh, dw = dilation
    rc = te.reduce_axis((0, 1), "rc")  # one input channel per output: kept so every conv has (ci, kh, kw) axes
    ry = te.reduce_axis((0, kh), "ry")
    rx = te.reduce_axis((0, kw), "rx")

    def tap(b, cb, y, x, v):
        return te.sum(padded[b, cb, y * sh + ry * dh, x * sw + rx * dw, v] * packed[cb, rc, ry, rx, v],
                      axis=[rc, ry, rx])

    ph, pw = int(padded.shape[2]), int(padded.shape[3])
    return _out_size(ph, kh, sh, dh), _out_size(pw, kw, sw, dw), tap


def packed_depthwise_conv2d(data, packed, strides, padding, dilation):
    """Depthwise NCHW conv2d on a [C/V, 1, KH, KW, V] weight. The padded input is first copied into channel
    vectors (_depthwise_input) instead of gathering each tap's V channels H*W apart, and stride-2 convs vectorize
    as well as stride-1 ones (NCHW rows of 7..28 columns do not fill a 16-lane vector)."""
    from tvm import te

    n, (channels, h, w) = data.shape[0], (int(d) for d in data.shape[1:])  # a symbolic batch is fine
    lanes = int(packed.shape[-1])
    top, left, bottom, right = padding
    shape = (n, channels // lanes, h + top + bottom, w + left + right, lanes)
    padded = _depthwise_input(lambda b, cb, y, x, v: data[b, cb * lanes + v, y, x], shape, padding, data.dtype)
    oh, ow, tap = _depthwise_taps(padded, packed, strides, dilation)
    return te.compute((n, channels, oh, ow), lambda b, c, y, x: tap(b, c // lanes, y, x, c % lanes),
                      name="depthwise_conv2d_nchw")


def blocked_depthwise_conv2d(data, packed, strides, padding, dilation):
    """Depthwise conv2d from and to blocked channels (NCHW{V}c) on a [C/V, 1, KH, KW, V] weight: the padded copy
    of the input (_depthwise_input) keeps its layout."""
    from tvm import te

    n, (blocks, h, w, lanes) = data.shape[0], (int(d) for d in data.shape[1:])
    top, left, bottom, right = padding
    shape = (n, blocks, h + top + bottom, w + left + right, lanes)
    padded = _depthwise_input(lambda *idx: data[idx], shape, padding, data.dtype)
    oh, ow, tap = _depthwise_taps(padded, packed, strides, dilation)
    return te.compute((n, blocks, oh, ow, lanes), tap, name="depthwise_conv2d_nchwc")


def packed_matmul(a, packed, columns=None):
    """[..., M, K] x [ceil(N/V), K, V] -> [..., M, N], N = `columns` (default: every packed column). A weight
    zero-padded to whole vectors is computed whole and cropped, so the template tiles full vectors only."""
    nblocks, k, lanes = (int(d) for d in packed.shape)
    return _matmul_compute(a, nblocks * lanes, k, lambda j, r: packed[j // lanes, r, j % lanes], columns)


def row_padded_matmul(a, weight):
    """[..., M, K] x [K, N] -> [..., M, N] for a symbolic M whose N is no whole number of vectors (a weight not
    worth packing): the same padded rows as packed_matmul."""
    k, n = (int(d) for d in weight.shape)
    return _matmul_compute(a, n, k, lambda j, r: weight[r, j])


def _matmul_compute(a, n: int, k: int, weight_at, columns=None):
    """A matmul over `n` columns with the weight element for (column j, reduction r) at `weight_at(j, r)`,
    cropped to its first `columns` (default: all).

    A symbolic M (a batch kept symbolic) is computed over M rounded up to SYMBOLIC_ROW_BLOCK rows, the extra rows
    repeating row M - 1, and cropped: every register tile of up to that many rows is then whole, so the matmul
    template can tile rows with no predicate (which would keep its accumulators out of registers). Rows and
    columns are cropped in one stage, which the template folds into its write-back."""
    from tvm import te, tirx

    r = te.reduce_axis((0, k), "k")
    *batch, rows = a.shape[:-1]
    symbolic = not isinstance(rows, tirx.IntImm)

    def body(*idx):
        *outer, i, j = idx
        if symbolic:
            i = tirx.min(i, rows - 1)
        return te.sum(a[(*outer, i, r)] * weight_at(j, r), axis=r)

    columns = n if columns is None else columns
    if not symbolic:
        full = te.compute((*batch, rows, n), body, name="matmul")
        if columns == n:
            return full
        return te.compute((*batch, rows, columns), lambda *idx: full[idx], name="matmul_cols")
    block = SYMBOLIC_ROW_BLOCK
    padded = te.compute((*batch, (rows + block - 1) // block * block, n), body, name="matmul")
    return te.compute((*batch, rows, columns), lambda *idx: padded[idx], name="matmul_rows")


def _winograd(bb, call, geometry):
    """The blocked conv as a winograd_conv2d on its weight transformed here, or None where that does not apply
    (winograd_tile) or the weight is not a constant."""
    from tvm import relax

    from .winograd import transform_weight, winograd_conv2d, winograd_tile

    weight = constant_f32(call.args[1])
    if weight is None or weight.ndim != 6:  # NCHW input (a stem): the direct conv
        return None
    out_hw = [int(d) for d in list(call.ty.shape)[2:4]]
    tile = winograd_tile(weight.shape, geometry["strides"], geometry["dilation"], int(call.attrs.groups), out_hw)
    if not tile:
        return None
    transformed = relax.const(transform_weight(weight, tile))
    return bb.call_te(winograd_conv2d, call.args[0], transformed, padding=geometry["padding"], tile=tile,
                      primfunc_name_hint="conv2d_winograd")


def _conv2d(spec):
    lanes = spec.simd_width
    blocked = {(f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o", f"NCHW{lanes}c"),
               ("NCHW", f"OIHW{lanes}o", f"NCHW{lanes}c")}
    depthwise_blocked = (f"NCHW{lanes}c", f"OIHW{lanes}o", f"NCHW{lanes}c")  # xcomp/graph/layout.py

    def legalize(bb, call):
        from tvm import relax

        attrs = call.attrs
        geometry = {"strides": [int(s) for s in attrs.strides], "padding": [int(p) for p in attrs.padding],
                    "dilation": [int(d) for d in attrs.dilation]}
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) in blocked:  # see xcomp/graph/layout.py
            winograd = _winograd(bb, call, geometry)
            if winograd is not None:
                return winograd
            conv = functools.partial(blocked_conv2d, spec=spec)  # emit_te passes TVM values only
            return bb.call_te(conv, call.args[0], call.args[1], **geometry, primfunc_name_hint="conv2d")
        if (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == depthwise_blocked and int(attrs.groups) > 1:
            return bb.call_te(blocked_depthwise_conv2d, call.args[0], call.args[1], **geometry,
                              primfunc_name_hint="depthwise_conv2d")
        weight = constant_f32(call.args[1])
        usable = (
            weight is not None
            and (attrs.data_layout, attrs.kernel_layout, attrs.out_layout) == ("NCHW", "OIHW", "NCHW")
            and str(call.args[0].ty.dtype) == "float32"
            and _static_dims(list(call.args[0].ty.shape)[2:])
            and attrs.out_dtype in ("", "float32", None)
        )
        groups = int(attrs.groups)
        if usable and groups > 1 and weight.shape[1] == 1:
            block = _pack_lanes(weight.shape[0], lanes)
            if not block or weight.shape[0] != groups:  # a channel multiplier: not handled here
                return tvm_legalization("relax.nn.conv2d")(bb, call)
            packed = relax.const(pack_conv_weight(weight, block))
            return bb.call_te(packed_depthwise_conv2d, call.args[0], packed, **geometry,
                              primfunc_name_hint="depthwise_conv2d")
        minimum = 4
        if usable and groups > 1:
            out_pixels = math.prod(int(d) for d in list(call.ty.shape)[2:])
            minimum = _grouped_minimum(lanes, weight.shape[2:], out_pixels)
        block = _pack_lanes(weight.shape[0] // groups, lanes, minimum) if usable else 0
        if not block:
            return tvm_legalization("relax.nn.conv2d")(bb, call)
        packed = relax.const(pack_conv_weight(weight, block))
        return bb.call_te(packed_conv2d, call.args[0], packed, **geometry, groups=groups,
                          primfunc_name_hint="conv2d")

    return legalize


def _matmul(lanes):
    def legalize(bb, call):
        from tvm import relax

        weight = constant_f32(call.args[1])
        a_type = call.args[0].ty
        usable = weight is not None and weight.ndim == 2 and str(a_type.dtype) == "float32" and a_type.ndim >= 2
        columns = weight.shape[1] if usable else 0
        block = _pack_lanes(columns, lanes) if usable else 0
        if not block and columns >= lanes:  # no vector divides N (50257, 1001): pad the weight to whole ones
            block = lanes
        if not block and usable and not hasattr(a_type.shape[-2], "value"):
            return bb.call_te(row_padded_matmul, call.args[0], call.args[1], primfunc_name_hint="matmul")
        if not block:
            return tvm_legalization("relax.matmul")(bb, call)
        packed = relax.const(pack_matmul_weight(weight, block))
        return bb.call_te(packed_matmul, call.args[0], packed, columns=columns, primfunc_name_hint="matmul")

    return legalize


def gathered_layout(data, index_map):
    """`data` moved to the layout `index_map` gives it, computed over the output (each element read from its
    place in `data`), so the op is injective and fuses with its neighbours."""
    from tvm import te

    inverse = index_map.inverse(list(data.shape))
    return te.compute(index_map.map_shape(list(data.shape)), lambda *idx: data[tuple(inverse.map_indices(idx))],
                      name="layout_transform")


def _layout_transform(bb, call):
    """TVM writes a layout transform as a scatter over its input, which FuseOps takes for opaque: the blocked
    layout's transforms then ran as groups of their own beside the transposes and scalings next to them
    (convnext's to and from NHWC; docs/decisions/blocked-layout.md). Without padding the map is a bijection, so the
    gather is exact."""
    import tvm

    index_map = call.attrs.index_map
    _, padding = index_map.non_surjective_inverse(call.args[0].ty.shape)
    if not (isinstance(padding, tvm.tirx.IntImm) and not padding.value):  # the predicate of padded elements
        return tvm_legalization("relax.layout_transform")(bb, call)
    gather = functools.partial(gathered_layout, index_map=index_map)  # emit_te passes TVM values only
    return bb.call_te(gather, call.args[0], primfunc_name_hint="layout_transform")


def legalize_map(spec) -> dict:
    """customize_legalize_map for relax.transform.LegalizeOps: these, and vector_math's exp-family ops."""

    lanes = spec.simd_width
    return {**vector_math_map(), "relax.nn.conv2d": _conv2d(spec), "relax.matmul": _matmul(lanes),
            "relax.layout_transform": _layout_transform}
