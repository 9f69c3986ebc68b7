"""LoRA adapters on MiniLM, end to end: each request's adapter is applied (equal to PEFT's merged
model), never mixed with another request's, loaded on first use (503 LORA_LOADING), and at most
`--max-loras-per-model` stay resident."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from sie.catalog import BUILTIN_MODELS_DIR
from tests.integration.reference import MINILM, minilm_dir, reference_embeddings
from tests.integration.server import Server, shm_names, wait_until
from tests.integration.texts import random_texts
from tests.integration.wire import decode, dense_matrix, encode

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]  # peft on transformers 5

TEXTS = ["A man is eating food.", "The new movie is awful.", "protein folding in the cell"]
ATOL = 1e-4


@dataclass
class Loras:
    server: Server
    merged: dict[str, Path]  # adapter -> a folder holding PEFT's merged model (the reference)


def make_lora(folder: Path, seed: int) -> Path:
    """A random rank-4 LoRA on MiniLM's attention, made by PEFT (B not zero, so it changes outputs)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel

    torch.manual_seed(seed)
    base = AutoModel.from_pretrained(minilm_dir(), local_files_only=True)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(folder)
    return folder


def merge(adapter: Path, folder: Path) -> Path:
    """PEFT's own merged model of MiniLM + `adapter`, with MiniLM's tokenizer, as a plain folder."""
    from peft import PeftModel
    from transformers import AutoModel

    base = AutoModel.from_pretrained(minilm_dir(), local_files_only=True)
    PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(minilm_dir() / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def loras(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loras]:
    root = tmp_path_factory.mktemp("lora")
    adapters = {name: make_lora(root / name, seed) for seed, name in enumerate(("de", "fr"))}
    merged = {name: merge(path, root / f"merged-{name}") for name, path in adapters.items()}
    broken = shutil.copytree(adapters["de"], root / "broken")
    weights = broken / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # an upload cut short
    raw = yaml.safe_load((BUILTIN_MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml").read_text())
    # Relative to the YAML file, or absolute.
    raw["loras"] = {"fr": "../fr", "de": str(adapters["de"]), "broken": str(broken)}
    models_dir = root / "models"
    models_dir.mkdir()
    (models_dir / "minilm.yaml").write_text(yaml.safe_dump(raw))
    server = Server(
        "--models-dir",
        str(models_dir),
        "--max-loras-per-model",
        "1",
        "--max-batch-wait-ms",
        "20",
        frontends=1,
    ).wait_ready()
    yield Loras(server, merged)
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


def with_lora(texts: list[str], **options: Any) -> dict[str, Any]:
    return {"items": [{"text": t} for t in texts], "params": {"options": options}}


def encode_with(server: Server, texts: list[str], **options: Any) -> np.ndarray:
    """Encode through an adapter, riding out LORA_LOADING as the SDK does."""

    def attempt() -> httpx.Response | None:
        response = encode(server.url, MINILM, with_lora(texts, **options), as_json=False)
        if response.status_code == 503 and response.json()["detail"]["code"] == "LORA_LOADING":
            return None
        return response

    response = wait_until(attempt, 60, f"LoRA {options} loaded", interval_s=0.1)
    assert response.status_code == 200, response.json()
    return dense_matrix(decode(response))


def assert_lora_loading(response: httpx.Response) -> None:
    assert response.status_code == 503, response.status_code
    assert response.json()["detail"]["code"] == "LORA_LOADING"
    assert response.headers["retry-after"] == "1"


def test_an_adapter_that_fails_to_load_fails_its_requests_and_nothing_else(loras: Loras) -> None:
    # First in the file: no adapter has loaded yet, so the failed load is the model's first injection.
    server = loras.server
    assert_lora_loading(encode(server.url, MINILM, with_lora(TEXTS, lora="broken"), as_json=True))

    def failed() -> httpx.Response | None:
        response = encode(server.url, MINILM, with_lora(TEXTS, lora="broken"), as_json=True)
        return None if response.status_code == 503 else response

    response = wait_until(failed, 60, "the broken adapter's load to fail", interval_s=0.1)
    assert response.status_code == 502, response.json()
    detail = response.json()["detail"]
    assert detail["code"] == "MODEL_LOAD_FAILED"
    assert "LoRA adapter 'broken' failed to load" in detail["message"]
    again = encode(server.url, MINILM, with_lora(TEXTS, lora="broken"), as_json=True)
    assert again.status_code == 502  # answered from the cool-down, not loaded again per request
    plain = encode(server.url, MINILM, {"items": [{"text": t} for t in TEXTS]}, as_json=False)
    assert plain.status_code == 200
    assert np.abs(dense_matrix(decode(plain)) - reference_embeddings(TEXTS, minilm_dir())).max() <= ATOL
    got = encode_with(server, TEXTS, lora="fr")
    assert np.abs(got - reference_embeddings(TEXTS, loras.merged["fr"])).max() <= ATOL


def test_first_use_loads_then_equals_peft_merged_and_differs_from_base(loras: Loras) -> None:
    server = loras.server
    assert_lora_loading(encode(server.url, MINILM, with_lora(TEXTS, lora="de"), as_json=True))
    got = encode_with(server, TEXTS, lora="de")
    want = reference_embeddings(TEXTS, loras.merged["de"])
    assert np.abs(got - want).max() <= ATOL
    base = reference_embeddings(TEXTS, minilm_dir())
    assert np.abs(got - base).max() > 100 * ATOL
    plain = encode(server.url, MINILM, {"items": [{"text": t} for t in TEXTS]}, as_json=False)
    assert np.abs(dense_matrix(decode(plain)) - base).max() <= ATOL  # the base model is untouched


def test_concurrent_requests_with_and_without_the_adapter_never_mix(loras: Loras) -> None:
    server = loras.server
    encode_with(server, TEXTS, lora="fr")  # resident before the burst
    texts = random_texts(24, 30, seed=4, numbered=True)
    want = {
        "fr": reference_embeddings(texts, loras.merged["fr"]),
        None: reference_embeddings(texts, minilm_dir()),
    }
    failures: list[str] = []

    def send(lora: str | None, start: int) -> None:
        picked = [(start + k) % len(texts) for k in range(6)]
        options = {"lora": lora} if lora else {}
        response = encode(server.url, MINILM, with_lora([texts[i] for i in picked], **options), as_json=False)
        if response.status_code != 200:
            failures.append(f"{lora}: {response.status_code}")
        elif np.abs(dense_matrix(decode(response)) - want[lora][picked]).max() > ATOL:
            failures.append(f"{lora} rows {picked} mixed up")

    threads = [threading.Thread(target=send, args=(("fr", None)[i % 2], i)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []


def test_alias_and_at_most_max_loras_resident(loras: Loras) -> None:
    server = loras.server
    encode_with(server, TEXTS, lora="fr")
    assert_lora_loading(encode(server.url, MINILM, with_lora(TEXTS, lora_id="de"), as_json=True))
    got = encode_with(server, TEXTS, lora_id="de")
    assert np.abs(got - reference_embeddings(TEXTS, loras.merged["de"])).max() <= ATOL
    # One adapter resident at most: loading `de` dropped `fr`, which loads again on its next use.
    assert_lora_loading(encode(server.url, MINILM, with_lora(TEXTS, lora="fr"), as_json=True))
    assert (
        np.abs(encode_with(server, TEXTS, lora="fr") - reference_embeddings(TEXTS, loras.merged["fr"])).max()
        <= ATOL
    )


def test_an_unknown_adapter_is_400(loras: Loras) -> None:
    response = encode(loras.server.url, MINILM, with_lora(TEXTS, lora="xx"), as_json=True)
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and "Unknown LoRA adapter 'xx'" in detail["message"]
    assert "broken, de, fr" in detail["message"]
