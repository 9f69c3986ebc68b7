"""LlmRerankerAdapter + Runner against transformers' AutoModelForCausalLM (the full vocabulary's
logits after each prompt, run alone) and sentence-transformers' CrossEncoder (the native stack), on
tiny random Qwen3 and Qwen2 models. The prompts are SIE's recipe (tests.tiny_models.llm_reranker)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.common import tensor_bytes
from sie.gpu_proc.adapters.llm_reranker import LlmRerankerAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.llm_reranker import make_llm_reranker, model_yaml_llm_reranker, sie_rows

CPU = torch.device("cpu")
ATOL = 1e-4
QUERY = "how long do cats sleep"
DOCS = [
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed higher on Friday.",
    "cats",
    "Kittens and older cats sleep even longer than adults.",
    "Python is a programming language that lets you work quickly.",
    "dogs sleep long hours " * 20,
    "A cat's ears keep turning towards sounds.",
]
# (arch, input_format, loadtime): SIE's Qwen3-Reranker and mxbai settings, and the other score mode.
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("qwen3", "qwen3", {"yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}),
    ("qwen3", "qwen3", {"yes_token": "yes", "no_token": "no", "score_mode": "logit_diff"}),
    ("qwen2", "mxbai", {}),  # SIE's defaults: "1" and "0", logit difference
    ("qwen2", "qwen3", {"yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}),
]
IDS = [f"{arch}-{fmt}-{lt.get('score_mode', 'default')}" for arch, fmt, lt in VARIANTS]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "qwen3": make_llm_reranker(tmp_path_factory.mktemp("qwen3"), seed=1, arch="qwen3"),
            "qwen2": make_llm_reranker(tmp_path_factory.mktemp("qwen2"), seed=2, arch="qwen2"),
            "native": make_llm_reranker(tmp_path_factory.mktemp("native"), seed=3, native=True),
        }


def load(folder: Path, input_format: str, loadtime: dict[str, Any]) -> LlmRerankerAdapter:
    raw = model_yaml_llm_reranker("tiny/llm", folder, input_format=input_format)
    raw["profiles"]["default"]["adapter_options"]["loadtime"] = loadtime
    adapter = load_adapter(parse_model_config(raw), folder, "cpu")
    assert isinstance(adapter, LlmRerankerAdapter)
    return adapter


def batch_of(rows: list[list[int]]) -> Batch:
    items = [PendingItem(0, 1, i, np.asarray(row, np.int32), None, 0.0, 0) for i, row in enumerate(rows)]
    lengths = [len(row) for row in rows]
    return Batch(
        GroupKey(0, int(Op.SCORE), mask_of({ResultKind.SCORES}), 0, 0), items, sum(lengths), max(lengths), 0.0
    )


def scores_of(adapter: LlmRerankerAdapter, rows: list[list[int]]) -> np.ndarray:
    output = Runner(CPU).run(adapter, batch_of(rows))[ResultKind.SCORES]
    assert output.values.dtype == np.float32 and output.values.shape == (len(rows), 1)
    return output.values[:, 0]


def full_logits(folder: Path, rows: list[list[int]]) -> torch.Tensor:
    """Every row alone (no padding) through the whole model: the logits after its last token."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return torch.stack([model(input_ids=torch.tensor([row])).logits[0, -1] for row in rows]).float()


