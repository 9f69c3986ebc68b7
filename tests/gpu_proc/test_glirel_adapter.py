"""GLiREL end to end in process (the extract runner, the ring layout, a batcher and GlirelAdapter)
against the `glirel` package's own predict_relations on the same tiny random-weight models, called
as SIE's GLiREL adapter calls it; and the requests refused."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.errors import InvalidInput
from sie.frontend.glirel import GlirelInputs, decode_relations, flatten
from sie.frontend.tasks.extract import ExtractJob
from sie.frontend.tasks.extract_glirel import run_glirel
from sie.frontend.wire import Item
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.glirel import GlirelAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.gpu_proc.adapter_devices import in_process
from tests.tiny_models.glirel import MAX_LEN, THRESHOLD, make_glirel, model_yaml_glirel

glirel = pytest.importorskip("glirel")

SCORE_ATOL = 1e-4
WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")
# Model variants: the encoder, and the choices glirel_config.json makes.
VARIANTS: dict[str, dict[str, Any]] = {
    "deberta": {},
    "bert": {"arch": "bert", "label_embed_strategy": "label"},
    "markerv2-refined": {  # 64 wide: refining attends with hidden_size // 64 heads; projected from 32
        "hidden_size": 64,
        "span_marker_mode": "markerv2",
        "refine_prompt": True,
        "refine_relation": True,
        "label_embed_strategy": "ent_token",
    },
    "dot-norm-near": {"scorer": "dot_norm", "max_entity_pair_distance": 6},
}
LABELS = ["works at", "lives in", "founded", "works at"]  # a repeat, kept once as glirel keeps it


def entity(text: str, name: str, label: str = "ENT", nth: int = 0) -> dict[str, Any]:
    start = [m.start() for m in re.finditer(re.escape(name), text)][nth]
    return {"text": name, "label": label, "start": start, "end": start + len(name)}


T0 = "John Smith lives in New York and works at Springfield Elementary School since 2004."
T1 = "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron."
T2 = "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021."
T3 = "Tim Cook met Satya Nadella"
T4 = " ".join(f"w{i}" for i in range(MAX_LEN + 10)) + " Zed Alpha"  # past max_len
ITEMS: list[tuple[str, list[dict[str, Any]]]] = [
    (
        T0,
        [
            entity(T0, "John Smith"),
            entity(T0, "New York"),
            entity(T0, "Springfield Elementary School"),
            entity(T0, "2004"),
        ],
    ),
    (T1, [entity(T1, n) for n in ("Angela Merkel", "Paris", "Berlin", "Tokyo", "Emmanuel Macron")]),
    (
        T2,
        [
            entity(T2, "Jane O'Neil-Watts"),
            entity(T2, "María Gómez"),
            entity(T2, "São Paulo"),
            entity(T2, "Jane O'Neil-Watts"),
        ],
    ),  # the first entity twice: a pair of one span with itself
    (T3, [entity(T3, "Tim Cook"), entity(T3, "Satya Nadella"), entity(T3, "Cook met Satya")]),
    (T3, [entity(T3, "Tim")]),  # one entity: no pair
    (T4, [entity(T4, "w1"), entity(T4, "w12"), entity(T4, "Zed")]),  # Zed is past the words read
]

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: make_glirel(tmp_path_factory.mktemp(f"glirel-{name}"), **v) for name, v in VARIANTS.items()}


def load_reference(folder: Path) -> Any:
    """glirel's own loader (its from_pretrained wrapper predates the huggingface_hub installed)."""
    return glirel.GLiREL._from_pretrained(
        model_id=str(folder),
        revision=None,
        cache_dir=None,
        force_download=False,
        proxies=None,
        resume_download=False,
        local_files_only=True,
        token=None,
        map_location="cpu",
    )


@pytest.fixture(scope="module")
def references(folders: dict[str, Path]) -> dict[str, Any]:
    return {name: load_reference(folder) for name, folder in folders.items()}


