"""The encode task: dense, sparse and multi-vector embeddings (and MUVERA) for any encode family.

The device returns raw arrays; everything else happens here: query/document formatting and
family tokenization before, normalization and MUVERA after. Output dtypes and rendering belong
to the route, since `/v1/embeddings` renders the same vectors differently.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from sie.families import family_of
from sie.frontend.colbert import ColbertTokenization
from sie.frontend.muvera import MuveraParams, fde
from sie.frontend.pipeline import admit, lora_config_key, submit, tokenize
from sie.frontend.postprocess import l2_normalize
from sie.frontend.state import FrontendState
from sie.frontend.tokenize import Encoded
from sie.frontend.wire import DEFAULT_OUTPUT_TYPES
from sie.model_config import ModelConfig
from sie.shm.layout import Op, ResultKind

_KINDS = {"dense": ResultKind.DENSE, "sparse": ResultKind.SPARSE, "multivector": ResultKind.MULTIVECTOR}


@dataclass(frozen=True, slots=True)
class EmbedOptions:
    output_types: tuple[str, ...] = DEFAULT_OUTPUT_TYPES
    profile: str | None = None
    normalize: bool | None = None
    is_query: bool = False
    muvera: MuveraParams | None = None  # already validated (see sie.frontend.muvera)
    lora: str | None = None  # a LoRA adapter from the model's `loras` (checked by the route)


@dataclass(frozen=True, slots=True)
class Embedded:
    """Float32 results in request order; a field is None when that output was not asked for."""

    dense: np.ndarray | None  # [n, dim], normalized when the model says so (or MUVERA's FDE)
    sparse: list[tuple[np.ndarray, np.ndarray]] | None  # per item (int32 indices, float32 values)
    multivector: list[np.ndarray] | None  # per item [tokens, dim], each token vector normalized
    sparse_dims: int
    input_tokens: int
    tokenization_ms: float
    queue_ms: float
    inference_ms: float
    postprocessing_ms: float


def supported_outputs(config: ModelConfig, muvera: MuveraParams | None) -> set[str]:
    """What this request may ask for: the model's outputs, plus dense from MUVERA when it applies."""
    supported = set(config.output_types())
    if muvera is not None and "multivector" in supported:
        supported.add("dense")
    return supported


async def embed(state: FrontendState, name: str, texts: list[str], options: EmbedOptions) -> Embedded:
    slot, config = admit(state, name, len(texts), options.profile)
    family = family_of(config.family)
    profile = config.profile(options.profile)
    muvera = options.muvera
    wanted = set(options.output_types)
    from_muvera = muvera is not None and "dense" in wanted and "dense" not in config.output_types()
    kinds = {_KINDS[t] for t in wanted if not (t == "dense" and from_muvera)}
    if from_muvera:
        kinds.add(ResultKind.MULTIVECTOR)
    encoded, tokenization_ms = await tokenize(
        lambda: _tokenize(state, config, texts, options.is_query, options.profile), len(texts)
    )
    submitted = await submit(
        state,
        slot,
        encoded,
        op=Op.ENCODE,
        kinds=kinds,
        key=lora_config_key(config, options.profile or config.default_profile_name, options.lora),
        is_query=options.is_query and family.device_reads_is_query,
        tokenization_ms=tokenization_ms,
    )
    started = time.perf_counter()
    results = submitted.results
    normalize = profile.adapter_options.runtime.normalize if options.normalize is None else options.normalize
    multivector = None
    if ResultKind.MULTIVECTOR in kinds:
        raw = results.ragged[ResultKind.MULTIVECTOR]
        multivector = [l2_normalize(m) for m in raw] if normalize else raw
    dense = None
    if from_muvera and muvera is not None and multivector is not None:
        dense = fde(multivector, is_query=options.is_query, params=muvera)
    elif ResultKind.DENSE in kinds:
        rows = results.rows[ResultKind.DENSE]
        dense = l2_normalize(rows) if normalize else rows
    sparse = None
    if ResultKind.SPARSE in kinds:
        sparse = list(zip(results.indices, results.ragged[ResultKind.SPARSE], strict=True))
    return Embedded(
        dense=dense,
        sparse=sparse,
        multivector=multivector if "multivector" in wanted else None,
        sparse_dims=_sparse_dims(config),
        input_tokens=submitted.input_tokens,
        tokenization_ms=tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
        postprocessing_ms=(time.perf_counter() - started) * 1000,
    )


def _tokenize(
    state: FrontendState, config: ModelConfig, texts: list[str], is_query: bool, profile: str | None
) -> Encoded:
    if family_of(config.family).encode_tokenization == "colbert":
        colbert = state.tokenizers.derived(
            config,
            f"colbert:{profile}",
            lambda tokenizer: ColbertTokenization.for_model(tokenizer, config, profile),
        )
        return colbert.encode(texts, is_query)
    return state.tokenizers.get(config).encode(texts)


def _sparse_dims(config: ModelConfig) -> int:
    encode = config.tasks.encode
    if encode is None or encode.sparse is None or encode.sparse.dim is None:
        return 0
    return encode.sparse.dim
