"""Query encodes of inference-free sparse models, answered in the frontend from `idf.json`.

A family whose spec says `idf_queries` may have models whose folder holds an `idf.json` (OpenSearch's
`doc-*` encoders): their queries get no forward. The lookup needs only the model's files, so a
query never goes to the device process, and needs no loaded model once the files are on disk; a
model whose files are not here yet goes the usual way (its load fetches them, the client retries).
"""

from __future__ import annotations

from dataclasses import dataclass

from sie.frontend.idf import IdfTable, SparseRow, read_idf_table
from sie.frontend.observe import note_work
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tokenize import TextTokenizer, TokenizerCache
from sie.model_config import ModelConfig
from sie.model_location import resolve_weights_dir, weights_present
from sie.shm.control import ModelState


@dataclass(frozen=True, slots=True)
class _Folder:
    """What a model folder says about queries: its IDF table, or None (queries take the forward)."""

    table: IdfTable | None


@dataclass(frozen=True, slots=True)
class LookedUp:
    sparse: list[SparseRow]
    input_tokens: int
    tokenization_ms: float


async def try_idf_queries(state: FrontendState, target: Target, texts: list[str]) -> LookedUp | None:
    """The queries' IDF vectors, or None when the model encodes queries on the device."""
    slot, config = target.slot, target.config
    if not target.family.idf_queries:
        return None
    # A loaded model's files are on disk; otherwise look (a few stats), never download here.
    if state.devices.model_state(slot) != ModelState.LOADED and not weights_present(config):
        return None
    table = _idf_table(state.tokenizers, config)
    if table is None:
        return None
    admit(state, target, len(texts), needs_device=False)
    tokenizer = state.tokenizers.for_profile(config, target.profile_name)
    ids, tokenization_ms = await tokenize(lambda: tokenizer.head_ids(texts, tokenizer.max_length), len(texts))
    sparse = table.lookup(ids)
    n_tokens = sum(map(len, ids))
    note_work(len(texts), n_tokens, tokenization_ms, 0.0, 0.0)
    return LookedUp(sparse, n_tokens, tokenization_ms)


def _idf_table(tokenizers: TokenizerCache, config: ModelConfig) -> IdfTable | None:
    def build(tokenizer: TextTokenizer) -> _Folder:
        return _Folder(read_idf_table(resolve_weights_dir(config), tokenizer.raw))

    return tokenizers.derived(config, "idf", build).table
