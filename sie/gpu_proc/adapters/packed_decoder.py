"""A padding-free forward for decoder embedders (Qwen2, Qwen3, Mistral, Llama): causal attention
(or bidirectional, where the model's configuration says `is_causal: false`, as GritLM runs Mistral),
rotary positions, grouped-query attention.

As for encoders (`packed.py`, whose packing plan this reuses), every projection, norm and MLP runs
once over the batch's real tokens as one `[tokens, hidden]` stream; attention alone works on small
padded blocks of sequences of similar length, with a causal (and, where the model has one, a
sliding-window) mask; a bidirectional model masks only the padding keys (and, with a window,
keys farther than the window on either side, as transformers' bidirectional sliding-window mask).
Rotary positions count from each sequence's own start. The weights are the Hugging Face model's
own modules, so any checkpoint of these architectures runs unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from sie.gpu_proc.adapters.cuda_graphs import Replays
from sie.gpu_proc.adapters.packed import Packing, plan, rotate_half, stream_positions, streamed, unpacked
from sie.gpu_proc.adapters.varlen import CAUSAL, FULL, Sequences, attend

# Decoder stacks whose layers are exactly: norm, attention (q/k/v/o projections, optional q/k norms
# on the head dimension, rotary), residual, norm, MLP, residual; then a final norm.
_ARCHITECTURES = frozenset({"qwen2", "qwen3", "mistral", "llama"})


class PackedDecoder:
    def __init__(self, base: Any) -> None:
        self._base = base
        config = base.config
        self._heads = int(config.num_attention_heads)
        self._kv_heads = int(getattr(config, "num_key_value_heads", None) or self._heads)
        self._head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self._heads)
        self._causal = getattr(config, "is_causal", True) is not False
        self._windows = [_window(layer.self_attn, config) for layer in base.layers]
        self._replays = Replays(base, self._stream_body)

    @staticmethod
    def wrap(base: Any) -> PackedDecoder | None:
        """A packed runner for a decoder base model (e.g. `Qwen3Model`), or None if unsupported."""
        config = getattr(base, "config", None)
        if config is None or config.model_type not in _ARCHITECTURES:
            return None
        if not type(base).__module__.startswith("transformers.models."):
            return None  # a model's own code (bidirectional variants) computes differently
        if not hasattr(base, "rotary_emb") or not hasattr(base, "layers"):
            return None
        return PackedDecoder(base)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        lengths: list[int],
        token_type_ids: torch.Tensor | None = None,
        key_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Last hidden states [n, L, hidden], zero on padding, equal to the padded forward's."""
        if key_mask is not None:
            raise ValueError("decoder embedders attend to every earlier token: no key mask")
        packing = plan(lengths, input_ids.shape[1], None, input_ids.device)
        ids = streamed(input_ids, packing)
        positions = stream_positions(packing, input_ids)
        seqs = packing.varlen(self._base.embed_tokens.weight.dtype, self._head_dim)
        # decoders have no token types: the ids stand in for them
        flat = self._replays.run(ids, ids, positions, seqs, lengths, self._head_dim)
        if flat is None:
            flat = self._layers(ids, positions, packing, _Masks(input_ids.device, causal=self._causal), seqs)
        return unpacked(flat, packing)

    def _stream_body(
        self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, seqs: Sequences
    ) -> torch.Tensor:
        """The stream attended through the varlen kernel alone: what a CUDA graph records."""
        return self._layers(ids, positions, None, None, seqs)

    def _layers(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        packing: Packing | None,
        masks: _Masks | None,
        seqs: Sequences | None,
    ) -> torch.Tensor:
        flat = self._base.embed_tokens(ids)
        cos, sin = self._base.rotary_emb(flat, positions[None])  # [1, tokens, head_dim]
        rotary = (cos[0, :, None, :], sin[0, :, None, :])
        for layer, window in zip(self._base.layers, self._windows, strict=True):
            attended = self._attend(
                layer.self_attn, layer.input_layernorm(flat), rotary, packing, masks, window, seqs
            )
            flat = flat + attended
            flat = flat + layer.mlp(layer.post_attention_layernorm(flat))
        return self._base.norm(flat)

    def _attend(
        self,
        attention: Any,
        hidden: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        packing: Packing | None,
        masks: _Masks | None,
        window: int | None,
        seqs: Sequences | None,
    ) -> torch.Tensor:
        tokens, d = hidden.shape[0], self._head_dim
        q = attention.q_proj(hidden).view(tokens, self._heads, d)
        k = attention.k_proj(hidden).view(tokens, self._kv_heads, d)
        v = attention.v_proj(hidden).view(tokens, self._kv_heads, d)
        if hasattr(attention, "q_norm"):  # Qwen3 normalizes each head before the rotation
            q, k = attention.q_norm(q), attention.k_norm(k)
        cos, sin = rotary
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        gqa = self._kv_heads != self._heads
        if seqs is not None:  # CUDA: one varlen kernel over the stream (sie.gpu_proc.adapters.varlen)
            out = attend(q, k, v, seqs, self._band(window))
            if out is not None:
                return attention.o_proj(out.reshape(tokens, self._heads * d))
        if packing is None or masks is None:  # a graph's body: padded groups need the batch's plan
            raise RuntimeError("varlen attention is unavailable")
        if packing.uniform:
            n, length = packing.shape
            blocks = (t.view(n, length, -1, d).transpose(1, 2) for t in (q, k, v))
            out = _attention(blocks, masks.window(length, window), gqa, causal=self._causal)
            return attention.o_proj(out.transpose(1, 2).reshape(tokens, self._heads * d))
        # Row `tokens` of each padded copy is zeros: what padding positions gather.
        q, k, v = (torch.cat([t, t.new_zeros((1, *t.shape[1:]))]) for t in (q, k, v))
        context = hidden.new_empty((tokens, self._heads * d))
        for group in packing.groups:
            g, length = group.keys.shape
            blocks = (
                t.index_select(0, group.index).view(g, length, -1, d).transpose(1, 2) for t in (q, k, v)
            )
            # Right padding: a real row's causal past holds only real tokens, so a causal model needs
            # no key mask; a bidirectional one masks the padding keys. Padding rows are dropped below.
            mask = masks.window(length, window)
            if not self._causal:
                keys = group.keys[:, None, None, :]
                mask = keys if mask is None else keys & mask
            out = _attention(blocks, mask, gqa, causal=self._causal)
            rows = out.transpose(1, 2).reshape(g * length, self._heads * d).index_select(0, group.real)
            context.index_copy_(0, group.rows, rows)
        return attention.o_proj(context)

    def _band(self, window: int | None) -> tuple[int, int]:
        """The varlen kernel's (left, right) key window: as _Masks, a causal window keeps keys
        0 <= distance < window back, a bidirectional one |distance| <= window."""
        if window is None:
            return CAUSAL if self._causal else FULL
        return (window - 1, 0) if self._causal else (window, window)


