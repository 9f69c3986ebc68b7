"""Florence2Adapter through the device path (ring message, batcher, runner), fed by the frontend's
resize and prompt tokens, against transformers' Florence2Processor + Florence2ForConditionalGeneration
`generate` on the same weights, one image at a time: generated ids equal, in both folder layouts
(microsoft's original one is read through the server's renaming of the weights), greedy and beam
search, with prompts of different lengths padded in one batch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.florence2 import Florence2Text, Generation, item_prompt
from sie.frontend.media.images import decode_image, preprocess
from sie.frontend.tasks.florence2 import generation_key, request_ids
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.florence2 import Florence2Adapter
from sie.gpu_proc.adapters.florence2_layout import UnsupportedLayout, native_state_dict
from sie.gpu_proc.outputs import Output
from sie.media_config import image_spec
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.florence2 import (
    make_florence2,
    make_florence2_original,
    model_yaml_florence2,
    original_name,
    reference_generate,
    reference_model,
    reference_processor,
)

IMAGES = [
    samples.jpeg(120, 90),
    samples.jpeg(64, 200, seed=3),
    samples.jpeg(96, 96, seed=4),
    samples.png_rgba(50, 70),
    samples.jpeg(300, 200, seed=5),
]
# (task, instruction, item text): prompts of different lengths, one batch.
ASKED = [
    ("<OD>", None, None),
    ("<OCR_WITH_REGION>", None, None),
    ("<DocVQA>", None, "What is the total amount on the invoice?"),
    ("<CAPTION_TO_PHRASE_GROUNDING>", None, "a cat"),
    ("<CAPTION>", None, None),  # the tiny model ends this one at once: rows of different lengths
]
LAYOUTS = ["native", "original", "original-safetensors", "original-saved-again"]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    native = make_florence2(tmp_path_factory.mktemp("florence2"))
    return {
        "native": native,
        "original": make_florence2_original(tmp_path_factory.mktemp("original"), native),
        "original-safetensors": make_florence2_original(
            tmp_path_factory.mktemp("original_st"), native, weights="safetensors"
        ),
        "original-saved-again": saved_again(
            make_florence2_original(tmp_path_factory.mktemp("again"), native)
        ),
    }


def saved_again(folder: Path) -> Path:
    """The original layout as a fine-tune saves it with its remote code (mynkchaudhry's DocVQA):
    safetensors holding one copy of the tied embeddings (here the output head's), and a text
    config naming its remote model type."""
    from safetensors.torch import save_file

    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    for name in ("model.shared", "model.encoder.embed_tokens", "model.decoder.embed_tokens"):
        del state[f"language_model.{name}.weight"]
    save_file(state, str(folder / "model.safetensors"))
    (folder / "pytorch_model.bin").unlink()
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["model_type"] = "florence2_language"
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def reference(folders: dict[str, Path]) -> Any:
    return reference_model(folders["native"])


def adapter_for(folder: Path) -> Florence2Adapter:
    loaded = load_adapter(parse_model_config(model_yaml_florence2("tiny/florence2", folder)), folder, "cpu")
    assert isinstance(loaded, Florence2Adapter)
    return loaded


def request(
    folder: Path, generation: Generation, asked: list[tuple[str, str | None, str | None]]
) -> TokenBatch:
    """What the frontend sends: resized pixels, and per item the generation header and its prompt."""
    spec = image_spec(folder, "florence2")
    text = Florence2Text.for_model(folder, folder / "tokenizer.json", spec)
    pixels = np.stack([preprocess(decode_image(d, None, 10**8, "Item").pixels, spec) for d in IMAGES])
    prompts = [item_prompt(task, instruction, None, item) for task, instruction, item in asked]
    ids = [request_ids(generation, text.prompt_ids(p.prompt, "Item")) for p in prompts]
    return TokenBatch(
        req_id=1,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=np.concatenate([[0], np.cumsum([len(i) for i in ids])]).astype(np.int32),
        input_ids=np.concatenate(ids),
        output_mask=OutputMask.TOKENS,
        config_key=generation_key("default", generation),
        pixels=pixels,
    )


def rows(output: Output) -> list[list[int]]:
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [
        output.values[bounds[i] : bounds[i + 1], 0].astype(np.int64).tolist() for i in range(output.n_items)
    ]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("num_beams", [1, 3])
def test_generated_ids_equal_generate(
    folders: dict[str, Path], reference: Any, layout: str, num_beams: int
) -> None:
    folder = folders[layout]
    generation = Generation("<OD>", max_new_tokens=20, num_beams=num_beams)
    got = rows(device_run(adapter_for(folder), request(folder, generation, ASKED))[ResultKind.TOKENS])
    processor = reference_processor(folder, original=layout != "native")
    for image, row, (task, _, item) in zip(IMAGES, got, ASKED, strict=True):
        prompt = f"{task}{item or ''}"
        want, _ = reference_generate(
            processor, reference, image, prompt, max_new_tokens=20, num_beams=num_beams
        )
        assert row == want, prompt
    lengths = {len(row) for row in got}
    assert len(lengths) > 1  # some answers end early: a batch's shorter rows come back unpadded


def test_the_generation_budget_is_the_requests(folders: dict[str, Path]) -> None:
    adapter = adapter_for(folders["native"])
    for budget in (3, 9):
        got = rows(
            device_run(adapter, request(folders["native"], Generation("<OD>", budget, 1), ASKED))[
                ResultKind.TOKENS
            ]
        )
        assert max(len(row) for row in got) == budget + 1  # the decoder's start token, then at most `budget`


def test_the_original_weights_map_back_to_the_native_names(folders: dict[str, Path]) -> None:
    """The native model's weights, renamed to microsoft's names (the test's own table) and back
    (the server's): every tensor returns under its own name, unchanged."""
    from safetensors.torch import load_file

    native = load_file(str(folders["native"] / "model.safetensors"))
    original = torch.load(folders["original"] / "pytorch_model.bin", weights_only=True)
    back = native_state_dict(original)
    vocab = original["language_model.model.shared.weight"].shape[0]
    for name, tensor in native.items():
        if original_name(name) is None:
            continue
        trimmed = tensor[:vocab] if tensor.shape[0] == vocab + 1 else tensor  # no <image> row there
        torch.testing.assert_close(back[name], trimmed, rtol=0, atol=0)
    # Copies of the shared embeddings microsoft's files hold; the native folder stores them once.
    shared = native["model.language_model.shared.weight"][:vocab]
    tied = {"lm_head.weight", *(f"model.language_model.{p}coder.embed_tokens.weight" for p in ("en", "de"))}
    for name in tied:
        torch.testing.assert_close(back[name], shared, rtol=0, atol=0)
    assert set(back) == set(native) | tied


def test_a_checkpoint_the_native_model_cannot_compute_is_refused(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    original = torch.load(folders["original"] / "pytorch_model.bin", weights_only=True)
    with pytest.raises(UnsupportedLayout, match="final_logits_bias"):
        native_state_dict({**original, "language_model.final_logits_bias": torch.ones(1, 3)})
    with pytest.raises(UnsupportedLayout, match="unexpected weight"):
        native_state_dict({**original, "vision_tower.head.weight": torch.ones(1)})
    folder = make_florence2_original(tmp_path / "untied", folders["native"])
    original["language_model.lm_head.weight"] = original["language_model.lm_head.weight"] * 2
    torch.save(original, folder / "pytorch_model.bin")
    with pytest.raises(UnsupportedLayout, match="output head"):
        adapter_for(folder)
