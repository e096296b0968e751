"""Generate the "models users bring" corpus in tests/models/: tiny PyTorch models exported with torch.onnx.

Needs torch==2.13.0 (CPU wheel: `pip install torch==2.13.0`; never an unpinned torch) and, for the opset-18
exports through the torch.export-based exporter (torch's default since 2.9), onnxscript==0.7.2. The tests do
not need torch: they read the committed .onnx files and .npz data.

    python tools/make_user_models.py            # rewrite tests/models/*.onnx and *.npz
    python tools/make_user_models.py --check    # only report what would change

For every model and opset this writes
- `tests/models/<model>_op<opset>.onnx` (legacy TorchScript exporter for opsets 13..17, `dynamo=True` at 18),
  with symbolic batch (and sequence) dims, as users export them;
- `tests/models/<model>_op<opset>.npz`: the inputs (`in:<name>`), torch's outputs (`out:<i>`) and the shapes
  the tests bind (`shape:<name>`).

Everything is seeded; weights are randomised (BatchNorm statistics included) so no op is an identity, and every
model stays well under 2 MB of weights.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, os.pardir, "tests", "models")
TORCH_VERSION = "2.13.0"
SEED = 0


def _torch():
    import logging

    import torch

    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)  # "no torchvision"

    if not torch.__version__.startswith(TORCH_VERSION):
        sys.exit(f"tools/make_user_models.py needs torch=={TORCH_VERSION}, found {torch.__version__}")
    return torch


def build_models():
    """{name: (module factory, example-input factory, input names, output names, dynamic dims)}."""
    torch = _torch()
    nn, F = torch.nn, torch.nn.functional

    class EinsumAttention(nn.Module):
        """Multi-head self-attention written with einsum, a key-padding mask through Where."""

        def __init__(self, d, heads, causal=False):
            super().__init__()
            self.h, self.dk, self.causal = heads, d // heads, causal
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)

        def forward(self, x, key_mask=None):
            b, s, d = x.shape
            q, k, v = self.qkv(x).reshape(b, s, 3, self.h, self.dk).unbind(2)
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.dk)
            if key_mask is not None:  # [b, s] bool, True = keep; expanded over heads and queries
                keep = key_mask[:, None, None, :].expand(b, self.h, s, s)
                scores = torch.where(keep, scores, torch.full_like(scores, -1e4))
            if self.causal:
                causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~causal, float("-inf"))
            attn = scores.softmax(-1)
            ctx = torch.einsum("bhqk,bkhd->bqhd", attn, v).reshape(b, s, d)
            return self.out(ctx)

    class EncoderLayer(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.attn = EinsumAttention(d, heads)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.ff1, self.ff2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x, key_mask):
            x = self.ln1(x + self.attn(x, key_mask))
            return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))  # exact GELU: Erf below opset 20

    class TinyEncoder(nn.Module):
        """BERT-like: token + position embeddings (Gather with runtime int64 ids), 2 post-LN layers, a pooler."""

        def __init__(self, vocab=200, d=32, heads=4, ff=64, layers=2, max_len=64):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(max_len, d)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList(EncoderLayer(d, heads, ff) for _ in range(layers))
            self.pool = nn.Linear(d, d)

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            positions = torch.arange(s, device=input_ids.device).unsqueeze(0).expand_as(input_ids)
            x = self.ln(self.tok(input_ids) + self.pos(positions))
            keep = attention_mask > 0
            for layer in self.layers:
                x = layer(x, keep)
            pooled = torch.tanh(self.pool(x[:, 0]))
            return x, pooled

    class DecoderBlock(nn.Module):
        """GPT-like pre-LN block with a causal mask, tanh-approximate GELU, tied LM head over a tiny vocab."""

        def __init__(self, vocab=128, d=32, heads=4, ff=96, layers=2):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(
                nn.ModuleDict(dict(ln1=nn.LayerNorm(d), attn=EinsumAttention(d, heads, causal=True),
                                   ln2=nn.LayerNorm(d), fc=nn.Linear(d, ff), proj=nn.Linear(ff, d)))
                for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, input_ids):
            x = self.tok(input_ids)
            for blk in self.blocks:
                x = x + blk["attn"](blk["ln1"](x))
                x = x + blk["proj"](F.gelu(blk["fc"](blk["ln2"](x)), approximate="tanh"))
            return self.ln_f(x) @ self.tok.weight.t()

    class SdpaDecoder(nn.Module):
        """The same shape of block through F.scaled_dot_product_attention(is_causal=True), as HF-style code does."""

        def __init__(self, vocab=128, d=32, heads=4):
            super().__init__()
            self.h = heads
            self.tok = nn.Embedding(vocab, d)
            self.ln = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, input_ids):
            x = self.tok(input_ids)
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln(x)).reshape(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.out(ctx.transpose(1, 2).reshape(b, s, d))
            return self.head(x)

    def conv_bn(cin, cout, k, stride=1, groups=1, act=nn.ReLU6):
        return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                             nn.BatchNorm2d(cout), act())

    class SqueezeExcite(nn.Module):
        def __init__(self, c, r=4):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

        def forward(self, x):
            s = F.adaptive_avg_pool2d(x, 1)
            return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, cout, stride, expand, groups=1, se=False, act=nn.ReLU6):
            super().__init__()
            mid = cin * expand
            self.use_res = stride == 1 and cin == cout
            self.body = nn.Sequential(
                conv_bn(cin, mid, 1, groups=groups, act=act),         # grouped pointwise (ShuffleNet-style)
                conv_bn(mid, mid, 3, stride, groups=mid, act=act),    # depthwise
                SqueezeExcite(mid) if se else nn.Identity(),
                nn.Conv2d(mid, cout, 1, groups=groups, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.body(x)
            return x + y if self.use_res else y

    class TinyMobileNet(nn.Module):
        """MobileNetV2/V3-like: depthwise 3x3, grouped 1x1, SE with hardsigmoid, hardswish, residuals."""

        def __init__(self, classes=10):
            super().__init__()
            self.stem = conv_bn(3, 16, 3, stride=2, act=nn.Hardswish)
            self.blocks = nn.Sequential(
                InvertedResidual(16, 16, 1, 2),
                InvertedResidual(16, 24, 2, 4, groups=2),
                InvertedResidual(24, 24, 1, 3, groups=2, se=True, act=nn.Hardswish),
                InvertedResidual(24, 32, 2, 3, se=True, act=nn.Hardswish),
                nn.Conv2d(32, 32, 3, padding=2, dilation=2, groups=4))  # dilated grouped conv
            self.head = nn.Linear(32, classes)

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))

    class TinyLSTM(nn.Module):
        """2-layer bidirectional LSTM tagger with explicit initial states."""

        def __init__(self, feat=12, hidden=16, classes=5):
            super().__init__()
            self.lstm = nn.LSTM(feat, hidden, num_layers=2, batch_first=True, bidirectional=True)
            self.fc = nn.Linear(2 * hidden, classes)

        def forward(self, x, h0, c0):
            y, (h, c) = self.lstm(x, (h0, c0))
            return self.fc(y), h, c

    class TinyGRU(nn.Module):
        """A GRU (seq-first, no initial state) followed by a unidirectional single-layer GRU."""

        def __init__(self, feat=12, hidden=16):
            super().__init__()
            self.gru1 = nn.GRU(feat, hidden, num_layers=1)
            self.gru2 = nn.GRU(hidden, hidden, num_layers=1, bidirectional=True)

        def forward(self, x):
            y, _ = self.gru1(x)
            y, h = self.gru2(torch.tanh(y))
            return y, h

    class TorchTransformer(nn.Module):
        """nn.TransformerEncoder (nn.MultiheadAttention inside) with a key-padding mask, as users build one."""

        def __init__(self, feat=16, d=32, heads=4, ff=64, layers=2, classes=3):
            super().__init__()
            self.proj = nn.Linear(feat, d)
            layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                               norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, classes)

        def forward(self, x, padding_mask):
            h = self.encoder(self.proj(x), src_key_padding_mask=padding_mask)
            keep = (~padding_mask).unsqueeze(-1).to(h.dtype)
            return self.head((h * keep).sum(1) / keep.sum(1))

    class TinyUNet(nn.Module):
        """Encoder-decoder CNN: GroupNorm + SiLU, max-pool down, transposed-conv and bilinear/nearest up, skips."""

        def __init__(self, c=8):
            super().__init__()

            def block(cin, cout):
                return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.SiLU())

            self.d1, self.d2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 2 * c)
            self.up2 = nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)
            self.u2, self.u1 = block(4 * c, c), block(2 * c, c)
            self.out = nn.Conv2d(c, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(F.max_pool2d(a, 2))
            m = self.mid(F.max_pool2d(b, 2))
            u = self.u2(torch.cat([self.up2(m), b], 1))
            u = F.interpolate(u, scale_factor=2.0, mode="bilinear", align_corners=False)
            u = self.u1(torch.cat([u, F.interpolate(a, size=a.shape[-2:], mode="nearest")], 1))
            return self.out(u)

    class HFStyleDecoder(nn.Module):
        """What Hugging Face decoders do around attention: position ids from the padding mask by cumsum, a
        causal-and-padding additive mask for SDPA, then greedy next-token choice (argmax) and top-k logits."""

        def __init__(self, vocab=96, d=32, heads=4, max_len=32):
            super().__init__()
            self.h = heads
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)
            self.ln, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, input_ids, attention_mask):
            positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
            x = self.tok(input_ids) + self.pos(positions)
            b, s, d = x.shape
            causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            allowed = causal[None, None] & (attention_mask[:, None, None, :] > 0)
            bias = torch.zeros(allowed.shape, dtype=x.dtype).masked_fill(~allowed, -1e4)
            q, k, v = self.qkv(self.ln(x)).reshape(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
            x = x + self.out(ctx.transpose(1, 2).reshape(b, s, d))
            logits = self.head(self.ln_f(x))[:, -1]
            return logits.argmax(-1), torch.topk(logits, 5, dim=-1).values

    def ids(vocab, b, s, seed):
        return torch.randint(0, vocab, (b, s), generator=torch.Generator().manual_seed(seed))

    def encoder_inputs():
        mask = torch.ones(2, 9, dtype=torch.int64)
        mask[1, 6:] = 0  # the second sequence is padded
        return (ids(200, 2, 9, 1), mask)

    def randn(*shape, seed=2):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))

    def transformer_inputs():
        mask = torch.zeros(2, 8, dtype=torch.bool)
        mask[0, 5:] = True  # padded positions of the first sequence
        return (randn(2, 8, 16, seed=5), mask)

    def hf_inputs():
        mask = torch.ones(2, 7, dtype=torch.int64)
        mask[0, :3] = 0  # left padding, as for batched generation
        return (ids(96, 2, 7, 8), mask)

    return {
        "hf_decoder": (HFStyleDecoder, hf_inputs, ["input_ids", "attention_mask"], ["next_token", "top_logits"],
                       {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}),
        "torch_transformer": (TorchTransformer, transformer_inputs, ["x", "padding_mask"], ["logits"],
                              {"x": {0: "batch", 1: "seq"}, "padding_mask": {0: "batch", 1: "seq"}}),
        "unet": (TinyUNet, lambda: (randn(1, 3, 16, 16, seed=6),), ["image"], ["mask"], {"image": {0: "batch"}}),
        "encoder": (TinyEncoder, encoder_inputs, ["input_ids", "attention_mask"], ["last_hidden", "pooled"],
                    {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}),
        "decoder": (DecoderBlock, lambda: (ids(128, 2, 7, 3),), ["input_ids"], ["logits"],
                    {"input_ids": {0: "batch", 1: "seq"}}),
        "sdpa_decoder": (SdpaDecoder, lambda: (ids(128, 2, 7, 4),), ["input_ids"], ["logits"],
                         {"input_ids": {0: "batch", 1: "seq"}}),
        "mobilenet": (TinyMobileNet, lambda: (randn(2, 3, 32, 32),), ["image"], ["logits"],
                      {"image": {0: "batch"}}),
        "lstm": (TinyLSTM, lambda: (randn(2, 6, 12), randn(4, 2, 16, seed=3), randn(4, 2, 16, seed=4)),
                 ["x", "h0", "c0"], ["y", "h_n", "c_n"],
                 {"x": {0: "batch", 1: "seq"}, "h0": {1: "batch"}, "c0": {1: "batch"}}),
        "gru": (TinyGRU, lambda: (randn(6, 2, 12),), ["x"], ["y", "h_n"], {"x": {0: "seq", 1: "batch"}}),
    }


# (model, opset): legacy TorchScript exporter below 18, the torch.export-based one (torch's default) at 18.
EXPORTS = [
    ("encoder", 13), ("encoder", 17), ("encoder", 18),
    ("decoder", 14), ("decoder", 18),
    ("sdpa_decoder", 15), ("sdpa_decoder", 18),
    ("mobilenet", 13), ("mobilenet", 16), ("mobilenet", 18),
    ("lstm", 14), ("lstm", 18),
    ("gru", 13), ("gru", 17), ("gru", 18),
    ("torch_transformer", 14), ("torch_transformer", 17), ("torch_transformer", 18),
    ("unet", 13), ("unet", 18),
    ("hf_decoder", 14), ("hf_decoder", 18),
]


def _randomise(module, seed):
    """Non-trivial weights: BatchNorm statistics and affine params too (fresh ones make BN an identity)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed)
    norms = (torch.nn.LayerNorm, torch.nn.BatchNorm2d)
    with torch.no_grad():
        for m in module.modules():
            for pname, p in m.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=g)
                if isinstance(m, norms):
                    p.copy_((1.0 if pname == "weight" else 0.0) + 0.1 * noise)
                else:
                    p.copy_(noise * (0.3 if p.dim() > 1 else 0.1))
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)


