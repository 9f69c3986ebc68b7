"""The Qwen3-VL adapters through the device path against SIE's recipe run by transformers.

Rows go as the frontend sends them (sie.frontend.qwen3_vl: the prompt tokenized, placeholders
expanded, images resized and sent as bytes); the reference (tests.tiny_models.qwen3_vl) runs SIE's
conversation through the chat template, the image processor and Qwen3VLForConditionalGeneration one
item at a time, so no padding. Batches here mix image sizes, image counts and text-only rows.
float32, atol 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie import qwen3_vl as recipe
from sie.frontend.media.images import decode_image
from sie.frontend.media.submit import pixel_rows_batch
from sie.frontend.qwen3_vl import Qwen3VLRecipe, Row, RowTokens
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.adapters.qwen3_vl import Qwen3VLEmbeddingAdapter, Qwen3VLRerankerAdapter
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.qwen3_vl import (
    MAX_SEQUENCE_LENGTH,
    make_qwen3_vl,
    model_yaml_qwen3_vl_embedding,
    model_yaml_qwen3_vl_reranker,
    reference_embeddings,
    reference_scores,
)

ATOL = 1e-4
IMAGES = [
    samples.jpeg(640, 480),
    samples.png_rgba(50, 90),
    samples.webp(64, 64),
    samples.jpeg(700, 40, seed=2),
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def embedder_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl-embedding"), seed=0)


@pytest.fixture(scope="module")
def reranker_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl-reranker"), seed=1, tied=False)


@pytest.fixture(scope="module")
def embedder(embedder_folder: Path) -> Adapter:
    config = parse_model_config(model_yaml_qwen3_vl_embedding("tiny/qwen3-vl-embedding", embedder_folder))
    return load_adapter(config, embedder_folder, "cpu")


@pytest.fixture(scope="module")
def reranker(reranker_folder: Path) -> Adapter:
    config = parse_model_config(model_yaml_qwen3_vl_reranker("tiny/qwen3-vl-reranker", reranker_folder))
    return load_adapter(config, reranker_folder, "cpu")


def vl(folder: Path) -> Qwen3VLRecipe:
    from tokenizers import Tokenizer

    return Qwen3VLRecipe(
        Tokenizer.from_file(str(folder / "tokenizer.json")), recipe.vision_spec(folder), MAX_SEQUENCE_LENGTH
    )


def pixels(model: Qwen3VLRecipe, data: bytes) -> np.ndarray:
    return model.resized(decode_image(data, None, 10**8, "x").pixels, "x")


def embedding_rows(
    folder: Path, items: list[tuple[str | None, list[bytes]]], instruction: str
) -> list[RowTokens]:
    model = vl(folder)
    rows = []
    for text, images in items:
        prompt, start = recipe.embedding_prompt(instruction, len(images), text)
        row = Row("Item 0", prompt, start, start + len(text or ""))
        rows.append(model.tokens(row, [pixels(model, data) for data in images], MAX_SEQUENCE_LENGTH))
    return rows


def run(adapter: Adapter, rows: list[RowTokens], op: Op, kind: ResultKind) -> np.ndarray:
    """Text rows in one token request, image rows in one media request; results in `rows` order."""
    out = np.zeros((len(rows), 0), np.float32)
    for has_images in (False, True):
        at = [i for i, row in enumerate(rows) if bool(row.pixels) == has_images]
        if not at:
            continue
        part = [rows[i] for i in at]
        request = media_request(part, op, kind) if has_images else text_request(part, op, kind)
        values = device_run(adapter, request)[kind].values
        if out.shape[1] == 0:
            out = np.zeros((len(rows), values.shape[1]), np.float32)
        out[at] = values
    return out


def media_request(rows: list[RowTokens], op: Op, kind: ResultKind) -> TokenBatch:
    ids, aux, pixels = [r.input_ids for r in rows], [r.aux for r in rows], [r.pixels for r in rows]
    return pixel_rows_batch(ids, aux, pixels, op=op, kind=kind, slot=0, key=0)


def text_request(rows: list[RowTokens], op: Op, kind: ResultKind) -> TokenBatch:
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum([len(row.input_ids) for row in rows], out=offsets[1:])
    ids = np.concatenate([row.input_ids for row in rows])
    return TokenBatch(
        req_id=1, op=op, model_slot=0, offsets=offsets, input_ids=ids, output_mask=mask_of({kind})
    )


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


EMBED_ITEMS: list[tuple[str | None, list[bytes]]] = [
    ("a red square", []),
    (None, [IMAGES[0]]),
    ("cats sleep all day", [IMAGES[1]]),
    ("a blue circle and\n\nthe stock market closed higher", []),
    ("two pictures", [IMAGES[2], IMAGES[3]]),
    ("", [IMAGES[3]]),
]


def test_embeddings_match_sies_recipe_in_transformers(embedder_folder: Path, embedder: Adapter) -> None:
    assert isinstance(embedder, Qwen3VLEmbeddingAdapter)
    rows = embedding_rows(embedder_folder, EMBED_ITEMS, recipe.EMBED_DEFAULT_INSTRUCTION)
    got = unit(run(embedder, rows, Op.ENCODE, ResultKind.DENSE))
    np.testing.assert_allclose(got, reference_embeddings(embedder_folder, EMBED_ITEMS), atol=ATOL)


def test_an_instruction_is_shaped_as_sie_shapes_it(embedder_folder: Path, embedder: Adapter) -> None:
    items = EMBED_ITEMS[:3]
    asked = "  Find a photo of the query "  # stripped, and a period added
    rows = embedding_rows(embedder_folder, items, recipe.normalize_instruction(asked))
    got = unit(run(embedder, rows, Op.ENCODE, ResultKind.DENSE))
    want = reference_embeddings(embedder_folder, items, asked)
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert not np.allclose(want, reference_embeddings(embedder_folder, items), atol=ATOL)


def test_an_image_batch_equals_each_row_alone_in_any_order(embedder_folder: Path, embedder: Adapter) -> None:
    rows = [row for row in embedding_rows(embedder_folder, EMBED_ITEMS, "Go.") if row.pixels]
    batch = run(embedder, [*reversed(rows), rows[0]], Op.ENCODE, ResultKind.DENSE)
    alone = np.concatenate([run(embedder, [row], Op.ENCODE, ResultKind.DENSE) for row in reversed(rows)])
    np.testing.assert_allclose(batch[:-1], alone, atol=1e-5)
    np.testing.assert_allclose(batch[-1], batch[len(rows) - 1], atol=1e-5)  # the duplicate


def test_a_batch_over_the_token_budget_runs_in_pieces(embedder_folder: Path) -> None:
    raw = model_yaml_qwen3_vl_embedding("tiny/small-budget", embedder_folder)
    raw["profiles"]["default"]["max_batch_tokens"] = 300  # one image row's tokens at most
    small = load_adapter(parse_model_config(raw), embedder_folder, "cpu")
    rows = [row for row in embedding_rows(embedder_folder, EMBED_ITEMS, "Go.") if row.pixels]
    big = load_adapter(
        parse_model_config(model_yaml_qwen3_vl_embedding("tiny/e", embedder_folder)), embedder_folder, "cpu"
    )
    np.testing.assert_allclose(
        run(small, rows, Op.ENCODE, ResultKind.DENSE), run(big, rows, Op.ENCODE, ResultKind.DENSE), atol=1e-5
    )


RERANK_DOCS: list[tuple[str | None, bytes | None]] = [
    ("cats sleep all day", None),
    (None, IMAGES[0]),
    ("the stock market closed higher", IMAGES[1]),
    ("a red square", None),
]


@pytest.mark.parametrize("query", [("a red square", None), ("a blue circle", IMAGES[2]), (None, IMAGES[3])])
def test_scores_match_sies_recipe_in_transformers(
    reranker_folder: Path, reranker: Adapter, query: tuple[str | None, bytes | None]
) -> None:
    assert isinstance(reranker, Qwen3VLRerankerAdapter)
    model = vl(reranker_folder)
    query_pixels = None if query[1] is None else pixels(model, query[1])
    rows = []
    for text, image in RERANK_DOCS:
        prompt, start = recipe.reranker_prompt(
            recipe.RERANK_DEFAULT_INSTRUCTION, query[0], query_pixels is not None, text, image is not None
        )
        pictures = [
            p for p in (query_pixels, None if image is None else pixels(model, image)) if p is not None
        ]
        rows.append(
            model.tokens(Row("Item 0", prompt, start, start + len(text or "")), pictures, MAX_SEQUENCE_LENGTH)
        )
    logits = run(reranker, rows, Op.SCORE, ResultKind.SCORES)
    got = 1 / (1 + np.exp(logits[:, 0] - logits[:, 1]))
    want = reference_scores(reranker_folder, query, RERANK_DOCS)
    np.testing.assert_allclose(got, want, atol=ATOL)
    assert np.ptp(want) > 0.01  # the scores depend on the pair


def test_a_template_that_renders_another_prompt_is_refused(tmp_path: Path, embedder_folder: Path) -> None:
    import shutil

    folder = tmp_path / "other-template"
    shutil.copytree(embedder_folder, folder)
    (folder / "chat_template.jinja").write_text(
        "{%- for m in messages -%}<|im_start|>{{ m.role }}\n<|im_end|>\n{%- endfor -%}<|im_start|>assistant\n"
    )
    config = parse_model_config(model_yaml_qwen3_vl_embedding("tiny/other", folder))
    with pytest.raises(ValueError, match="chat template renders SIE's Qwen3-VL prompt differently"):
        load_adapter(config, folder, "cpu")


def test_image_bytes_that_do_not_match_the_prompt_fail_the_batch(
    embedder_folder: Path, embedder: Adapter
) -> None:
    (row,) = embedding_rows(embedder_folder, [("x", [IMAGES[2]])], "Go.")
    short = RowTokens(row.input_ids, row.aux, [row.pixels[0][:-32]], row.text_tokens)
    with pytest.raises(ValueError, match="image bytes"):
        run(embedder, [short], Op.ENCODE, ResultKind.DENSE)
