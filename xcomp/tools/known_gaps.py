"""Conformance cases that onnxruntime passes and xcomp does not, each with its reason.

The bar (issue 6 for opsets 7..21, issue 30 for every opset the installed onnx knows) is every case onnxruntime
passes, "except those listed with a reason": this is that list. The harness marks a listed case that fails as a
known gap and one that passes as fixed (take it off the list), so the list can only shrink silently in the right
direction; a failure not listed here is unexplained.
"""

from __future__ import annotations

STRING_TENSORS = ("string tensors: a compiled module holds numeric tensors only (TVM's tensors, like DLPack, have "
                  "no string dtype), so string ops and string inputs are refused by name")
SEQUENCE_IO = ("a sequence or optional as a graph input or output: a module's signature is a fixed list of tensors "
               "(sequences inside the graph are supported when their length is known at import)")
EMPTY_INPUT = ("a graph input with a zero-sized dim: input shapes bound at compile time must be positive (the "
               "case feeds an empty tensor to a SplitToSequence whose split needs a static shape)")

ML_DOMAIN = ("an ai.onnx.ml op (classical ML: tree ensembles, label encoders, binarizers): neither TVM nor xcomp "
             "converts that domain, and the node is refused by name")
NOT_CONVERTED = "{op}: {why}; the node is refused by name"
FLOAT16_ROUNDING = ("float16 arithmetic in float16 throughout (the _expanded graph's MatMul and Softmax): a unit in "
                    "the last place off the reference, over the case's tolerance; xcomp's Attention node computes "
                    "16-bit floats in float32 and passes")
STACK_ALLOCATION = ("the _expanded graph builds a kernel that TVM's CPU code generator refuses (a stack allocation "
                    "of a size it cannot see); the RotaryEmbedding node itself converts and passes")
ZERO_SIZED_RESHAPE = ("a zero-sized input reshaped by a shape given at run time: the output dims are symbolic, and "
                      "xcomp refuses a Reshape whose element count it cannot prove equal for every size")

KNOWN_GAPS = {
    **dict.fromkeys([
        "test_equal_string", "test_equal_string_broadcast",
        "test_regex_full_match_basic", "test_regex_full_match_email_domain", "test_regex_full_match_empty",
        "test_string_concat", "test_string_concat_broadcasting", "test_string_concat_empty_string",
        "test_string_concat_utf8", "test_string_concat_zero_dimensional",
        "test_string_split_basic", "test_string_split_consecutive_delimiters",
        "test_string_split_empty_string_delimiter", "test_string_split_empty_tensor", "test_string_split_maxsplit",
        "test_string_split_no_delimiter",
        "test_strnormalizer_export_monday_casesensintive_nochangecase", "test_strnormalizer_nostopwords_nochangecase",
        "test_strnorm_model_monday_casesensintive_nochangecase", "test_strnorm_model_nostopwords_nochangecase",
    ], STRING_TENSORS),
    **dict.fromkeys([
        "test_identity_opt", "test_if_opt", "test_if_seq",
        "test_sequence_map_add_1_sequence_1_tensor", "test_sequence_map_add_1_sequence_1_tensor_expanded",
        "test_sequence_map_extract_shapes", "test_sequence_map_extract_shapes_expanded",
        "test_sequence_map_identity_1_sequence", "test_sequence_map_identity_1_sequence_expanded",
        "test_identity_sequence", "test_split_to_sequence_1", "test_split_to_sequence_nokeepdims",
    ], SEQUENCE_IO),
    "test_sequence_model8": EMPTY_INPUT,
    "test_reshape_allowzero_reordered": ZERO_SIZED_RESHAPE,
    **dict.fromkeys([
        "test_ai_onnx_ml_array_feature_extractor", "test_ai_onnx_ml_binarizer",
        "test_ai_onnx_ml_label_encoder_string_int", "test_ai_onnx_ml_label_encoder_string_int_no_default",
        "test_ai_onnx_ml_label_encoder_tensor_mapping", "test_ai_onnx_ml_label_encoder_tensor_value_only_mapping",
        "test_ai_onnx_ml_tree_ensemble_single_tree", "test_ai_onnx_ml_tree_ensemble_set_membership",
    ], ML_DOMAIN),
    **dict.fromkeys(["test_det_2d", "test_det_nd"], NOT_CONVERTED.format(
        op="Det", why="a determinant needs an LU factorization, which Relax has no op for")),
    **dict.fromkeys([
        "test_basic_deform_conv_with_padding", "test_basic_deform_conv_without_padding",
        "test_deform_conv_with_mask_bias", "test_deform_conv_with_multiple_offset_groups",
    ], NOT_CONVERTED.format(op="DeformConv", why="a convolution sampling its input at learned offsets, which "
                                                 "neither TVM nor xcomp converts")),
    **dict.fromkeys(["test_maxpool_with_argmax_2d_precomputed_pads", "test_maxpool_with_argmax_2d_precomputed_strides"],
                    NOT_CONVERTED.format(op="MaxPool with its Indices output", why="TVM's converter computes the "
                                         "values only, and the import refuses a node whose second output it lacks")),
    **dict.fromkeys([
        "test_linear_attention_linear", "test_linear_attention_gated", "test_linear_attention_gated_per_head_decay",
        "test_linear_attention_delta", "test_linear_attention_gated_delta",
        "test_linear_attention_gated_delta_beta_scalar", "test_linear_attention_gated_delta_gqa",
        "test_linear_attention_gated_delta_mqa", "test_linear_attention_decode_step",
        "test_linear_attention_prefill_with_past", "test_linear_attention_no_past_explicit_zeros",
        "test_linear_attention_explicit_scale", "test_linear_attention_fp16", "test_linear_attention_linear_t1_no_past",
    ], NOT_CONVERTED.format(op="LinearAttention (opset 27)", why="a recurrence over the sequence with four update "
                                                                 "rules that xcomp has no converter for (its "
                                                                 "_expanded graph, in plain ops, passes)")),
    **dict.fromkeys([
        "test_attention_4d_fp16_expanded", "test_attention_4d_gqa_with_past_and_present_fp16_expanded",
        "test_attention_4d_causal_fp16_expanded",
    ], FLOAT16_ROUNDING),
    **dict.fromkeys([
        "test_rotary_embedding_expanded", "test_rotary_embedding_3d_input_expanded",
        "test_rotary_embedding_interleaved_expanded", "test_rotary_embedding_no_position_ids_expanded",
        "test_rotary_embedding_no_position_ids_interleaved_expanded",
    ], STACK_ALLOCATION),
}


def known_gap(case_name: str) -> str | None:
    """The reason xcomp does not pass this case, or None when it should."""
    return KNOWN_GAPS.get(case_name)


__all__ = ["KNOWN_GAPS", "known_gap"]