def reference(
    model: Any, text: str, entities: list[dict[str, Any]], labels: list[str], threshold: float, top_k: int
) -> list[Any]:
    """What SIE's GLiREL adapter makes of glirel's predict_relations: words, entity word spans, and
    the caller's entity texts for head and tail."""
    words = [m for m in WORD.finditer(text)][:MAX_LEN]
    read_end = len(text) if len(words) == len(WORD.findall(text)) else words[-1].end()
    read = [e for e in entities if e["end"] <= read_end]
    ner = []
    for e in read:
        covered = [i for i, w in enumerate(words) if w.end() > e["start"] and w.start() < e["end"]]
        ner.append([covered[0], covered[-1], e["label"], e["text"]])
    if len(ner) < 2:
        return []
    tokens = [w.group() for w in words]
    with torch.inference_mode():
        found = model.predict_relations(tokens, labels, threshold=threshold, ner=ner, top_k=top_k)

    def name(position: list[int]) -> str:
        return next(
            e["text"] for e, span in zip(read, ner, strict=True) if position == [span[0], span[1] + 1]
        )

    return [(name(r["head_pos"]), name(r["tail_pos"]), r["label"], r["score"]) for r in found]


def ours(
    folder: Path, items: list[tuple[str, list[dict[str, Any]]]], labels: list[str], options: dict[str, Any]
) -> Any:
    state, target, devices = in_process(model_yaml_glirel("tiny/glirel", folder), folder)
    wire = [Item(text=text, metadata={"entities": entities}) for text, entities in items]
    job = ExtractJob(texts=[t for t, _ in items], labels=labels, options=options, items=wire)
    return asyncio.run(run_glirel(state, target, job)), devices


def assert_same(got: list[dict[str, Any]], want: list[Any]) -> None:
    assert [(r["head"], r["tail"], r["relation"]) for r in got] == [w[:3] for w in want]
    np.testing.assert_allclose([r["score"] for r in got], [w[3] for w in want], atol=SCORE_ATOL)


@deterministic
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize(("threshold", "top_k"), [(None, None), (0.5, 2), (0.2, 0)])
def test_relations_match_glirel(
    folders: dict[str, Path],
    references: dict[str, Any],
    variant: str,
    threshold: float | None,
    top_k: int | None,
) -> None:
    options = {k: v for k, v in (("threshold", threshold), ("top_k", top_k)) if v is not None}
    extracted, devices = ours(folders[variant], ITEMS, LABELS, options)
    unique = list(dict.fromkeys(LABELS))
    total = 0
    for (text, entities), got, echoed in zip(ITEMS, extracted.relations, extracted.entities, strict=True):
        want = reference(
            references[variant],
            text,
            entities,
            unique,
            threshold or THRESHOLD,
            10 if top_k is None else top_k,
        )
        assert_same(got, want)
        assert [(e["start"], e["end"], e["text"], e["score"]) for e in echoed] == [
            (e["start"], e["end"], e["text"], 1.0) for e in entities
        ]
        total += len(got)
    assert total >= 10  # not a comparison of empty lists
    # The item with one entity has no pair to score: it gets no forward.
    assert [batch.n_items for batch in devices.batches] == [len(ITEMS) - 1]


@deterministic
def test_items_of_other_requests_share_a_batch(folders: dict[str, Path], references: dict[str, Any]) -> None:
    """Rows with different relation types and entity counts in one batch, each as when alone."""
    folder = folders["markerv2-refined"]
    inputs = GlirelInputs.from_files(folder, folder / "tokenizer.json")
    jobs = [(ITEMS[0], ["works at"]), (ITEMS[1], ["lives in", "founded", "works at"]), (ITEMS[3], ["met"])]
    rows = [
        inputs.row(text, inputs.prompt(labels), [(e["start"], e["end"]) for e in ents])
        for (text, ents), labels in jobs
    ]
    adapter = load_adapter(parse_model_config(model_yaml_glirel("tiny/glirel", folder)), folder, "cpu")
    assert isinstance(adapter, GlirelAdapter)
    encoded = flatten(rows)
    pending = [
        PendingItem(0, 1, i, encoded.input_ids[s:e], None, 0.0, 0, aux=encoded.aux[s:e])
        for i, (s, e) in enumerate(zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True))
    ]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    lengths = [len(p.input_ids) for p in pending]
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))[
        ResultKind.TOKEN_SCORES
    ]
    offsets = output.row_offsets
    assert offsets is not None
    for i, (((text, ents), labels), row) in enumerate(zip(jobs, rows, strict=True)):
        names = [ents[k]["text"] for k in row.entities]
        got = decode_relations(
            output.values[offsets[i] : offsets[i + 1], 0], labels, row.spans, names, 0.0, -1
        )
        assert_same(got, reference(references["markerv2-refined"], text, ents, labels, 0.0, -1))


