"""A padding-free forward for ModernBERT encoders (gte-modernbert, modernbert-embed, granite r2,
ModernColBERT, ModernBERT rerankers): pre-norm layers, rotary positions with one base for global and
one for local layers, bidirectional attention that is global in some layers and within a window in
the others, gated MLP.

As for BERT (`packed.py`, whose packing plan this reuses), the projections, norms and MLP run once
over the batch's real tokens; attention alone works on small padded blocks of sequences of similar
length, masked to each block's real keys (and to the window in local layers); on CUDA in half
precision, PyTorch's varlen kernel attends the whole stream at once (sie.gpu_proc.adapters.varlen).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sie.gpu_proc.adapters.packed import Packing, plan, rotate_half, stream_positions, streamed, unpacked
from sie.gpu_proc.adapters.varlen import FULL, Sequences, attend


class PackedModernBert:
    def __init__(self, base: Any) -> None:
        self._base = base
        config = base.config
        self._heads = int(config.num_attention_heads)
        self._head_dim = int(config.hidden_size) // self._heads
        window = int(config.sliding_window)  # bidirectional: keys at most this far on either side
        self._windows = [
            window if layer.attention_type == "sliding_attention" else None for layer in base.layers
        ]
        self._types = [str(layer.attention_type) for layer in base.layers]

    @staticmethod
    def wrap(base: Any) -> PackedModernBert | None:
        """A packed runner for a `ModernBertModel`, or None where its layout is not the one known here."""
        config = getattr(base, "config", None)
        if config is None or config.model_type != "modernbert":
            return None
        if not type(base).__module__.startswith("transformers.models."):
            return None
        layers = getattr(base, "layers", None)
        if (
            layers is None
            or not hasattr(base, "rotary_emb")
            or getattr(config, "sliding_window", None) is None
        ):
            return None
        if not all(hasattr(layer, "attention_type") for layer in layers):
            return None
        return PackedModernBert(base)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        lengths: list[int],
        token_type_ids: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Last hidden states [n, L, hidden], zero on padding, equal to the padded forward's.

        `key_mask` ([n, L], optional) says which tokens the others may attend to (ColBERT's query
        expansion computes tokens nobody attends to)."""
        packing = plan(lengths, input_ids.shape[1], key_mask, input_ids.device)
        ids = streamed(input_ids, packing)
        embeddings = self._base.embeddings
        flat = embeddings.norm(embeddings.tok_embeddings(ids))
        positions = stream_positions(packing, input_ids)[None]
        rotary = {
            kind: tuple(t[0, :, None, :] for t in self._base.rotary_emb(flat, positions, kind))
            for kind in set(self._types)
        }
        windows = _Windows(input_ids.device)
        seqs = packing.varlen(flat.dtype, self._head_dim)
        for layer, kind, window in zip(self._base.layers, self._types, self._windows, strict=True):
            hidden = layer.attn_norm(flat)
            attended = self._attend(layer.attn, hidden, rotary[kind], packing, windows, window, seqs)
            flat = flat + attended
            flat = flat + layer.mlp(layer.mlp_norm(flat))
        flat = self._base.final_norm(flat)
        return unpacked(flat, packing)

    def _attend(
        self,
        attention: Any,
        hidden: torch.Tensor,
        rotary: tuple[torch.Tensor, ...],
        packing: Packing,
        windows: _Windows,
        window: int | None,
        seqs: Sequences | None,
    ) -> torch.Tensor:
        tokens, d = hidden.shape[0], self._head_dim
        q, k, v = attention.Wqkv(hidden).view(tokens, 3, self._heads, d).unbind(dim=1)
        cos, sin = rotary
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if seqs is not None:  # CUDA: one varlen kernel over the stream (sie.gpu_proc.adapters.varlen)
            out = attend(q, k, v.contiguous(), seqs, FULL if window is None else (window, window))
            if out is not None:
                return attention.Wo(out.reshape(tokens, self._heads * d))
        if packing.uniform:
            n, length = packing.shape
            blocks = (t.reshape(n, length, self._heads, d).transpose(1, 2) for t in (q, k, v))
            out = F.scaled_dot_product_attention(*blocks, attn_mask=windows.of(length, window))
            return attention.Wo(out.transpose(1, 2).reshape(tokens, self._heads * d))
        # Row `tokens` of each padded copy is zeros: what padding positions gather.
        q, k, v = (torch.cat([t, t.new_zeros((1, *t.shape[1:]))]) for t in (q, k, v))
        context = hidden.new_empty((tokens, self._heads * d))
        for group in packing.groups:
            g, length = group.keys.shape
            blocks = (
                t.index_select(0, group.index).view(g, length, self._heads, d).transpose(1, 2)
                for t in (q, k, v)
            )
            mask = group.keys[:, None, None, :]
            band = windows.of(length, window)
            out = F.scaled_dot_product_attention(*blocks, attn_mask=mask if band is None else mask & band)
            rows = out.transpose(1, 2).reshape(g * length, self._heads * d).index_select(0, group.real)
            context.index_copy_(0, group.rows, rows)
        return attention.Wo(context)


class _Windows:
    """Band masks |i - j| <= window by block length, made once per batch and shared by every layer."""

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self._made: dict[tuple[int, int], torch.Tensor] = {}

    def of(self, length: int, window: int | None) -> torch.Tensor | None:
        """None when the window does not bind at this length (global attention)."""
        if window is None or window >= length - 1:
            return None
        band = self._made.get((length, window))
        if band is None:
            rows = torch.arange(length, device=self._device)
            band = self._made[(length, window)] = (rows[:, None] - rows[None, :]).abs() <= window
        return band
