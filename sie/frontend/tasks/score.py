"""The score task: one query against many items, for cross-encoders and late-interaction models.

A cross-encoder reads each (query, item) pair in one forward and gives logits, activated here the
way sentence-transformers' CrossEncoder does. An LLM reranker reads each pair as a prompt
(sie.frontend.llm_prompts) and the device returns its score. A ColBERT-style model embeds the query
and the items as token matrices and scores them by MaxSim.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import numpy as np

from sie.errors import InvalidInput
from sie.families import family_of
from sie.frontend.colbert import maxsim
from sie.frontend.llm_prompts import LlmPrompts
from sie.frontend.pipeline import admit, submit, tokenize
from sie.frontend.scoring import activation_of, item_scores
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions, embed_texts
from sie.model_config import ModelConfig
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind

MAX_SCORE_ITEMS = 1000


@dataclass(frozen=True, slots=True)
class Scored:
    scores: np.ndarray  # float per item, request order
    input_tokens: int
    tokenization_ms: float
    queue_ms: float
    inference_ms: float


def check_scoring(config: ModelConfig, name: str) -> None:
    if config.supports_score():
        return
    raise InvalidInput(
        f"Model '{name}' does not support scoring. Use a reranker (cross-encoder) or a multi-vector model."
    )


def check_item_count(n_items: int) -> None:
    if n_items == 0:
        raise InvalidInput("items must not be empty")
    if n_items > MAX_SCORE_ITEMS:
        raise InvalidInput(f"Too many items: {n_items}; at most {MAX_SCORE_ITEMS} can be scored at once")


async def score(
    state: FrontendState,
    target: Target,
    query: str,
    items: list[str],
    *,
    instruction: str | None = None,
    max_seq_length: int | None = None,
) -> Scored:
    """`instruction` and `max_seq_length` (the request's) are read by families that build their own
    prompt (LLM rerankers); the others get `query` already formatted. The route has checked that
    the model scores and how many items there are."""
    if target.family.score == "maxsim":
        return await _late_interaction(state, target, query, items)
    admit(state, target, len(items))
    config = target.config
    if builds_own_prompt(config):
        prompts = llm_prompts(state, target)
        limit = prompts.limit(max_seq_length)
        encoded, tokenization_ms = await tokenize(
            lambda: prompts.encode(query, items, instruction, limit), len(items)
        )
    else:
        tokenizer = state.tokenizers.get(config)
        encoded, tokenization_ms = await tokenize(
            lambda: tokenizer.encode_pairs([query] * len(items), items), len(items)
        )
    submitted = await submit(
        state, target, encoded, op=Op.SCORE, kinds={ResultKind.SCORES}, tokenization_ms=tokenization_ms
    )
    configured = _activation_setting(target)
    activation = state.tokenizers.built(
        config, f"activation:{configured}", lambda: _activation(config, configured)
    )
    scores = item_scores(submitted.results.rows[ResultKind.SCORES], activation)
    return Scored(scores, submitted.input_tokens, tokenization_ms, submitted.queue_ms, submitted.inference_ms)


def builds_own_prompt(config: ModelConfig) -> bool:
    """LLM rerankers put the raw query and the instruction into their prompt themselves."""
    return family_of(config.family).score_tokenization == "llm_prompt"


def llm_prompts(state: FrontendState, target: Target) -> LlmPrompts:
    """The profile's prompt builder, made once per model and profile."""
    config, runtime = target.config, target.runtime
    declared = config.max_sequence_length
    return state.tokenizers.derived(
        config,
        f"llm_prompts:{target.profile_name}",
        lambda tok: LlmPrompts.for_profile(tok, runtime, resolve_weights_dir(config), declared),
    )


def _activation(config: ModelConfig, configured: str | None) -> str:
    if config.is_weightless:  # no config.json to read (SIE's fake): its scores are final
        return "identity"
    return activation_of(resolve_weights_dir(config), configured)


def _activation_setting(target: Target) -> str | None:
    """The YAML's activation (None: CrossEncoder's choice). An LLM reranker's device score is SIE's
    final one, except a saved CrossEncoder stack's ("native"), activated as CrossEncoder does."""
    runtime = target.runtime
    if builds_own_prompt(target.config) and runtime.input_format != "native":
        return "identity"
    return runtime.activation


async def _late_interaction(state: FrontendState, target: Target, query: str, items: list[str]) -> Scored:
    vectors = EmbedOptions(output_types=("multivector",), normalize=True)
    admit(state, target, len(items))  # one load order and one answer when the model is not ready
    query_side, item_side = await asyncio.gather(  # both on the device at once
        embed_texts(state, target, [query], replace(vectors, is_query=True)),
        embed_texts(state, target, items, vectors),
    )
    return maxsim_scored(query_side, item_side)


def maxsim_scored(query_side: Embedded, item_side: Embedded) -> Scored:
    """MaxSim of the one query's token vectors against each item's, with both sides' timings."""
    assert query_side.multivector is not None and item_side.multivector is not None
    scores = maxsim(query_side.multivector[0], item_side.multivector)
    return Scored(
        np.asarray(scores, np.float32),
        query_side.input_tokens + item_side.input_tokens,
        query_side.tokenization_ms + item_side.tokenization_ms,
        max(query_side.queue_ms, item_side.queue_ms),
        query_side.inference_ms + item_side.inference_ms,
    )
