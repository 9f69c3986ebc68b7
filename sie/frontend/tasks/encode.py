"""The encode task's text path and its types: dense, sparse and multi-vector embeddings (and MUVERA,
SMVE) of texts, for any encode family (`tasks/embed.py` routes each request's items here or to images).

The device returns raw arrays; everything else happens here: family tokenization before (the route
has applied the templates), normalization and MUVERA / SMVE after. Output dtypes and rendering belong
to the route, since `/v1/embeddings` renders the same vectors differently.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import numpy as np

from sie.frontend.colbert import ColbertTokenization
from sie.frontend.muvera import MuveraParams, fde
from sie.frontend.pipeline import admit, submit, tokenize
from sie.frontend.postprocess import l2_normalize
from sie.frontend.smve import SmveParams
from sie.frontend.smve import encode as smve_encode
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.idf_queries import LookedUp, try_idf_queries
from sie.frontend.tokenize import Encoded
from sie.frontend.wire import DEFAULT_OUTPUT_TYPES
from sie.model_config import ModelConfig
from sie.shm.layout import Op, ResultKind

_KINDS = {"dense": ResultKind.DENSE, "sparse": ResultKind.SPARSE, "multivector": ResultKind.MULTIVECTOR}


@dataclass(frozen=True, slots=True)
class EmbedOptions:
    output_types: tuple[str, ...] = DEFAULT_OUTPUT_TYPES
    normalize: bool | None = None
    is_query: bool = False
    muvera: MuveraParams | None = None  # already validated (see sie.frontend.muvera)
    smve: SmveParams | None = None  # already validated (see sie.frontend.smve)
    instruction: str | None = None  # the request's, for a runner that builds its own prompt


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


def supported_outputs(
    config: ModelConfig, muvera: MuveraParams | None, smve: SmveParams | None = None
) -> set[str]:
    """What this request may ask for: the model's outputs, plus dense from MUVERA and sparse from
    SMVE when they apply."""
    supported = set(config.output_types())
    if muvera is not None and "multivector" in supported:
        supported.add("dense")
    if smve is not None and "multivector" in supported:
        supported.add("sparse")
    return supported


async def embed_texts(
    state: FrontendState, target: Target, texts: list[str], options: EmbedOptions
) -> Embedded:
    """Every text through the model (an inference-free sparse model's queries: no device at all)."""
    looked_up = await try_idf_queries(state, target, texts) if options.is_query else None
    if looked_up is not None:
        return _idf_embedded(target.config, looked_up)
    admit(state, target, len(texts))
    config = target.config
    muvera = options.muvera
    wanted = set(options.output_types)
    from_muvera = muvera is not None and "dense" in wanted and "dense" not in config.output_types()
    from_smve = options.smve is not None and "sparse" in wanted and "sparse" not in config.output_types()
    derived = {"dense": from_muvera, "sparse": from_smve}
    kinds = {_KINDS[t] for t in wanted if not derived.get(t)}
    if from_muvera or from_smve:
        kinds.add(ResultKind.MULTIVECTOR)
    encoded, tokenization_ms = await tokenize(
        lambda: _tokenize(state, target, texts, options.is_query), len(texts)
    )
    submitted = await submit(
        state,
        target,
        encoded,
        op=Op.ENCODE,
        kinds=kinds,
        is_query=options.is_query and target.family.device_reads_is_query,
        tokenization_ms=tokenization_ms,
    )
    started = time.perf_counter()
    results = submitted.results
    normalize = target.runtime.normalize if options.normalize is None else options.normalize
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
    if from_smve and options.smve is not None and multivector is not None:
        # Tens of milliseconds per item (a matmul with 65,536 anchors per token): off the event loop.
        sparse = await asyncio.to_thread(
            smve_encode, multivector, is_query=options.is_query, params=options.smve
        )
    elif ResultKind.SPARSE in kinds:
        sparse = list(zip(results.indices, results.ragged[ResultKind.SPARSE], strict=True))
    return Embedded(
        dense=dense,
        sparse=sparse,
        multivector=multivector if "multivector" in wanted else None,
        sparse_dims=options.smve.output_dim if from_smve and options.smve else _sparse_dims(config),
        input_tokens=submitted.input_tokens,
        tokenization_ms=tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
        postprocessing_ms=(time.perf_counter() - started) * 1000,
    )


def _tokenize(state: FrontendState, target: Target, texts: list[str], is_query: bool) -> Encoded:
    config, profile = target.config, target.profile_name
    if target.family.encode_tokenization == "colbert":
        colbert = state.tokenizers.derived(
            config,
            f"colbert:{profile}",
            lambda tokenizer: ColbertTokenization.for_model(tokenizer, config, profile),
        )
        return colbert.encode(texts, is_query)
    return state.tokenizers.for_profile(config, profile).encode(texts)


def _idf_embedded(config: ModelConfig, looked_up: LookedUp) -> Embedded:
    """Queries looked up in the model's IDF table: sparse only, and no device time."""
    return Embedded(
        dense=None,
        sparse=looked_up.sparse,
        multivector=None,
        sparse_dims=_sparse_dims(config),
        input_tokens=looked_up.input_tokens,
        tokenization_ms=looked_up.tokenization_ms,
        queue_ms=0.0,
        inference_ms=0.0,
        postprocessing_ms=0.0,
    )


def _sparse_dims(config: ModelConfig) -> int:
    encode = config.tasks.encode
    if encode is None or encode.sparse is None or encode.sparse.dim is None:
        return 0
    return encode.sparse.dim
