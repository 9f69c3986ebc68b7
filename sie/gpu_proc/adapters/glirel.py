"""GLiREL zero-shot relation extraction (`glirel` 1.x checkpoints): the encoder and its heads.

The frontend (sie/frontend/glirel.py) builds the row glirel builds (`[REL] type ... [SEP]` and the
text's words) and sends per token `w + 1` on the first sub-token of word w, then a side channel this
adapter strips before the encoder: `-(number of relation types)` and `-(first + 1), -(last + 1)` per
entity. The forward is glirel's `compute_score` on those words, through the checkpoint's own modules.

Item i's output rows (one value each): for every ordered entity pair glirel scores, head first word,
head last word, tail first word, tail last word, then the pair's logit for each relation type.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.utils.rnn import pad_sequence

from sie.glirel_config import CONFIG_FILE, GlirelSettings, backbone_dir
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, compute_dtype, place
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

EMBEDDINGS = "token_rep_layer.bert_layer.model.embeddings.word_embeddings.weight"
# glirel's encoder loader is patched while a model is built (module state): one build at a time.
_BUILD_LOCK = threading.Lock()


class GlirelAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, model: Any, settings: GlirelSettings, *, name: str, pad_token_id: int) -> None:
        """`model`: a loaded `glirel.GLiREL`, in eval mode on its device."""
        super().__init__(model, name=name)
        self.settings = settings
        self.pad_token_id = pad_token_id

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlirelAdapter:
        settings = GlirelSettings.read(weights_dir)
        encoder_dir = backbone_dir(settings, config.hf_tokenizer_dependencies)
        state = _state_dict(weights_dir)
        model = _build(weights_dir, encoder_dir, int(state[EMBEDDINGS].shape[0]))
        missing, _ = model.load_state_dict(state, strict=False, assign=True)
        parameters = {name for name, _ in model.named_parameters()}
        if absent := sorted(set(missing) & parameters):
            raise ValueError(f"model '{config.sie_id}': GLiREL checkpoint lacks weights {absent[:5]}")
        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        torch.nn.Module.to(model, dtype=dtype)  # GLiREL's own `to` takes a device only
        place(model, torch_device)
        encoder = model.token_rep_layer.bert_layer.model
        pad = getattr(encoder.config, "pad_token_id", None)
        return cls(model, settings, name=config.sie_id, pad_token_id=int(pad or 0))

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if inputs.aux is None:
            raise ValueError(f"model '{self.name}': GLiREL needs the word and entity aux the frontend sends")
        model = self._live()
        aux = inputs.aux.cpu()
        lengths = torch.tensor(inputs.lengths)
        real = lengths - (aux < 0).sum(dim=1)
        labels, spans = _side_channel(aux, real, lengths)
        with torch.inference_mode():
            words, n_words = self._word_vectors(model, inputs, real)
            logits, pairs = self._score(model, words, n_words, labels, spans)
        rows = [
            torch.cat([pairs[i].float(), logits[i, : len(pairs[i]), : labels[i]].float()], dim=1)
            .cpu()
            .numpy()
            .reshape(-1, 1)
            for i in range(len(labels))
        ]
        return {ResultKind.TOKEN_SCORES: ragged(ResultKind.TOKEN_SCORES, rows)}

    def _word_vectors(
        self, model: Any, inputs: ForwardInputs, real: torch.Tensor
    ) -> tuple[torch.Tensor, list[int]]:
        """[n, most words, D]: each word's first sub-token vector (projected), prompt words first;
        and each item's number of words."""
        width = int(real.max())
        mask = torch.arange(width, device=self.device)[None, :] < real.to(self.device)[:, None]
        ids = inputs.input_ids[:, :width].masked_fill(~mask, self.pad_token_id)
        encoder = model.token_rep_layer.bert_layer.model
        hidden = encoder(ids, attention_mask=mask.long(), return_dict=True).last_hidden_state
        index = inputs.aux[:, :width].clamp(min=0) * mask
        n_words = index.amax(dim=1)
        vectors = hidden.new_zeros(len(ids), int(n_words.max()) + 1, hidden.shape[-1])
        rows = torch.arange(len(ids), device=ids.device)[:, None].expand_as(index)
        first = index > 0
        vectors[rows[first], index[first]] = hidden[first]
        vectors = vectors[:, 1:]
        projection = getattr(model.token_rep_layer, "projection", None)
        return (projection(vectors) if projection is not None else vectors), n_words.tolist()

    def _score(
        self,
        model: Any,
        words: torch.Tensor,
        n_words: list[int],
        labels: list[int],
        spans: list[torch.Tensor],
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """glirel's compute_score from the word vectors: [n, pairs, types] logits, and each item's
        pairs as [pairs, 4] words (head first, head last, tail first, tail last)."""
        from glirel.modules.base import generate_entity_pairs_indices

        device = words.device
        strategy = self.settings.label_embed_strategy
        types = [_type_vectors(words[i, : 2 * n], strategy) for i, n in enumerate(labels)]
        texts = [words[i, 2 * n + 1 : n_words[i]] for i, n in enumerate(labels)]
        text_lengths = torch.tensor([len(t) for t in texts], device=device)
        word_rep = pad_sequence(texts, batch_first=True)
        mask = (torch.arange(word_rep.shape[1], device=device)[None, :] < text_lengths[:, None]).long()
        word_rep = model.rnn(word_rep, mask)
        spans = [s.to(device) for s in spans]
        distance = self.settings.max_entity_pair_distance
        pairs = [generate_entity_pairs_indices(s, max_distance=distance, device=device) for s in spans]
        rel_rep = model.span_rep_layer(
            word_rep,
            span_idx=pad_sequence(spans, batch_first=True, padding_value=0),
            relations_idx=pad_sequence(pairs, batch_first=True, padding_value=-1),
        )
        type_rep = model.prompt_rep_layer(pad_sequence(types, batch_first=True))
        # glirel marks the pairs with a known relation (rel_label > 0): none at inference.
        marked = torch.zeros(rel_rep.shape[:2], dtype=torch.bool, device=device)
        if hasattr(model, "refine_relation"):
            rel_rep = model.refine_relation(rel_rep, word_rep, marked, mask)
        if hasattr(model, "refine_prompt"):
            type_mask = (
                torch.arange(type_rep.shape[1], device=device)[None, :]
                < torch.tensor(labels, device=device)[:, None]
            )
            type_rep = model.refine_prompt(type_rep, rel_rep, type_mask, marked)
        return model.scorer(rel_rep, type_rep), [p.reshape(-1, 4) for p in pairs]

    def lora_target(self) -> torch.nn.Module | None:
        return None  # the family takes no LoRA adapters


def _type_vectors(prompt: torch.Tensor, strategy: str) -> torch.Tensor:
    """One vector per relation type from the prompt's `[REL] type` word pairs."""
    if strategy == "ent_token":
        return prompt[0::2]
    if strategy == "label":
        return prompt[1::2]
    return prompt.reshape(-1, 2, prompt.shape[-1]).mean(dim=1)


def _side_channel(
    aux: torch.Tensor, real: torch.Tensor, lengths: torch.Tensor
) -> tuple[list[int], list[torch.Tensor]]:
    """Per item: its number of relation types and its entities' [first, last] words."""
    labels, spans = [], []
    for i in range(len(aux)):
        side = -aux[i, int(real[i]) : int(lengths[i])]
        labels.append(int(side[0]))
        spans.append((side[1:] - 1).reshape(-1, 2))
    return labels, spans


def _state_dict(weights_dir: Path) -> dict[str, torch.Tensor]:
    safetensors = weights_dir / "model.safetensors"
    if safetensors.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors))
    state: dict[str, torch.Tensor] = torch.load(weights_dir / "pytorch_model.bin", map_location="cpu")
    return state


