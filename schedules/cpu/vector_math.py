"""exp, erf, tanh and sigmoid on float32 as polynomial expressions that vectorize.

LLVM has no vector form of libm's expf/erff/tanhf for these targets: a vectorized loop calling them makes one
scalar libm call per lane (docs/decisions/vector-math.md). Written out as arithmetic (min/max, floor, FMAs, a bit
shift, selects) they stay in vector registers.

Accuracy, float32 against float64 references (tests/test_vector_math.py checks it over dense ranges):
- exp: Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf coefficients): within 2e-7 relative;
  overflow gives inf, results below the smallest normal float (x < -87.34) flush to 0.
- erf, tanh: Eigen's float rational approximations (their published coefficients): within 1e-6 relative.
- sigmoid: 1 / (1 + exp(-x)).
NaN stays NaN; +-inf give the limits.

`legalize_map()` lowers the Relax ops that call them (exp, erf, tanh, sigmoid, GELU, SiLU, softmax and
log-softmax) with these expressions, so schedules, the tuner's measurements and the built model all see the same
arithmetic. Other ops that call exp (ELU, softplus, ...) keep TVM's lowering: correct, one libm call per element.
"""

from __future__ import annotations

from ..analysis import ROLE, ROW_PARTIALS
from .common import MATERIALIZE

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693359375  # ln 2 split in two: n * _LN2_HI is exact for the n that occur
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_EXP_MAX = 88.72283935546875  # above: inf
_EXP_MIN = -87.33654022216797  # below: smaller than the smallest normal float, flushed to 0

_ERF_NUM = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
            -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_DEN = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
            -1.42647390514189e-02)
_TANH_NUM = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
             1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def _const(value):
    from tvm import tirx

    return tirx.const(value, "float32")


def _horner(x, coefficients):
    """c0 x^n + c1 x^(n-1) + ... + cn."""
    acc = _const(coefficients[0])
    for c in coefficients[1:]:
        acc = acc * x + _const(c)
    return acc


def _bind(x, body):
    """body(v) with v bound to x by a Let: body uses its argument several times, and an argument inlined from a
    fused producer would otherwise be copied into each use (exponentially many copies along a chain)."""
    from tvm import tirx

    if isinstance(x, (tirx.Var, tirx.FloatImm)):
        return body(x)
    var = tirx.Var("v", "float32")
    return tirx.Let(var, x, body(var))


def _keep_nan(x, value):
    from tvm import tirx

    return tirx.Select(tirx.isnan(x), x, value)


def _power_of_two(exponent):
    """2.0 ** exponent for an int32 exponent in [-126, 127], built from its float32 bits."""
    from tvm import tirx

    bits = tirx.shift_left(exponent + tirx.const(127, "int32"), tirx.const(23, "int32"))
    return tirx.reinterpret("float32", bits)


def fast_exp(x):
    return _bind(x, _fast_exp)


def _exp_reduced(clamped):
    """(n, p) with exp(clamped) = 2^n * p: n the nearest integer to clamped / ln 2, p the polynomial of the rest."""
    from tvm import tirx

    n = tirx.floor(clamped * _const(_LOG2E) + _const(0.5))
    r = clamped - n * _const(_LN2_HI) - n * _const(_LN2_LO)
    return n, _horner(r, _EXP_POLY) * r * r + r + _const(1.0)


def _fast_exp(x):
    from tvm import tirx

    clamped = tirx.max(tirx.min(x, _const(_EXP_MAX)), _const(_EXP_MIN))
    n, poly = _exp_reduced(clamped)
    # 2^n from float bits, as 2^a * 2^(n-a) with a = n / 2: n runs from -126 to 128, past what one float's
    # exponent field holds at both ends
    whole = tirx.Cast("int32", n)
    half = tirx.shift_right(whole, tirx.const(1, "int32"))
    value = poly * _power_of_two(half) * _power_of_two(whole - half)
    value = tirx.Select(x < _const(_EXP_MIN), _const(0.0), value)
    value = tirx.Select(x > _const(_EXP_MAX), _const(float("inf")), value)
    return _keep_nan(x, value)


