"""The ONNX opsets xcomp imports, and what it does with each op version opsets 23..28 brought.

TVM's importer converts an op with its `_impl_vN` of the largest N at or below the model's opset, and our
converters (frontends/converters/) see the opset too; so an op version that only widened the types an op takes
converts as the version before it did, and a type TVM cannot hold (float4, float8e8m0, int2) fails on the node
that uses it, by name. Each version that changed what an op computes is converted by one of our converters, or
refused here by name. `REVIEWED` lists every op version of opsets 23..MAX_OPSET with what was found; the tests
check it against the installed onnx, so a newer onnx (a new opset) is a review to do, not a silent acceptance.
"""

from __future__ import annotations

MIN_OPSET = 1
# Opsets 7..21 are what we promise; older ones import where TVM has a converter for them (the shipped pytorch-*
# test sets are opset 6); opset 22 widened type constraints only; 23..28 are reviewed op by op below.
MAX_OPSET = 28

TYPES = "types only: converted as the version before"
CONVERTED = "converted by xcomp (frontends/converters/)"
FUNCTION = "no change to what it computes (a function body, or documentation)"

# {(op, version): (verdict, what changed)}; a verdict other than TYPES / CONVERTED / FUNCTION is a refusal, and
# its text is the reason the error gives.
REVIEWED = {
    **{(op, version): (TYPES, "float4e2m1 (23), float8e8m0 (24), int2 / uint2 (25)")
       for op in ("Constant", "ConstantOfShape", "Flatten", "Identity", "If", "Loop", "Pad", "Reshape", "Scan",
                  "Shape", "Size", "Squeeze", "Transpose", "Unsqueeze")
       for version in (23, 24, 25)},
    **{(op, version): (TYPES, "float4e2m1 (23), float8e8m0 (24), int2 / uint2 (25), float6 (28); round_mode (24) "
                               "rounds to float8e8m0 only, a type xcomp does not hold")
       for op in ("Cast", "CastLike") for version in (23, 24, 25, 28) if (op, version) != ("CastLike", 28)},
    ("QuantizeLinear", 23): (TYPES, "y_scale may differ from x in type; `precision` sets the division's type "
                                    "(TVM's converter refuses a node that sets it)"),
    **{("QuantizeLinear", v): (TYPES, "float8e8m0 scales (24), int2 / uint2 (25), float6 (28)") for v in (24, 25, 28)},
    ("DequantizeLinear", 23): (TYPES, "`output_dtype` sets the output type (TVM's converter reads it)"),
    **{("DequantizeLinear", v): (TYPES, "float8e8m0 scales (24), int2 / uint2 (25), float6 (28)")
       for v in (24, 25, 28)},
    ("TopK", 24): (TYPES, "bfloat16"),
    ("SplitToSequence", 24): (TYPES, "bfloat16"),
    **{(op, 28): (TYPES, "bfloat16 (and float16 / double for Celu)")
       for op in ("Celu", "Compress", "Einsum", "OneHot", "ReverseSequence", "Unique")},
    **{(op, 28): (TYPES, "integer types dropped; the float semantics are unchanged")
       for op in ("ReduceLogSum", "ReduceLogSumExp")},
    **{(op, 28): (TYPES, "bfloat16, float4 / float6 / float8 / int2 / int4 inside optionals")
       for op in ("Optional", "OptionalGetElement", "OptionalHasElement")},
    ("DepthToSpace", 28): (FUNCTION, "a function body; same schema and semantics"),
    ("Mod", 28): (FUNCTION, "fmod=0 allowed on floats (floor modulo, as TVM's floor_mod computes) with the "
                            "special cases spelled out"),
    ("BitShift", 28): (CONVERTED, "signed types: arithmetic right shift, wrapping left shift, and a shift by a "
                                  "negative amount or the width or more defined"),
    ("SpaceToDepth", 28): (CONVERTED, "`mode` DCR / CRD"),
    ("Range", 27): (CONVERTED, "float16 / bfloat16, counted in `stash_type`"),
    ("Attention", 23): (CONVERTED, "new op"),
    ("Attention", 24): (CONVERTED, "nonpad_kv_seqlen input; causal frontier offset by the cache"),
    ("Attention", 25): (CONVERTED, "left_window_size / right_window_size"),
    ("RMSNormalization", 23): (CONVERTED, "new op (TVM's converter)"),
    ("RotaryEmbedding", 23): (CONVERTED, "new op"),
    ("TensorScatter", 24): (CONVERTED, "new op"),
    ("Swish", 24): (CONVERTED, "new op"),
    ("SwiGLU", 28): (CONVERTED, "new op"),
    ("CumProd", 26): (CONVERTED, "new op"),
    ("BitCast", 26): (CONVERTED, "new op"),
    ("CausalConvWithState", 27): (CONVERTED, "new op"),
    ("LinearAttention", 27): ("a recurrence over the sequence with four update rules (linear, gated, delta, "
                              "gated delta) that xcomp has no converter for", "new op"),
}

_NOT_REFUSED = (TYPES, CONVERTED, FUNCTION)


def refusal(op_type: str, opset: int) -> str | None:
    """Why xcomp refuses a default-domain `op_type` node at `opset`, or None: the reason of the op version that
    `opset` selects, when the review refused it."""
    import onnx

    try:
        version = onnx.defs.get_schema(op_type, opset).since_version
    except Exception:  # an op onnx does not know: the unsupported-op check names it
        return None
    verdict, _ = REVIEWED.get((op_type, version), (None, None))
    return None if verdict is None or verdict in _NOT_REFUSED else verdict
