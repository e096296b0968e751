"""Our own ONNX op converters, for ops TVM's Relax importer lacks or gets wrong.

`CONVERTERS` maps an ONNX op type (default domain) to `convert(bb, inputs, attrs, opset, stock) -> relax.Expr`,
with the importer's calling convention: `inputs` is the node's inputs as Relax expressions (None for an omitted
optional input; constants for initializers), `attrs` its attributes as TVM parses them (strings as bytes), and
`stock(inputs=None)` runs TVM's own converter for the node (for fixes that amend its inputs or its result).
The importer (frontends/onnx.py) asks this table first, so an entry here also overrides TVM's converter.
A converter raises ValueError / NotImplementedError for a node it cannot take; the importer turns that into an
UnsupportedOpError naming the node and op. `attrs["tvm_custom"]["xcomp"]` is a NodeContext: the ONNX node
being converted, and a way to make the module check a condition at run time.

One module per family: recurrent (LSTM, GRU, RNN), gather, shape_ops (Reshape, Slice, Unsqueeze, ...), vision
(Resize, Upsample, NonMaxSuppression, Col2Im), normalization, math_ops, losses, quantized, spectral (DFT, STFT),
text (TfIdfVectorizer), attention (Attention, RotaryEmbedding, TensorScatter, CausalConvWithState),
separable_resize (Resize's fallback); common holds NodeContext and the helpers they share.
"""

from __future__ import annotations

from .attention import (convert_attention, convert_causal_conv_with_state, convert_rotary_embedding,
                        convert_tensor_scatter)
from .common import NodeContext
from .gather import convert_gather
from .losses import convert_nll_loss, convert_softmax_cross_entropy
from .math_ops import (convert_bit_cast, convert_bit_shift, convert_celu, convert_clip, convert_cum_prod, convert_elu,
                       convert_is_inf, convert_mod, convert_pow, convert_prelu, convert_swiglu, convert_swish,
                       reduce_extreme)
from .normalization import convert_batch_norm, convert_layer_norm, convert_lp_normalization, convert_rms_norm
from .quantized import convert_qlinear_matmul
from .recurrent import convert_gru, convert_lstm, convert_rnn
from .spectral import convert_dft, convert_stft
from .shape_ops import (convert_center_crop_pad, convert_conv_transpose, convert_expand, convert_eye_like,
                        convert_range,
                        convert_reshape, convert_reverse_sequence, convert_sequence_insert, convert_slice,
                        convert_space_to_depth, convert_split, convert_unsqueeze)
from .text import convert_tfidf_vectorizer
from .vision import convert_col2im, convert_non_max_suppression, convert_resize, convert_upsample

CONVERTERS = {
    "LSTM": convert_lstm,
    "GRU": convert_gru,
    "RNN": convert_rnn,
    "Gather": convert_gather,
    "Reshape": convert_reshape,
    "Range": convert_range,
    "Slice": convert_slice,
    "Split": convert_split,
    "Unsqueeze": convert_unsqueeze,
    "Expand": convert_expand,
    "CenterCropPad": convert_center_crop_pad,
    "ConvTranspose": convert_conv_transpose,
    "SequenceInsert": convert_sequence_insert,
    "Resize": convert_resize,
    "Upsample": convert_upsample,
    "NonMaxSuppression": convert_non_max_suppression,
    "LayerNormalization": convert_layer_norm,
    "BatchNormalization": convert_batch_norm,
    "PRelu": convert_prelu,
    "IsInf": convert_is_inf,
    "Celu": convert_celu,
    "Elu": convert_elu,
    "Mod": convert_mod,
    "RMSNormalization": convert_rms_norm,
    "Clip": convert_clip,
    "Pow": convert_pow,
    "ReduceMax": reduce_extreme("max"),
    "ReduceMin": reduce_extreme("min"),
    "NegativeLogLikelihoodLoss": convert_nll_loss,
    "SoftmaxCrossEntropyLoss": convert_softmax_cross_entropy,
    "QLinearMatMul": convert_qlinear_matmul,
    "LpNormalization": convert_lp_normalization,
    "Col2Im": convert_col2im,
    "DFT": convert_dft,
    "STFT": convert_stft,
    "TfIdfVectorizer": convert_tfidf_vectorizer,
    "SpaceToDepth": convert_space_to_depth,
    "ReverseSequence": convert_reverse_sequence,
    "EyeLike": convert_eye_like,
    "BitShift": convert_bit_shift,
    # the ops opsets 23..28 brought (TVM's "Attention" is com.microsoft's, another op)
    "Attention": convert_attention,
    "RotaryEmbedding": convert_rotary_embedding,
    "TensorScatter": convert_tensor_scatter,
    "Swish": convert_swish,
    "SwiGLU": convert_swiglu,
    "CumProd": convert_cum_prod,
    "BitCast": convert_bit_cast,
    "CausalConvWithState": convert_causal_conv_with_state,
}

__all__ = ["CONVERTERS", "NodeContext"]