def _exp_of_nonpositive(x):
    """exp(x) for x <= 0 (softmax's x - max), in a quarter fewer operations than fast_exp: no overflow to handle,
    and 2^n for n in [-126, 0] is one float's exponent field. Below -87.34 it flushes to 0, as fast_exp does, so a
    row masked whole (all -inf) sums to 0 and comes out NaN, as in onnxruntime."""
    from tvm import tirx

    n, poly = _exp_reduced(tirx.max(x, _const(_EXP_MIN)))
    value = tirx.Select(x < _const(_EXP_MIN), _const(0.0), poly * _power_of_two(tirx.Cast("int32", n)))
    return _keep_nan(x, value)


def fast_erf(x):
    return _bind(x, _fast_erf)


def _fast_erf(x):
    from tvm import tirx

    clamped = tirx.max(tirx.min(x, _const(4.0)), _const(-4.0))  # erf is +-1 in float32 beyond
    x2 = clamped * clamped
    return _keep_nan(x, clamped * _horner(x2, _ERF_NUM) / _horner(x2, _ERF_DEN))


def fast_tanh(x):
    return _bind(x, _fast_tanh)


def _fast_tanh(x):
    from tvm import tirx

    clamped = tirx.max(tirx.min(x, _const(9.0)), _const(-9.0))  # tanh is +-1 in float32 beyond
    x2 = clamped * clamped
    value = clamped * _horner(x2, _TANH_NUM) / _horner(x2, _TANH_DEN)
    # near 0 tanh(x) rounds to x
    return _keep_nan(x, tirx.Select(tirx.abs(x) < _const(0.0004), x, value))


def fast_sigmoid(x):
    return _const(1.0) / (_const(1.0) + fast_exp(-x))


# -- legalization: the Relax ops whose TVM lowering calls these functions ------------------------------------


def tvm_legalization(op_name):
    """TVM's own lowering of a Relax op, for the calls our lowering leaves to it."""
    import tvm

    return tvm.ir.Op.get(op_name).get_attr("FLegalize")


def _float32_only(lower):
    """A legalization running lower(bb, call) on a float32 input; other dtypes keep TVM's lowering."""

    def legalize(bb, call):
        if str(call.args[0].ty.dtype) != "float32":
            return tvm_legalization(call.op.name)(bb, call)
        return lower(bb, call)

    return legalize


def _elementwise(name, expr):
    """Legalize a unary op as `expr(x)` per element."""

    def lower(bb, call):
        from tvm import te

        return bb.call_te(lambda t: te.compute(t.shape, lambda *i: _bind(t(*i), expr), name=f"T_{name}"),
                          call.args[0], primfunc_name_hint=name)

    return _float32_only(lower)


def _gelu(x):
    return x * (_const(0.5) + fast_erf(x * _const(0.5 ** 0.5)) * _const(0.5))


def _gelu_tanh(x):
    inner = _const((2.0 / 3.141592653589793) ** 0.5) * x * (_const(1.0) + _const(0.044715) * x * x)
    return _const(0.5) * x * (_const(1.0) + fast_tanh(inner))


# Lanes of the partial maxima and sums of a softmax row: one 512-bit vector, two 256-bit ones.
ROW_LANES = 16