def export(name, opset):
    """(onnx bytes, npz dict) for one model at one opset."""
    torch = _torch()
    import onnx

    factory, make_inputs, in_names, out_names, dyn = build_models()[name]
    torch.manual_seed(SEED)
    model = factory().eval()
    _randomise(model, SEED)
    args = make_inputs()
    with torch.no_grad():
        outs = model(*args)
    outs = outs if isinstance(outs, tuple) else (outs,)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if opset < 18:
            torch.onnx.export(model, args, f, opset_version=opset, dynamo=False, input_names=in_names,
                              output_names=out_names, dynamic_axes=dyn, do_constant_folding=True)
            data = f.getvalue()
        else:
            shapes = tuple({ax: torch.export.Dim.DYNAMIC for ax in dyn.get(n, {})} for n in in_names)
            prog = torch.onnx.export(model, args, opset_version=opset, dynamo=True, input_names=in_names,
                                     output_names=out_names, dynamic_shapes=shapes, verbose=False)
            data = prog.model_proto.SerializeToString()
    proto = onnx.load_from_string(data)
    for node in proto.graph.node:  # the dynamo exporter records this machine's file paths: keep files portable
        kept = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(kept)
    proto.doc_string = f"tools/make_user_models.py: {name}, torch {torch.__version__}, opset {opset}"
    data = proto.SerializeToString()
    npz = {f"in:{n}": a.numpy() for n, a in zip(in_names, args)}
    npz.update({f"shape:{n}": np.array(a.shape, np.int64) for n, a in zip(in_names, args)})
    npz.update({f"out:{i}": o.numpy() for i, o in enumerate(outs)})
    return data, npz


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="report differences, write nothing")
    parser.add_argument("--only", help="only this model name")
    args = parser.parse_args(argv)
    os.makedirs(OUT, exist_ok=True)
    for name, opset in EXPORTS:
        if args.only and name != args.only:
            continue
        data, npz = export(name, opset)
        base = os.path.join(OUT, f"{name}_op{opset}")
        if args.check:
            same = os.path.exists(base + ".onnx") and open(base + ".onnx", "rb").read() == data
            print(f"{name}_op{opset}: {'same' if same else 'differs'}")
            continue
        with open(base + ".onnx", "wb") as fh:
            fh.write(data)
        np.savez(base + ".npz", **npz)
        print(f"{name}_op{opset}: {len(data) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