def reference(folder: Path, rows: list[list[int]], loadtime: dict[str, Any]) -> np.ndarray:
    """SIE's score from the full logits: the yes and no texts' first ids, as SIE's tokenizer gives them."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    yes = tokenizer.encode(loadtime.get("yes_token", "1"), add_special_tokens=False)[0]
    no = tokenizer.encode(loadtime.get("no_token", "0"), add_special_tokens=False)[0]
    logits = full_logits(folder, rows)
    if loadtime.get("score_mode") == "log_softmax":
        result = torch.log_softmax(logits[:, [no, yes]], dim=-1)[:, 1].exp()
    else:
        result = logits[:, yes] - logits[:, no]
    return result.numpy()


@pytest.mark.parametrize(("arch", "input_format", "loadtime"), VARIANTS, ids=IDS)
def test_scores_match_the_full_causal_lm(
    folders: dict[str, Path], arch: str, input_format: str, loadtime: dict[str, Any]
) -> None:
    folder = folders[arch]
    rows = sie_rows(folder, input_format, QUERY, DOCS, max_length=160)
    assert len({len(row) for row in rows}) == len(rows)  # mixed lengths in one batch, one of them cut
    got = scores_of(load(folder, input_format, loadtime), rows)
    want = reference(folder, rows, loadtime)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert np.ptp(got) > 0.01  # the tiny model's scores really differ between documents


def padded(adapter: LlmRerankerAdapter) -> LlmRerankerAdapter:
    """The same adapter on the right-padded forward (the runner's length runs), not the packed one."""
    adapter._encoder._packed = None  # type: ignore[union-attr]
    adapter.is_padding_free = False
    return adapter


@pytest.mark.parametrize("run", ["as_loaded", "padded"])
def test_batch_equals_single_in_any_order(folders: dict[str, Path], run: str) -> None:
    arch, input_format, loadtime = VARIANTS[1]
    adapter = load(folders[arch], input_format, loadtime)
    adapter = padded(adapter) if run == "padded" else adapter
    rows = sie_rows(folders[arch], input_format, QUERY, [*DOCS, DOCS[2]], max_length=200)
    singles = np.concatenate([scores_of(adapter, [row]) for row in rows])
    assert singles[2] == singles[-1]
    order = np.random.default_rng(0).permutation(len(rows)).tolist()
    shuffled = scores_of(adapter, [rows[i] for i in order])
    np.testing.assert_allclose(shuffled, singles[order], rtol=0, atol=1e-5)
    np.testing.assert_allclose(singles, reference(folders[arch], rows, loadtime), rtol=0, atol=ATOL)


def test_native_stack_scores_as_sentence_transformers(folders: dict[str, Path]) -> None:
    from sentence_transformers import CrossEncoder

    folder = folders["native"]
    adapter = load(folder, "native", {})
    assert adapter.scorer.no_id is None and adapter.scorer.mode == "logit"
    rows = sie_rows(folder, "native", QUERY, DOCS, max_length=256)
    got = scores_of(adapter, rows)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
        want = np.asarray(model.predict([(QUERY, doc) for doc in DOCS], batch_size=3), np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    yes = model[1].true_token_id
    np.testing.assert_allclose(got, full_logits(folder, rows)[:, yes].numpy(), rtol=0, atol=ATOL)


def test_native_needs_the_saved_stack_and_its_chat_template(folders: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="LogitScore"):
        load(folders["qwen3"], "native", {})  # a bare causal LM: nothing names the score token
    template = folders["native"] / "chat_template.jinja"
    saved = template.read_text()
    try:
        template.write_text(saved.replace("'<|im_start|>system\\n'", "'<|im_start|>system\\n\\n'"))
        with pytest.raises(ValueError, match="chat template"):
            load(folders["native"], "native", {})
    finally:
        template.write_text(saved)


def test_untied_head_is_dropped_after_its_two_rows(folders: dict[str, Path]) -> None:
    adapter = load(folders["qwen2"], "mxbai", {})
    model = transformers.AutoModelForCausalLM.from_pretrained(folders["qwen2"])
    head = model.get_output_embeddings().weight
    assert adapter.memory_bytes() == tensor_bytes(model) - head.numel() * head.element_size()


def test_bad_score_settings_fail_the_load(folders: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="score_mode 'sigmoid'"):
        load(folders["qwen3"], "qwen3", {"score_mode": "sigmoid"})
    with pytest.raises(ValueError, match="encodes to no token"):
        load(folders["qwen3"], "qwen3", {"yes_token": ""})
