"""Florence-2: an image and its task prompt -> generated token ids (the frontend parses them).

transformers' `Florence2ForConditionalGeneration` computes: the DaViT tower's features, projected,
come first in the BART encoder's input, then the prompt's tokens (`<s> prompt </s>`); the decoder
generates the answer. Here the image features are joined to the prompt's embeddings directly, the
encoder runs once on the batch (prompts right-padded and masked), and `generate` decodes from its
output; so neither layout needs an image placeholder token. Folders in microsoft's remote-code
layout are read through `florence2_layout` (renamed weights, that code's generation rules);
transformers' own layout loads as it is, with its generation config.

Each item's ids start with the generation settings its request chose (`HEADER`: max new tokens,
beam count), which the frontend puts in the batch key, so every item of a batch has the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, compute_dtype, generated_tokens, place, without_padding
from sie.gpu_proc.adapters.florence2_layout import (
    UnsupportedLayout,
    generation_settings,
    is_original_layout,
    native_config,
    native_state_dict,
)
from sie.gpu_proc.adapters.st_modules import read_tensors
from sie.gpu_proc.attention import candidates
from sie.gpu_proc.outputs import Output
from sie.media_config import ImageSpec, image_spec
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import GenerationConfig, PreTrainedModel

    from sie.model_config import ModelConfig

HEADER = 2  # ids before an item's prompt: max_new_tokens, num_beams
MAX_IMAGES_PER_FORWARD = 16  # a large batch is generated in parts, so beams and caches stay bounded
# Ties the native model keeps itself: absent from (or duplicated in) a checkpoint.
_TIED = frozenset(
    {
        "lm_head.weight",
        "model.language_model.encoder.embed_tokens.weight",
        "model.language_model.decoder.embed_tokens.weight",
    }
)
_SHARED = "model.language_model.shared.weight"


class Florence2Adapter(HeldModel):
    kinds = frozenset({ResultKind.TOKENS})

    def __init__(
        self, model: PreTrainedModel, spec: ImageSpec, generation: GenerationConfig, *, name: str
    ) -> None:
        super().__init__(model, name=name)
        self._normalizer = PixelNormalizer(spec, self.device)
        self._generation = generation
        self.pad_token_id = int(generation.pad_token_id if generation.pad_token_id is not None else 1)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Florence2Adapter:
        from transformers import Florence2ForConditionalGeneration, GenerationConfig

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        raw = json.loads((weights_dir / "config.json").read_text())
        if is_original_layout(raw):
            model = load_original(raw, weights_dir, dtype)
            generation = GenerationConfig(**generation_settings(raw))
        else:  # transformers' layout, in its own class: the folder's code (auto_map) is never run
            model = _built(
                lambda attention: Florence2ForConditionalGeneration.from_pretrained(
                    weights_dir, local_files_only=True, dtype=dtype, attn_implementation=attention
                ),
                dtype,
            )
            generation = model.generation_config
        place(model, torch_device)
        return cls(model, image_spec(weights_dir, "florence2"), generation, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        assert inputs.pixels is not None  # every item is an image with its prompt
        max_new_tokens, num_beams = (int(v) for v in inputs.input_ids[0, :HEADER].tolist())
        generation = self._settings(max_new_tokens, num_beams)
        rows: list[list[int]] = []
        with torch.inference_mode():
            for start in range(0, len(inputs.pixels), MAX_IMAGES_PER_FORWARD):
                part = slice(start, start + MAX_IMAGES_PER_FORWARD)
                ids, mask = inputs.input_ids[part, HEADER:], inputs.attention_mask[part, HEADER:]
                embeds, joint_mask = self._encoder_inputs(model, inputs.pixels[part], ids, mask)
                encoded = model.get_encoder()(inputs_embeds=embeds, attention_mask=joint_mask)
                generated = model.generate(
                    encoder_outputs=encoded, attention_mask=joint_mask, generation_config=generation
                )
                rows.extend(without_padding(row, self.pad_token_id) for row in generated.tolist())
        return {ResultKind.TOKENS: generated_tokens(rows)}

    def _encoder_inputs(
        self, model: Any, pixels: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[image features, prompt embeddings] and their mask (every image position is real)."""
        image = model.get_image_features(self._normalizer(pixels, self.dtype)).pooler_output
        text = model.get_input_embeddings()(ids)
        image_mask = torch.ones(image.shape[:2], dtype=mask.dtype, device=mask.device)
        return torch.cat([image.to(text.dtype), text], dim=1), torch.cat([image_mask, mask], dim=1)

    def _settings(self, max_new_tokens: int, num_beams: int) -> GenerationConfig:
        generation = copy.deepcopy(self._generation)
        generation.update(max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=False)
        if num_beams == 1:  # beam-only rules change nothing in a greedy search; unset, they warn less
            generation.update(early_stopping=False, length_penalty=1.0)
        return generation


def load_original(raw: dict[str, Any], weights_dir: Path, dtype: torch.dtype) -> PreTrainedModel:
    """The native model holding a microsoft-layout checkpoint's weights (see florence2_layout)."""
    config = native_config(raw)
    state = native_state_dict(read_tensors(weights_dir))
    # A file saved without tied copies keeps one of them, not necessarily the shared one.
    for copy_name in ("model.language_model.encoder.embed_tokens.weight", *_TIED):
        if _SHARED not in state and copy_name in state:
            state[_SHARED] = state[copy_name]
    if _SHARED not in state:
        raise UnsupportedLayout(f"{weights_dir}: no token embeddings in the Florence-2 checkpoint")
    head = state.get("lm_head.weight")
    if head is not None and not torch.equal(head, state[_SHARED]):
        raise UnsupportedLayout(
            f"{weights_dir}: an output head apart from the token embeddings is not served"
        )
    model = _empty_model(config, dtype)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) - _TIED:
        absent = sorted(set(missing) - _TIED)
        raise UnsupportedLayout(
            f"{weights_dir}: weights not matching Florence-2 (missing {absent}, extra {unexpected})"
        )
    model.tie_weights()
    model.to(dtype)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise UnsupportedLayout(f"{weights_dir}: the checkpoint leaves some Florence-2 weights unset")
    return model


def _empty_model(config: Any, dtype: torch.dtype) -> PreTrainedModel:
    """The architecture without memory for its weights (the checkpoint's tensors are assigned to it)."""
    from transformers import Florence2ForConditionalGeneration

    def build(attention: str | None) -> PreTrainedModel:
        with torch.device("meta"):
            return Florence2ForConditionalGeneration._from_config(config, attn_implementation=attention)

    return _built(build, dtype)


def _built(build: Callable[[str | None], PreTrainedModel], dtype: torch.dtype) -> PreTrainedModel:
    """`build` with the configured attention backend or the next one down, never flash attention:
    DaViT's channel attention attends over channels, its head size the image's token count (up to
    tens of thousands), far beyond flash attention's head sizes."""
    choices = [c for c in candidates(dtype, torch.cuda.is_available()) if c != "flash_attention_2"]
    for attention in choices[:-1]:
        try:
            return build(attention)
        except (ValueError, ImportError):
            continue
    return build(None)
