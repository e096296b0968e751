"""DFT and STFT (TVM's importer has neither), as matmuls with constant cosine and sine matrices.

A signal is [..., n, ..., 1 or 2] with real and imaginary parts in the last axis; its DFT along one axis is
re = xr @ A + xi @ B and im = xr @ C + xi @ D for constant n x bins matrices, which also carry the zero-padding or
truncation to dft_length, the inverse's 1/L, and the one-sided spectra (bins 0..L/2 of a real signal forward, a
Hermitian spectrum rebuilt from them inverse). A DFT of length L costs L multiply-adds per bin: fine for the
frame lengths of audio front ends, not an FFT for long signals.
"""

from __future__ import annotations

import numpy as np

from .common import const_value, dtype_of, relax_api, static_dim


def _matrices(n, length, inverse, onesided):
    """(A, B, C, D) for input length n (the last axis once moved there) and dft length L, and whether the output
    is real only (an inverse one-sided DFT)."""
    if inverse and onesided:  # n bins of a Hermitian spectrum -> L real samples
        bins = np.arange(min(n, length // 2 + 1))[:, None]
        t = np.arange(length)[None, :]
        angle = 2 * np.pi * bins * t / length
        # every bin but DC and Nyquist stands for itself and its mirror image
        weight = np.where((bins == 0) | (2 * bins == length), 1.0, 2.0) / length
        a, b = np.zeros((n, length)), np.zeros((n, length))
        a[:len(bins)] = weight * np.cos(angle)
        b[:len(bins)] = -weight * np.sin(angle)
        return (a, b, None, None), True
    count = length // 2 + 1 if onesided else length
    j = np.arange(min(n, length))[:, None]  # samples past L are truncated, missing ones are zeros
    angle = 2 * np.pi * j * np.arange(count)[None, :] / length
    cos, sin = np.zeros((n, count)), np.zeros((n, count))
    cos[:len(j)], sin[:len(j)] = np.cos(angle), np.sin(angle)
    if inverse:  # (xr + i xi)(cos + i sin) / L
        return (cos / length, -sin / length, sin / length, cos / length), False
    return (cos, sin, -sin, cos), False  # (xr + i xi)(cos - i sin)


def dft(signal, axis, length, inverse, onesided):
    """The DFT of `signal` (static extent along `axis`) as ONNX defines it: [..., bins, ..., 2], or [..., 1]."""
    relax = relax_api()
    dtype = dtype_of(signal)
    rank = signal.ty.ndim
    axis = axis % rank
    if axis == rank - 1:
        raise ValueError("DFT along the last axis, which holds the real and imaginary parts")
    n = static_dim(signal, axis, f"the DFT axis ({axis})", "its cosine and sine matrices are built at import")
    length = length or (2 * (n - 1) if inverse and onesided else n)
    (a, b, c, d), real_output = _matrices(n, length, inverse, onesided)
    parts = static_dim(signal, rank - 1, "the last axis", "it must hold 1 (real) or 2 (complex) parts")
    if parts not in (1, 2):
        raise ValueError(f"DFT input's last axis has {parts} entries, not 1 (real) or 2 (real, imaginary)")
    perm = [i for i in range(rank - 1) if i != axis] + [axis]  # the transformed axis last, parts dropped
    back = [perm.index(i) for i in range(rank - 1)]
    components = [relax.op.permute_dims(relax.op.take(signal, relax.const(p, "int64"), axis=rank - 1), perm)
                  for p in range(parts)]

    def combine(*matrices):
        terms = [relax.op.matmul(x, relax.const(m.astype(dtype), dtype))
                 for x, m in zip(components, matrices) if m is not None]
        total = terms[0] if len(terms) == 1 else relax.op.add(terms[0], terms[1])
        return relax.op.expand_dims(relax.op.permute_dims(total, back), rank - 1)

    if real_output:
        return combine(a, b)
    return relax.op.concat([combine(a, b), combine(c, d)], axis=rank - 1)


def convert_dft(bb, inputs, attrs, opset, stock):  # noqa: ARG001 - no TVM converter to fall back on
    """DFT (opset 17: axis an attribute; 20: an input). dft_length and axis must be constants."""
    length, axis = None, attrs.get("axis", 1)
    if len(inputs) > 1 and inputs[1] is not None:
        value = const_value(inputs[1])
        if value is None:
            raise ValueError("DFT with a dft_length computed at run time (the DFT matrices are built at import)")
        length = int(value)
    if opset >= 20:
        axis = -2
        if len(inputs) > 2 and inputs[2] is not None:
            value = const_value(inputs[2])
            if value is None:
                raise ValueError("DFT with an axis computed at run time")
            axis = int(value)
    return dft(inputs[0], axis, length, bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0)))


def convert_stft(bb, inputs, attrs, opset, stock):  # noqa: ARG001 - no TVM converter to fall back on
    """STFT: frames of frame_length every frame_step samples, times the window, each one DFT'd."""
    relax = relax_api()
    signal, step, window, frame_length = (list(inputs) + [None] * 4)[:4]
    step = const_value(step) if step is not None else None
    if step is None:
        raise ValueError("STFT with a frame_step computed at run time")
    window_value = const_value(window) if window is not None else None
    if window is not None and window_value is None:
        length = static_dim(window, 0, "the STFT window's length", "frames are cut at import")
    elif window_value is not None:
        length = len(window_value)
    else:
        value = const_value(frame_length) if frame_length is not None else None
        if value is None:
            raise ValueError("STFT needs a window or a constant frame_length")
        length = int(value)
    samples = static_dim(signal, 1, "the STFT signal's length", "frames are cut at import")
    step = int(step)
    count = 1 + (samples - length) // step
    if count < 1:
        raise ValueError(f"STFT frame_length {length} is longer than the signal ({samples} samples)")
    starts = np.arange(count)[:, None] * step + np.arange(length)[None, :]
    frames = relax.op.take(signal, relax.const(starts.astype(np.int64), "int64"), axis=1)  # [batch, F, L, parts]
    if window is not None:
        frames = relax.op.multiply(frames, relax.op.reshape(window, [1, 1, length, 1]))
    return dft(bb.normalize(frames), 2, length, inverse=False, onesided=bool(attrs.get("onesided", 1)))
