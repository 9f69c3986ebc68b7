"""The score task: one query against many items, for cross-encoders and late-interaction models.

A cross-encoder reads each (query, item) pair in one forward and gives logits, activated here the
way sentence-transformers' CrossEncoder does. An LLM reranker reads each pair as a prompt
(sie.frontend.llm_prompts) and the device returns its score. A ColBERT-style model embeds the query
and the items as token matrices and scores them by MaxSim.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sie.errors import InvalidInput
from sie.families import family_of
from sie.frontend.colbert import maxsim
from sie.frontend.llm_prompts import LlmPrompts
from sie.frontend.pipeline import admit, lora_config_key, submit, tokenize
from sie.frontend.scoring import activation_of, item_scores
from sie.frontend.state import FrontendState
from sie.frontend.tasks.encode import EmbedOptions, embed
from sie.model_config import ModelConfig, resolve_weights_dir
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
    name: str,
    query: str,
    items: list[str],
    *,
    profile: str | None = None,
    lora: str | None = None,
    instruction: str | None = None,
    max_seq_length: int | None = None,
) -> Scored:
    """`instruction` and `max_seq_length` (the request's) are read by families that build their own
    prompt (LLM rerankers); the others get `query` already formatted."""
    _, config = state.model(name)
    check_scoring(config, name)
    check_item_count(len(items))
    if family_of(config.family).score == "maxsim":
        return await _late_interaction(state, name, query, items, profile, lora)
    slot, config = admit(state, name, len(items), profile)
    if builds_own_prompt(config):
        prompts = llm_prompts(state, config, profile)
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
        state,
        slot,
        encoded,
        op=Op.SCORE,
        kinds={ResultKind.SCORES},
        key=lora_config_key(config, profile or config.default_profile_name, lora),
        tokenization_ms=tokenization_ms,
    )
    configured = _activation_setting(config, profile)
    activation = state.tokenizers.derived(
        config, f"activation:{configured}", lambda _: _activation(config, configured)
    )
    scores = item_scores(submitted.results.rows[ResultKind.SCORES], activation)
    return Scored(scores, submitted.input_tokens, tokenization_ms, submitted.queue_ms, submitted.inference_ms)


def builds_own_prompt(config: ModelConfig) -> bool:
    """LLM rerankers put the raw query and the instruction into their prompt themselves."""
    return family_of(config.family).score_tokenization == "llm_prompt"


def llm_prompts(state: FrontendState, config: ModelConfig, profile: str | None) -> LlmPrompts:
    """The profile's prompt builder, made once per model and profile."""
    chosen = profile or config.default_profile_name
    runtime = config.profile(chosen).adapter_options.runtime
    declared = config.max_sequence_length
    return state.tokenizers.derived(
        config,
        f"llm_prompts:{chosen}",
        lambda tok: LlmPrompts.for_profile(tok, runtime, resolve_weights_dir(config), declared),
    )


def _activation(config: ModelConfig, configured: str | None) -> str:
    if config.is_weightless:  # no config.json to read (SIE's fake): its scores are final
        return "identity"
    return activation_of(resolve_weights_dir(config), configured)


def _activation_setting(config: ModelConfig, profile: str | None) -> str | None:
    """The YAML's activation (None: CrossEncoder's choice). An LLM reranker's device score is SIE's
    final one, except a saved CrossEncoder stack's ("native"), activated as CrossEncoder does."""
    runtime = config.profile(profile).adapter_options.runtime
    if builds_own_prompt(config) and runtime.input_format != "native":
        return "identity"
    return runtime.activation


async def _late_interaction(
    state: FrontendState, name: str, query: str, items: list[str], profile: str | None, lora: str | None
) -> Scored:
    vectors = EmbedOptions(output_types=("multivector",), profile=profile, normalize=True, lora=lora)
    query_side = await embed(state, name, [query], replace(vectors, is_query=True))
    item_side = await embed(state, name, items, vectors)
    assert query_side.multivector is not None and item_side.multivector is not None
    scores = maxsim(query_side.multivector[0], item_side.multivector)
    return Scored(
        np.asarray(scores, np.float32),
        query_side.input_tokens + item_side.input_tokens,
        query_side.tokenization_ms + item_side.tokenization_ms,
        max(query_side.queue_ms, item_side.queue_ms),
        query_side.inference_ms + item_side.inference_ms,
    )
