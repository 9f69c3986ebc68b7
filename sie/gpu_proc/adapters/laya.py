"""Laya decision models: a ModernBERT encoder and a typed decision head, one row per question.

The checkpoint folder holds `model.safetensors` (`encoder.*`: a transformers ModernBertModel;
`head.layers.*`, `type_emb.*`, `scorer.*`: the decision head), `encoder/config.json` and
`rl_agent_config.json`. The frontend builds the rows (sie/frontend/laya.py) and marks each
option's `[MASK]` in `aux` with its question type + 1; this adapter runs the encoder, adds the
type embedding, runs the head's two full-attention layers and scores the hidden state at every
marker. The act head and the temperature buffer are not read (calibration is the frontend's).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import compute_dtype, release, tensor_bytes
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

HEAD_PREFIXES = ("head.", "type_emb.", "scorer.")
UNUSED_PREFIXES = ("act_head.", "temperature")


class DecisionHead(nn.Module):
    """Question-type embedding, pre-norm encoder layers over the whole row, a marker scorer."""

    def __init__(self, hidden: int, n_layers: int) -> None:
        super().__init__()
        heads = max(1, hidden // 64)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(hidden, heads, 4 * hidden, 0.1, batch_first=True, norm_first=True)
            for _ in range(n_layers)
        )
        self.type_emb = nn.Embedding(3, hidden)
        self.scorer = nn.Sequential(
            nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1)
        )

    def forward(
        self, hidden: torch.Tensor, pad: torch.Tensor, qtype: torch.Tensor, markers: torch.Tensor
    ) -> torch.Tensor:
        """[rows, max_markers] logits at `markers` (positions, 0 where a row has fewer)."""
        h = hidden + self.type_emb(qtype)[:, None, :]
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=pad)
        picked = torch.gather(h, 1, markers[:, :, None].expand(-1, -1, h.size(-1)))
        return self.scorer(picked).squeeze(-1).float()


def split_weights(
    weights: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The checkpoint's encoder and head state dicts; an unknown tensor means it is not Laya's."""
    encoder, head = {}, {}
    for key, value in weights.items():
        if key.startswith("encoder."):
            encoder[key.removeprefix("encoder.")] = value
        elif key.startswith(HEAD_PREFIXES):
            head[key.removeprefix("head.")] = value
        elif not key.startswith(UNUSED_PREFIXES):
            raise ValueError(f"unexpected tensor {key!r} in a Laya checkpoint")
    if not encoder or not head:
        raise ValueError("Laya checkpoint lacks encoder or decision-head weights")
    return encoder, head


def carry_rope_parameters(config: Any) -> None:
    """A transformers-5 `rope_parameters` onto the global/local thetas 4.x reads (mmBERT trains
    both at 160000; without this its sliding layers would run 4.x's default 10000)."""
    rope = getattr(config, "rope_parameters", None)
    if not isinstance(rope, dict):
        return
    for kind, attr in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        params = rope.get(kind)
        theta = params.get("rope_theta") if isinstance(params, dict) else rope.get("rope_theta")
        if theta is not None and hasattr(config, attr):
            setattr(config, attr, float(theta))


class LayaAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, encoder: Any, head: DecisionHead, *, name: str, amp: torch.dtype | None) -> None:
        self.name = name
        self._encoder: Any = encoder
        self._head: DecisionHead | None = head
        self.device = next(head.parameters()).device
        self.pad_token_id = int(encoder.config.pad_token_id or 0)
        self._amp = amp
        self._memory_bytes = tensor_bytes(encoder, head)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> LayaAdapter:
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel

        torch_device = torch.device(device)
        with (weights_dir / "rl_agent_config.json").open(encoding="utf-8") as fh:
            agent = json.load(fh)
        if agent.get("option_layout", "sequential") != "sequential":
            raise ValueError(
                f"model '{config.sie_id}': Laya option_layout {agent['option_layout']!r} not served"
            )
        encoder_config = AutoConfig.from_pretrained(str(weights_dir / "encoder"))
        carry_rope_parameters(encoder_config)
        encoder_config.reference_compile = False
        encoder = AutoModel.from_config(encoder_config, attn_implementation="sdpa")
        head = DecisionHead(encoder_config.hidden_size, int(agent.get("head_layers", 2)))
        encoder_weights, head_weights = split_weights(load_file(str(weights_dir / "model.safetensors")))
        encoder.load_state_dict(encoder_weights, strict=True)
        head.load_state_dict(head_weights, strict=True)
        # float32 weights with autocast on CUDA, as the package runs; CPU stays float32.
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        amp = dtype if torch_device.type == "cuda" and dtype != torch.float32 else None
        for module in (encoder, head):
            module.float().to(torch_device).eval()
        return cls(encoder, head, name=config.sie_id, amp=amp)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if self._head is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        if inputs.aux is None:
            raise ValueError("Laya rows need their option markers (aux)")
        width = max(inputs.lengths)
        ids, mask, aux = inputs.input_ids[:, :width], inputs.attention_mask[:, :width], inputs.aux[:, :width]
        is_marker = aux > 0
        counts = is_marker.sum(dim=1)
        n_slots = max(1, int(counts.max()))
        # Marker positions in order, padded with 0 (a real position; its score is dropped below).
        order = torch.argsort((~is_marker).to(torch.int8), dim=1, stable=True)[:, :n_slots]
        positions = torch.where(torch.arange(n_slots, device=ids.device)[None, :] < counts[:, None], order, 0)
        qtype = (aux.gather(1, order[:, :1]).squeeze(1) - 1).clamp(min=0)
        autocast = (
            torch.autocast(self.device.type, dtype=self._amp) if self._amp is not None else nullcontext()
        )
        with torch.inference_mode(), autocast:
            hidden = self._encoder(input_ids=ids, attention_mask=mask).last_hidden_state
            logits = self._head(hidden, ~mask.bool(), qtype, positions)
        keep = torch.arange(n_slots, device=ids.device)[None, :] < counts[:, None]
        values = logits[keep].float().cpu().numpy().reshape(-1, 1)
        offsets = np.zeros(len(inputs.lengths) + 1, np.int64)
        np.cumsum(counts.cpu().numpy(), out=offsets[1:])
        return {ResultKind.TOKEN_SCORES: Output(ResultKind.TOKEN_SCORES, values, offsets)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._head is not None else 0

    def close(self) -> None:
        self._encoder = self._head = None
        release(self.device)