def _row_reduce(x, axis: int, reduce, name: str):
    """`reduce` (te.max or te.sum) of x over `axis`, keepdims. Along the innermost axis it is taken in ROW_LANES
    partials (element j into lane j % ROW_LANES) plus the row's tail past the last whole group of lanes: the
    partials vectorize whatever the row's length, static or symbolic, where one reduction over the row would run
    element by element (schedules/cpu/common.py vectorizes a reduction only over whole vectors). A symbolic
    length gets loops that never run empty, their extra steps reading the identity: a reduction's first value is
    stored by its first step, which an empty loop would skip."""
    from tvm import te, tirx, topi

    if axis != len(x.shape) - 1:
        return (topi.max if reduce is te.max else topi.sum)(x, axis=axis, keepdims=True)
    *rows, n = x.shape
    static = isinstance(n, tirx.IntImm)
    whole = n // ROW_LANES
    identity = tirx.min_value("float32") if reduce is te.max else _const(0.0)
    combine = tirx.max if reduce is te.max else (lambda a, b: a + b)
    parts = []
    if not static or int(whole) > 0:
        groups = te.reduce_axis((0, whole if static else tirx.max(whole, 1)), name="k")

        def lane_value(i):
            value = x(*i[:-2], groups * ROW_LANES + i[-1])
            return value if static else tirx.if_then_else(groups < whole, value, identity)

        lanes = te.compute((*rows, 1, ROW_LANES), lambda *i: reduce(lane_value(i), axis=groups),
                           name=f"{name}_lanes", attrs={ROLE: ROW_PARTIALS})
        lane = te.reduce_axis((0, ROW_LANES), name="lane")
        parts.append(te.compute((*rows, 1), lambda *i: reduce(lanes(*i, lane), axis=lane), name=f"{name}_across"))
    if not static or int(n) % ROW_LANES:
        rest = n - whole * ROW_LANES
        tail = te.reduce_axis((0, rest if static else tirx.max(rest, 1)), name="t")

        def tail_value(i):
            value = x(*i[:-1], whole * ROW_LANES + tail)
            return value if static else tirx.if_then_else(tail < rest, value, identity)

        parts.append(te.compute((*rows, 1), lambda *i: reduce(tail_value(i), axis=tail), name=f"{name}_tail"))
    if len(parts) == 1:
        return parts[0]
    across, rest = parts
    return te.compute((*rows, 1), lambda *i: combine(across(*i), rest(*i)), name=name)


def _row_index(axis):
    """The index of the reduced (keepdims) value of a row reduction over `axis` for element idx."""
    return lambda idx: [0 if n == axis else v for n, v in enumerate(idx)]


def softmax_stages(x, axis: int):
    """softmax's stages over one axis of x: (the row's max, the exponentials of the differences, their sum)."""
    from tvm import te

    row = _row_index(axis)
    peak = _row_reduce(x, axis, te.max, "T_softmax_max")
    # computed once and stored: inlined, the exp would be evaluated again for the division (and as scalar
    # code inside the sum's reduction loop)
    exps = te.compute(x.shape, lambda *i: _bind(x(*i) - peak(*row(i)), _exp_of_nonpositive),
                      name="T_softmax_exp", attrs={MATERIALIZE: 1})
    return peak, exps, _row_reduce(exps, axis, te.sum, "T_softmax_sum")


def softmax_inverse(total):
    """1 / a row's sum, once per row: a vector division per element took a quarter of the row's time."""
    from tvm import te

    return te.compute(total.shape, lambda *i: _const(1.0) / total(*i), name="T_softmax_inverse",
                      attrs={MATERIALIZE: 1})


def _softmax(log: bool):
    """softmax / log_softmax over one axis: max, exp of the difference, sum, then multiply by the sum's inverse
    (or subtract its log)."""

    def compute(x, axis):
        from tvm import te, tirx

        axis = axis % len(x.shape)
        row = _row_index(axis)
        peak, exps, total = softmax_stages(x, axis)
        if log:
            return te.compute(x.shape, lambda *i: x(*i) - peak(*row(i)) - tirx.log(total(*row(i))),
                              name="T_log_softmax_norm")
        inverse = softmax_inverse(total)
        return te.compute(x.shape, lambda *i: exps(*i) * inverse(*row(i)), name="T_softmax_norm")

    def lower(bb, call):
        return bb.call_te(compute, call.args[0], int(call.attrs.axis),
                          primfunc_name_hint="log_softmax" if log else "softmax")

    return _float32_only(lower)


def legalize_map() -> dict:
    return {
        "relax.exp": _elementwise("exp", fast_exp),
        "relax.erf": _elementwise("erf", fast_erf),
        "relax.tanh": _elementwise("tanh", fast_tanh),
        "relax.sigmoid": _elementwise("sigmoid", fast_sigmoid),
        "relax.nn.gelu": _elementwise("gelu", _gelu),
        "relax.nn.gelu_tanh": _elementwise("gelu_tanh", _gelu_tanh),
        "relax.nn.silu": _elementwise("silu", lambda x: x * fast_sigmoid(x)),
        "relax.nn.softmax": _softmax(log=False),
        "relax.nn.log_softmax": _softmax(log=True),
    }


__all__ = ["fast_exp", "fast_erf", "fast_tanh", "fast_sigmoid", "legalize_map"]