def test_prompt_and_words_match_glirels_tokenizer(
    folders: dict[str, Path], references: dict[str, Any]
) -> None:
    folder = folders["deberta"]
    inputs = GlirelInputs.from_files(folder, folder / "tokenizer.json")
    tokenizer = references["deberta"].token_rep_layer.bert_layer.tokenizer
    prompt = inputs.prompt(["works at", "lives in"])
    for text, ents in ITEMS:
        row = inputs.row(text, prompt, [(e["start"], e["end"]) for e in ents])
        words = WORD.findall(text)[:MAX_LEN]
        want = tokenizer([[*prompt, *words]], is_split_into_words=True)["input_ids"][0]
        assert row.ids[: row.n_tokens].tolist() == want
        assert int(row.aux.max()) == len(prompt) + len(words)  # every word numbered on one sub-token


@pytest.mark.parametrize(
    ("items", "labels", "options", "fragment"),
    [
        ([{"text": T3}], LABELS, {}, "needs the entities"),
        ([{"text": T3, "metadata": {"entities": {}}}], LABELS, {}, "must be a list"),
        ([{"text": T3, "metadata": {"entities": [entity(T3, "Tim")] * 257}}], LABELS, {}, "at most 256"),
        ([{"text": T3, "metadata": {"entities": [{"start": 0, "end": 99}]}}], LABELS, {}, "offsets"),
        ([{"text": T3, "metadata": {"entities": [{"start": 2, "end": 1}]}}], LABELS, {}, "offsets"),
        ([{"text": T3, "metadata": {"entities": [{"start": True, "end": 2}]}}], LABELS, {}, "offsets"),
        ([{"text": T3, "metadata": {"entities": [{"start": 3, "end": 4}]}}], LABELS, {}, "does not cover"),
        ([{"text": T3, "metadata": {"entities": ["Tim"]}}], LABELS, {}, "objects"),
        (
            [{"text": T3, "metadata": {"entities": [{**entity(T3, "Tim"), "label": 3}]}}],
            LABELS,
            {},
            "strings",
        ),
        ([{"text": T3, "metadata": {"entities": [entity(T3, "Tim")]}}], ["x" * 129], {}, "at most 128"),
        (
            [{"text": T3, "metadata": {"entities": [entity(T3, "Tim")]}}],
            [f"r{i}" for i in range(600)],
            {},
            "at most 1024 tokens",
        ),
        ([{"text": T3, "metadata": {"entities": [entity(T3, "Tim")]}}], LABELS, {"top_k": "3"}, "top_k"),
        (
            [{"text": T3, "metadata": {"entities": [entity(T3, "Tim")]}}],
            LABELS,
            {"threshold": 1.5},
            "threshold",
        ),
    ],
)
def test_bad_requests_are_400(
    folders: dict[str, Path],
    items: list[dict[str, Any]],
    labels: list[str],
    options: dict[str, Any],
    fragment: str,
) -> None:
    folder = folders["deberta"]
    state, target, _ = in_process(model_yaml_glirel("tiny/glirel", folder), folder)
    wire = [Item(text=i["text"], metadata=i.get("metadata")) for i in items]
    job = ExtractJob(texts=[i["text"] for i in items], labels=labels, options=options, items=wire)
    with pytest.raises(InvalidInput, match=fragment):
        asyncio.run(run_glirel(state, target, job))
