"""The GLiNER2 frontend's rows against gliner2's own processor (ids, word and marker positions),
and its field-spec parsing against gliner2's, on the tiny model's tokenizer."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend import gliner2_structure as structure
from sie.frontend.gliner2 import Gliner2Prompts, Schema, model_text
from tests.tiny_models.gliner2 import load_reference, make_gliner2

pytest.importorskip("gliner2")

TEXTS = [
    "John Smith lives in New York",
    "Mail a.b@c.org or visit https://x.org/a?b=1 @handle!",
    "",
    "ÀÉÎ straße 3/4/2021 — ok?",
    "   spaced   out   ",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner2(tmp_path_factory.mktemp("gliner2-frontend"))


@pytest.fixture(scope="module")
def processor(folder: Path) -> Any:
    return load_reference(folder).processor


def reference_row(processor: Any, text: str, schema: dict[str, Any]) -> Any:
    """What gliner2's collator builds for one text (it appends the "." first)."""
    return processor.transform_and_format(model_text(text), copy.deepcopy(schema))


def our_row(folder: Path, text: str, schema: Schema, prefix: list[str] | None = None) -> tuple[Any, Any]:
    encoded, [words] = Gliner2Prompts.from_dir(folder, 512).encode([text], [schema], prefix or [])
    assert encoded.aux is not None
    return encoded, words


def roles_of(record: Any) -> np.ndarray:
    """The aux our frontend should send for gliner2's record: word numbers and marker roles."""
    roles = np.zeros(len(record.input_ids), np.int64)
    for n, position in enumerate(record.text_word_first_positions, start=1):
        roles[position] = n
    for j, positions in enumerate(record.schema_special_positions):
        roles[positions] = -(j + 1)
    return roles


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            Schema("entities", "entities", ("person", "New York city")),
            {"entities": {"person": "", "New York city": ""}},
        ),
        (
            Schema("classification", "sentiment", ("positive", "negative")),
            {
                "classifications": [
                    {"task": "sentiment", "labels": ["positive", "negative"], "true_label": ["N/A"]}
                ]
            },
        ),
    ],
    ids=["entities", "classification"],
)
def test_rows_match_gliner2s_processor(
    folder: Path, processor: Any, text: str, ours: Schema, theirs: dict[str, Any]
) -> None:
    record = reference_row(processor, text, theirs)
    encoded, words = our_row(folder, text, ours)
    np.testing.assert_array_equal(encoded.input_ids, record.input_ids)
    np.testing.assert_array_equal(encoded.aux, roles_of(record))
    assert words.spans == list(zip(record.start_token_idx, record.end_token_idx, strict=True))


def test_structure_rows_match_gliner2s_processor(folder: Path, processor: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "who"},
            "mood": {"type": "string", "enum": ["happy", "sad"]},
            "size": {"type": "string", "enum": ["big", "small"], "title": "how big"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    fields = structure.parse_output_schema(schema)
    specs = [structure._field_spec(name, d) for name, d in schema["properties"].items()]
    reference = load_reference(folder)
    built = reference.create_schema()
    builder = built.structure(structure.ROOT)
    for spec in specs:
        name, dtype, choices, description = reference._parse_field_spec(spec)
        assert structure.parse_spec(spec) == structure.Field(
            name, dtype, tuple(choices) if choices else None, description
        )
        builder.field(name, dtype=dtype, choices=choices, description=description)
    record = reference_row(processor, TEXTS[0], built.build())
    order = record.schema_tokens_list[0][5::2][: len(fields)]  # gliner2's field order: ( [P] name ( [C] f ...
    ours, prefix = structure.prompt(fields, order)
    assert ours.tokens() == record.schema_tokens_list[0]
    encoded, words = our_row(folder, TEXTS[0], ours, prefix)
    assert list(words.prefix) == record.text_tokens[: len(prefix)]
    np.testing.assert_array_equal(encoded.input_ids, record.input_ids)
    np.testing.assert_array_equal(encoded.aux, roles_of(record))


@pytest.mark.parametrize(
    "labels", [["[E] person"], ["a [SEP_TEXT] b"], ["x" * 129]], ids=["marker", "separator", "too-long"]
)
def test_labels_that_would_break_the_row_are_refused(labels: list[str]) -> None:
    from sie.frontend.gliner2 import check_field_names

    with pytest.raises(InvalidInput):
        check_field_names(labels, "labels")


def test_a_text_past_the_window_is_refused(folder: Path) -> None:
    from sie.errors import InputTooLong

    entities = [Schema("entities", "entities", ("person",))]
    prompts = Gliner2Prompts.from_dir(folder, 8)  # 8 words, 32 sub-tokens
    _, [words] = prompts.encode(["one two three four five six seven eight"], entities)
    assert len(words.spans) == 8 and words.n_read == 8  # gliner2's max_len drops the "." it added
    with pytest.raises(InputTooLong, match="at most 8 words"):
        prompts.encode(["word " * 9], entities)
    with pytest.raises(InputTooLong, match="tokens"):
        prompts.encode(["pneumonoultramicroscopicsilicovolcanoconiosis " * 4], entities)
    with pytest.raises(InvalidInput, match="task prompt"):
        Gliner2Prompts.from_dir(folder, 512, max_prompt_tokens=8).encode(
            ["hi"], [Schema("entities", "entities", ("person", "place", "thing"))]
        )