def _build(weights_dir: Path, encoder_dir: Path, vocab_size: int) -> Any:
    """glirel's model with its encoder built from `encoder_dir`'s config.json at the checkpoint's
    vocabulary size: every weight comes from the checkpoint, so none is read from the encoder's
    folder and no tokenizer is needed here."""
    from glirel import GLiREL
    from glirel.model import load_config_as_namespace

    config = load_config_as_namespace(weights_dir / CONFIG_FILE)
    config.model_name = str(encoder_dir)
    with _BUILD_LOCK, _encoder_from_config(vocab_size):
        return GLiREL(config)


@contextlib.contextmanager
def _encoder_from_config(vocab_size: int) -> Iterator[None]:
    from glirel.modules import transformer_embeddings
    from transformers import AutoConfig, AutoModel

    class ConfigOnly:
        @staticmethod
        def from_pretrained(name: str, **_: Any) -> Any:
            return AutoModel.from_config(AutoConfig.from_pretrained(name))

    class Vocabulary:
        """What glirel asks of its tokenizer while building: the checkpoint's vocabulary, complete."""

        @staticmethod
        def from_pretrained(name: str, **_: Any) -> Any:
            return Vocabulary()

        def get_vocab(self) -> dict[str, int]:
            return {"[FLERT]": 0}  # present: glirel adds nothing

        def add_special_tokens(self, *_: Any) -> int:
            return 0

        def add_tokens(self, *_: Any) -> int:
            return 0

        def __len__(self) -> int:
            return vocab_size

    saved = transformer_embeddings.AutoModel, transformer_embeddings.AutoTokenizer
    transformer_embeddings.AutoModel, transformer_embeddings.AutoTokenizer = ConfigOnly, Vocabulary
    try:
        yield
    finally:
        transformer_embeddings.AutoModel, transformer_embeddings.AutoTokenizer = saved
