"""Donut's text half against transformers: the prompt's tokens (XLMRobertaTokenizer as transformers
rebuilds it), the decoded and cleaned sequence (batch_decode + SIE's cleaning), token2json
(DonutProcessor.token2json), SIE's entities from the fields, and the request's options."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.donut import DonutText, prompt_of
from sie.frontend.donut_json import entities_of, token2json
from sie.frontend.tasks.donut import donut_request
from sie.frontend.tasks.extract import ExtractJob
from sie.model_config import RuntimeOptions
from tests.tiny_models.donut import MAX_POSITIONS, added_tags, write_tokenizer

QUESTIONS = [
    "what is the total?",
    "  what  is\tthe tea \n price ",
    "the price.",
    "éclair 2 crème",  # pieces outside the vocabulary: <unk>
    "x" * 3,
]


def tokenizer_folder(folder: Path, **config: Any) -> Path:
    write_tokenizer(folder)
    if config:
        path = folder / "tokenizer_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    (folder / "config.json").write_text(json.dumps({"decoder": {"max_position_embeddings": MAX_POSITIONS}}))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenizer_folder(tmp_path_factory.mktemp("donut_text"))


@pytest.fixture(scope="module")
def text(folder: Path) -> DonutText:
    return DonutText.for_model(folder, folder / "tokenizer.json")


def reference_processor(folder: Path) -> Any:
    import transformers

    return transformers.DonutProcessor(
        image_processor=transformers.DonutImageProcessorPil(),
        tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
    )


def reference_sequence(processor: Any, ids: list[int]) -> str:
    """transformers' decode with SIE's cleaning."""
    decoded = processor.batch_decode([ids])[0]
    decoded = decoded.replace(processor.tokenizer.eos_token, "").replace(processor.tokenizer.pad_token, "")
    return re.sub(r"<s_\w+>", "", decoded, count=1).strip()


def test_prompts_are_sies() -> None:
    assert prompt_of("<s_cord-v2>", None) == "<s_cord-v2>"
    assert prompt_of("<s_cord-v2>", "a question") == "<s_cord-v2>"  # only DocVQA reads one
    assert prompt_of("<s_docvqa>", "") == "<s_docvqa>"
    assert prompt_of("<s_docvqa>", "q?") == "<s_docvqa><s_question>q?</s_question><s_answer>"


@pytest.mark.parametrize("task", ["<s_cord-v2>", "<s_docvqa>", "<s_rvlcdip>", "<s_other>", "plain words"])
def test_prompt_tokens_are_transformers(folder: Path, text: DonutText, task: str) -> None:
    tokenizer = reference_processor(folder).tokenizer
    for question in [None, *QUESTIONS]:
        prompt = prompt_of(task, question)
        want = tokenizer(prompt, add_special_tokens=False).input_ids
        assert text.encode(prompt).tolist() == want, prompt


def test_a_prompt_leaving_no_room_to_generate_is_a_400(text: DonutText) -> None:
    with pytest.raises(InvalidInput, match=f"reads at most {MAX_POSITIONS}"):
        text.encode(prompt_of("<s_docvqa>", " ".join(["the tea"] * 30)))
    with pytest.raises(InvalidInput, match=r"options\.task must not be empty"):
        text.encode("")


def random_ids(rng: random.Random, vocab_size: int) -> list[int]:
    return [rng.randrange(vocab_size) for _ in range(rng.randrange(0, 30))]


@pytest.mark.parametrize("clean_up", [False, True])
def test_sequences_are_transformers_decode_cleaned_as_sie(tmp_path: Path, clean_up: bool) -> None:
    folder = tokenizer_folder(tmp_path, clean_up_tokenization_spaces=clean_up)
    text, processor = DonutText.for_model(folder, folder / "tokenizer.json"), reference_processor(folder)
    rng = random.Random(0)
    for task in ["<s_cord-v2>", "<s_docvqa>"]:
        prompt = text.encode(prompt_of(task, "what is the total ?"))
        for _ in range(300):
            generated = random_ids(rng, text.tokenizer.get_vocab_size())
            want = reference_sequence(processor, [*prompt.tolist(), *generated])
            assert text.sequence(prompt, generated) == want, generated


SEQUENCES = [
    "<s_menu><s_nm> ice cream</s_nm><s_price>2</s_price><sep/><s_nm>tea</s_nm></s_menu>",
    "<s_nm>ice</s_nm><s_price>1</s_price></s_menu><s_total><s_total_price>1</s_total_price></s_total>",
    "<s_nm>a</s_nm><sep/><s_nm>b</s_nm><sep/><s_nm>c</s_nm>",  # objects at the top: a list
    "<s_class><receipt/></s_class>",  # a categorical value
    "<s_class><sep/></s_class><s_answer>a <sep/> b<sep/><form/></s_answer>",
    "<s_question>what</s_question><s_answer>two</s_answer>",
    "<s_cord-v2><s_menu><s_nm>x</s_nm>",  # opening tags without their ends
    "no fields at all",
    "",
    "<S_NM>upper</s_nm><s_price>1</S_PRICE>",
    "</s_nm>before<s_nm>after",
    "<s_menu><s_nm>a</s_nm><s_menu><s_nm>inner</s_nm></s_menu></s_menu>",
    "<s_a.b>dot</s_a.b><s_(x)>paren</s_(x)><s_",
    "<s_menu>\n<s_nm>multi\nline</s_nm>\n</s_menu>",
]


def test_token2json_is_transformers(folder: Path, text: DonutText) -> None:
    processor = reference_processor(folder)
    for sequence in SEQUENCES:
        assert token2json(sequence, text.added) == processor.token2json(sequence), sequence


def test_token2json_is_transformers_on_random_tag_soup(folder: Path, text: DonutText) -> None:
    processor = reference_processor(folder)
    pieces = [*added_tags(), " ice", " 2", "tea", "<sep/>", "</s>", "<pad>", " "]
    rng = random.Random(1)
    for _ in range(2000):
        sequence = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 25)))
        assert token2json(sequence, text.added) == processor.token2json(sequence), sequence


def entity(text: str, label: str) -> dict[str, Any]:
    return {"text": text, "label": label, "score": 1.0, "start": None, "end": None, "bbox": None}


def test_cord_fields_become_entities_by_path() -> None:
    parsed = {
        "menu": [{"nm": "ice", "price": "2"}, {"nm": "tea", "sub": {"nm": "milk"}}],
        "total": {"total_price": "2", "tags": ["a", "b"]},  # lists of plain values are skipped
        "cash": "5",
    }
    assert entities_of(parsed, "<s_cord-v2>") == [
        entity("ice", "menu[0].nm"),
        entity("2", "menu[0].price"),
        entity("tea", "menu[1].nm"),
        entity("milk", "menu[1].sub.nm"),
        entity("2", "total.total_price"),
        entity("5", "cash"),
    ]
    assert entities_of([{"nm": "a"}, {"nm": "b"}], "<s_cord-v2>") == [
        entity("a", "[0].nm"),
        entity("b", "[1].nm"),
    ]
    assert entities_of({"text_sequence": "x"}, "<s_cord-v2>") == [entity("x", "text_sequence")]


def test_docvqa_and_rvlcdip_give_their_one_field() -> None:
    assert entities_of({"question": "q", "answer": "42"}, "<s_docvqa>") == [entity("42", "answer")]
    assert entities_of({"question": "q"}, "<s_docvqa>") == []
    assert entities_of({"answer": ""}, "<s_docvqa>") == []
    assert entities_of({"raw": "x"}, "<s_docvqa>") == [entity("x", "answer")]
    assert entities_of({"class": "receipt"}, "<s_rvlcdip>") == [entity("receipt", "document_class")]
    assert entities_of([{"answer": "a"}], "<s_docvqa>") == []  # a list of objects has no answer
    assert entities_of({"nm": "a"}, "<s_synthdog>") == []  # other tasks: no entities


def job(options: dict[str, Any] | None = None, **fields: Any) -> ExtractJob:
    return ExtractJob(
        texts=[""], labels=fields.get("labels"), options=options or {}, instruction=fields.get("instruction")
    )


def test_options_default_to_the_profile_then_sies() -> None:
    runtime = RuntimeOptions(task="<s_docvqa>", max_new_tokens=64, instruction="profile question")
    assert donut_request(job(), RuntimeOptions()) == donut_request(
        job({"task": "<s_cord-v2>", "max_new_tokens": 512}), RuntimeOptions()
    )
    got = donut_request(job(), runtime)
    assert (got.task, got.question, got.max_new_tokens) == ("<s_docvqa>", "profile question", 64)
    got = donut_request(job({"instruction": "option question", "max_new_tokens": 5, "num_beams": 1}), runtime)
    assert (got.question, got.max_new_tokens) == ("option question", 5)
    got = donut_request(job({"instruction": "option question"}, instruction="the question"), runtime)
    assert got.question == "the question"  # params.instruction first, as in SIE


@pytest.mark.parametrize(
    ("options", "fields", "message"),
    [
        ({"num_beams": 2}, {}, "num_beams must be 1"),
        ({"num_beams": True}, {}, "num_beams must be 1"),
        ({"max_new_tokens": 0}, {}, "max_new_tokens must be a positive integer"),
        ({"max_new_tokens": "9"}, {}, "max_new_tokens must be a positive integer"),
        ({"max_new_tokens": True}, {}, "max_new_tokens must be a positive integer"),
        ({"task": 3}, {}, "options.task must be a task token"),
        ({"task": " "}, {}, "options.task must be a task token"),
        ({"instruction": ["q"]}, {}, "instruction must be a string"),
        ({"threshold": 0.5}, {}, "Unsupported options for Donut: threshold"),
        ({}, {"labels": ["total"]}, "take no params.labels"),
    ],
)
def test_bad_options_are_400s(options: dict[str, Any], fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        donut_request(job(options, **fields), RuntimeOptions())


def test_the_added_vocabulary_is_transformers(folder: Path, text: DonutText) -> None:
    assert text.added == set(reference_processor(folder).tokenizer.get_added_vocab())
    assert (text.eos, text.pad, text.max_positions) == ("</s>", "<pad>", MAX_POSITIONS)
    assert np.array_equal(text.encode("<s_cord-v2>"), [text.tokenizer.token_to_id("<s_cord-v2>")])
