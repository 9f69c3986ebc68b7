"""The extract runner of GLiREL models: relations of the request's types between the entities each
item names, as SIE's GLiREL adapter takes and gives them.

`params.labels` are the relation types. Each item carries its entities in `metadata.entities`
(`text`, `label`, `start`, `end` in characters, optional `score`): at least one, at most
`MAX_ENTITIES`, each covering some of the text. The response echoes them as the item's entities
and adds the relations (`head`, `tail`, `relation`, `score`). Options: `threshold` (else the
profile's, else 0.3) and `top_k` (relations kept per entity pair, best first; 10 unless given, 0 or
less for all).
"""

from __future__ import annotations

from typing import Any

from sie.errors import InvalidInput
from sie.frontend.glirel import GlirelInputs, Row, decode_relations, flatten
from sie.frontend.pipeline import TokenResults, admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, submit_extract, threshold_option
from sie.frontend.wire import Item
from sie.shm.layout import ResultKind

DEFAULT_THRESHOLD = 0.3  # SIE's GLiREL adapter's
DEFAULT_TOP_K = 10
MAX_ENTITIES = 256  # SIE's: every ordered pair of an item's entities is scored


async def run_glirel(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = list(dict.fromkeys(job.labels or []))  # glirel keeps a repeated type once, first place
    threshold = threshold_option(job.options, target.runtime.threshold, default=DEFAULT_THRESHOLD)
    top_k = _top_k(job.options.get("top_k", DEFAULT_TOP_K))
    items = [_checked_item(item, text) for item, text in zip(job.items, job.texts, strict=True)]
    admit(state, target, len(job.texts))
    inputs = state.tokenizers.built(config, "glirel", lambda: GlirelInputs.for_model(config))
    prompt = inputs.prompt(labels)

    def encode() -> list[Row]:
        return [
            inputs.row(text, prompt, [(e["start"], e["end"]) for e in entities]) for text, entities in items
        ]

    rows, tokenization_ms = await tokenize(encode, len(items))
    # An item with fewer than two entities read has no pair to score: it needs no forward.
    scored = [i for i, row in enumerate(rows) if len(row.spans) > 1]
    relations: list[list[dict[str, Any]]] = [[] for _ in items]
    if not scored:
        return _extracted([entities for _, entities in items], relations, None, tokenization_ms)
    encoded = flatten([rows[i] for i in scored])
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    values = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    for position, i in enumerate(scored):
        row, (_, entities) = rows[i], items[i]
        names = [entities[k]["text"] for k in row.entities]
        relations[i] = decode_relations(values[position], labels, row.spans, names, threshold, top_k)
    return _extracted([entities for _, entities in items], relations, submitted, tokenization_ms)


def _extracted(
    entities: list[list[dict[str, Any]]],
    relations: list[list[dict[str, Any]]],
    submitted: TokenResults | None,
    tokenization_ms: float,
) -> Extracted:
    return Extracted(
        entities=entities,
        classifications=[[] for _ in entities],
        relations=relations,
        input_tokens=submitted.input_tokens if submitted is not None else 0,
        tokenization_ms=tokenization_ms,
        queue_ms=submitted.queue_ms if submitted is not None else 0.0,
        inference_ms=submitted.inference_ms if submitted is not None else 0.0,
    )


def _top_k(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("options.top_k must be an integer (0 or less: every relation of a pair)")
    return value


def _checked_item(item: Item, text: str) -> tuple[str, list[dict[str, Any]]]:
    """The item's text and its entities as the response echoes them, checked (a 400 otherwise)."""
    if item.text is None:
        raise InvalidInput("GLiREL items need text")
    found = (item.metadata or {}).get("entities", [])
    if not isinstance(found, list):
        raise InvalidInput("GLiREL item metadata.entities must be a list")
    if not found:
        raise InvalidInput("GLiREL needs the entities of each item in metadata.entities")
    if len(found) > MAX_ENTITIES:
        raise InvalidInput(f"GLiREL items may carry at most {MAX_ENTITIES} entities in metadata")
    return text, [_checked_entity(entity, text) for entity in found]


def _checked_entity(entity: Any, text: str) -> dict[str, Any]:
    if not isinstance(entity, dict):
        raise InvalidInput("GLiREL entities must be objects")
    start, end = entity.get("start"), entity.get("end")
    if not (_is_int(start) and _is_int(end) and 0 <= start < end <= len(text)):
        raise InvalidInput(
            "GLiREL entity metadata requires integer character offsets with "
            f"0 <= start < end <= {len(text)} (the text's length)"
        )
    if not text[start:end].strip():
        raise InvalidInput(f"GLiREL entity span [{start}, {end}) does not cover any text token")
    name, label, score = entity.get("text", ""), entity.get("label", ""), entity.get("score", 1.0)
    if not isinstance(name, str) or not isinstance(label, str):
        raise InvalidInput("GLiREL entities' text and label must be strings")
    if isinstance(score, bool) or not isinstance(score, int | float):
        raise InvalidInput("GLiREL entities' score must be a number")
    return {"text": name, "label": label, "score": float(score), "start": start, "end": end, "bbox": None}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
