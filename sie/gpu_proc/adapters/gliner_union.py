"""GLiNER unions, device half: every member a GLiNER span model, each batch run by one of them.

The frontend (sie/frontend/tasks/extract_gliner_union.py) sends each member its own batches: its
prompts, keyed apart, with the member's index in the batch's float parameter
(`ForwardInputs.scalar`). A member's forward and output are the plain GLiNER family's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gliner_union import parse_members
from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.gliner import GlinerAdapter
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class GlinerUnionAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, members: list[GlinerAdapter], *, name: str) -> None:
        self.name = name
        self.members = members
        self.device = members[0].device
        self.pad_token_id = members[0].pad_token_id  # the runner's; each member's own is put back

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlinerUnionAdapter:
        others = parse_members(config.profile(profile).adapter_options.loadtime.get("members"))
        members: list[GlinerAdapter] = []
        try:
            for folder in (weights_dir, *(member.folder() for member in others)):
                member = GlinerAdapter.load(config, folder, device, profile)
                members.append(member)
                if type(member) is not GlinerAdapter:
                    raise ValueError(f"model '{config.sie_id}': {folder} is not a GLiNER span model")
        except BaseException:
            for member in members:  # a failed load holds no device memory
                member.close()
            raise
        return cls(members, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        index = int(inputs.scalar)
        if not 0 <= index < len(self.members) or index != inputs.scalar:
            raise ValueError(f"model '{self.name}': no member {inputs.scalar} (it has {len(self.members)})")
        member = self.members[index]
        if member.pad_token_id != self.pad_token_id:
            padded = inputs.input_ids.masked_fill(inputs.attention_mask == 0, member.pad_token_id)
            inputs = dataclasses.replace(inputs, input_ids=padded)
        return member.forward(inputs, wanted)

    def memory_bytes(self) -> int:
        return sum(member.memory_bytes() for member in self.members)

    def lora_target(self) -> torch.nn.Module | None:
        return None  # LoRA adapters name one model; a union is several

    def close(self) -> None:
        for member in self.members:
            member.close()