def _attention(blocks: Any, mask: torch.Tensor | None, gqa: bool, *, causal: bool) -> torch.Tensor:
    q, k, v = blocks
    if mask is None:  # SDPA's own causal kernels beat any explicit mask
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


class _Masks:
    """Sliding-window masks by block length, made once per batch and shared by every layer."""

    def __init__(self, device: torch.device, *, causal: bool) -> None:
        self._device = device
        self._causal = causal
        self._made: dict[tuple[int, int], torch.Tensor] = {}

    def window(self, length: int, window: int | None) -> torch.Tensor | None:
        """None when the window does not bind (plain causal or full attention).

        Causal: a key `distance` tokens back, 0 <= distance < window. Bidirectional: transformers'
        rule, |distance| <= window, so a window binds only below length - 1."""
        reach = length if self._causal else length - 1
        if window is None or window >= reach:
            return None
        mask = self._made.get((length, window))
        if mask is None:
            rows = torch.arange(length, device=self._device)
            distance = rows[:, None] - rows[None, :]
            near = (distance >= 0) & (distance < window) if self._causal else distance.abs() <= window
            mask = self._made[(length, window)] = near
        return mask


def _window(attention: Any, config: Any) -> int | None:
    """A layer's sliding window: its own attribute where the model sets one per layer (Qwen),
    else the model's (Mistral); None for full attention."""
    window = getattr(attention, "sliding_window", getattr(config, "sliding_window", None))
    return int(window) if window else None
