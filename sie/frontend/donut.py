"""Donut's text side: the decoder prompt, its tokens, and generated tokens back to a sequence.

The prompt is SIE's: the task token alone (`<s_cord-v2>`), or for DocVQA with a question
`<s_docvqa><s_question>{question}</s_question><s_answer>`, tokenized without special tokens.
The generated tokens are decoded after the prompt with special tokens kept (`batch_decode`),
then SIE cleans the sequence: the end and pad tokens removed, then the first `<s_word>` tag
(a task token with a hyphen, such as `<s_cord-v2>`, is no `\\w` word, so there the first field's
opening tag goes instead, as in SIE) and the surrounding spaces. `sie.frontend.donut_json`
turns the sequence into fields.

An XLM-RoBERTa tokenizer is run as `transformers` rebuilds it from tokenizer.json: whitespace
split before the Metaspace pre-tokenizer, and only the SentencePiece normalizer kept.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers

from sie.errors import InvalidInput
from sie.frontend.detokenize import clean_up_tokenization
from sie.frontend.model_files import read_json_object, token_content, tokenizer_settings

DOCVQA = "<s_docvqa>"
_XLM_ROBERTA = frozenset({"XLMRobertaTokenizer", "XLMRobertaTokenizerFast"})
_FIRST_TAG = re.compile(r"<s_\w+>")


def prompt_of(task: str, question: str | None) -> str:
    """SIE's decoder prompt: DocVQA's question between its tags, any other task token alone."""
    if task == DOCVQA and question:
        return f"{task}<s_question>{question}</s_question><s_answer>"
    return task


@dataclass(frozen=True, slots=True)
class DonutText:
    """One model's prompt tokenizer and sequence decoder."""

    tokenizer: Tokenizer  # no truncation, no padding: an over-long prompt is refused, not cut
    eos: str  # the end and pad tokens' text, removed from a decoded sequence
    pad: str
    added: frozenset[str]  # the added vocabulary (token2json reads categorical tokens from it)
    clean_up: bool
    max_positions: int  # the decoder's positions: prompt and generation together

    @classmethod
    def for_model(cls, folder: Path, tokenizer_json: Path) -> DonutText:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        tokenizer_config = tokenizer_settings(tokenizer_json.parent)
        if tokenizer_config.get("tokenizer_class") in _XLM_ROBERTA:
            _as_transformers_xlm_roberta(tokenizer, tokenizer_json, tokenizer_config)
        decoder = read_json_object(folder / "config.json").get("decoder") or {}
        return cls(
            tokenizer=tokenizer,
            eos=token_content(tokenizer_config.get("eos_token")) or "</s>",
            pad=token_content(tokenizer_config.get("pad_token")) or "<pad>",
            added=frozenset(t.content for t in tokenizer.get_added_tokens_decoder().values()),
            clean_up=bool(tokenizer_config.get("clean_up_tokenization_spaces", False)),
            max_positions=int(decoder.get("max_position_embeddings") or 1024),
        )

    def encode(self, prompt: str) -> np.ndarray:
        """The prompt's token ids; one leaving no room to generate is a 400."""
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        if not ids:
            raise InvalidInput("options.task must not be empty")
        if len(ids) >= self.max_positions:
            raise InvalidInput(
                f"the prompt (task and question) is {len(ids)} tokens; the model reads at most "
                f"{self.max_positions} with what it generates (ask a shorter question)"
            )
        return np.asarray(ids, np.int32)

    def sequence(self, prompt: np.ndarray, generated: list[int]) -> str:
        """The prompt and its generation decoded and cleaned as SIE cleans them for token2json."""
        text: str = self.tokenizer.decode([*prompt.tolist(), *generated], skip_special_tokens=False)
        if self.clean_up:
            text = clean_up_tokenization(text)
        text = text.replace(self.eos, "").replace(self.pad, "")
        return _FIRST_TAG.sub("", text, count=1).strip()


def _as_transformers_xlm_roberta(tokenizer: Tokenizer, path: Path, config: dict[str, Any]) -> None:
    """transformers' XLMRobertaTokenizer: the SentencePiece normalizer only, whitespace split then
    Metaspace, and the Metaspace decoder (what it builds from tokenizer.json's vocabulary)."""
    scheme = "always" if config.get("add_prefix_space", True) else "never"
    charsmap = _precompiled_charsmap(read_json_object(path).get("normalizer"))
    tokenizer.normalizer = None if charsmap is None else normalizers.Precompiled(charsmap)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)


def _precompiled_charsmap(normalizer: Any) -> bytes | None:
    if not isinstance(normalizer, dict):
        return None
    parts = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "Precompiled" and part.get("precompiled_charsmap"):
            return base64.b64decode(part["precompiled_charsmap"])
    return None
