"""SIE_ATTENTION_BACKEND and SIE_DEFAULT_COMPUTE_PRECISION as the device process applies them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoModel

from sie.gpu_proc import attention
from sie.gpu_proc.adapters.common import compute_dtype, from_pretrained
from tests.gpu_proc.tiny import tiny_config


@pytest.fixture
def bert_dir(tmp_path: Path) -> Path:
    import transformers

    torch.manual_seed(0)
    transformers.BertModel(tiny_config("bert")).save_pretrained(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def restore_choice() -> Iterator[None]:
    before = attention.AttentionChoice.requested
    yield
    attention.AttentionChoice.requested = before


@pytest.mark.parametrize(
    ("requested", "dtype", "on_cuda", "flash", "expected"),
    [
        ("auto", torch.float16, True, True, "flash_attention_2"),
        ("auto", torch.float32, True, True, "sdpa"),  # flash needs half precision
        ("auto", torch.float16, True, False, "sdpa"),  # flash_attn not installed
        ("auto", torch.bfloat16, False, True, "sdpa"),  # no CUDA
        ("flash_attention_2", torch.float16, False, True, "sdpa"),
        ("flash_attention_2", torch.bfloat16, True, True, "flash_attention_2"),
        ("sdpa", torch.float16, True, True, "sdpa"),
        ("eager", torch.float32, False, False, "eager"),
    ],
)
def test_resolution_falls_back_as_sie_does(
    monkeypatch: pytest.MonkeyPatch,
    requested: str,
    dtype: torch.dtype,
    on_cuda: bool,
    flash: bool,
    expected: str,
) -> None:
    monkeypatch.setattr(attention, "flash_available", lambda: flash)
    assert attention.resolve(requested, dtype, on_cuda) == expected


def test_the_device_never_builds_cudnn_attention_graphs() -> None:
    # cuDNN's SDPA builds a graph per new shape (about 40 ms on an H200); a server's shapes vary.
    torch.backends.cuda.enable_cudnn_sdp(True)
    attention.configure_attention("auto")
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()


def test_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown attention backend"):
        attention.configure_attention("magic")


@pytest.mark.parametrize("requested", ["eager", "sdpa", "auto"])
def test_models_load_with_the_configured_backend(bert_dir: Path, requested: str) -> None:
    attention.configure_attention(requested)
    model = from_pretrained(AutoModel, bert_dir, torch.float32)
    assert model.config._attn_implementation == ("sdpa" if requested == "auto" else requested)


def test_cpu_runs_bfloat16_when_asked_and_float32_otherwise(bert_dir: Path) -> None:
    cpu = torch.device("cpu")
    assert compute_dtype(cpu, None) == torch.float32
    assert compute_dtype(cpu, "float16") == torch.float32  # slow or missing on CPUs
    assert compute_dtype(cpu, "bfloat16") == torch.bfloat16
    assert compute_dtype(torch.device("cuda", 0), None) == torch.float16
    ids = torch.randint(4, 100, (2, 9))
    full = from_pretrained(AutoModel, bert_dir, torch.float32)(input_ids=ids).last_hidden_state
    half = from_pretrained(AutoModel, bert_dir, torch.bfloat16)(input_ids=ids).last_hidden_state
    assert half.dtype == torch.bfloat16
    cosine = torch.nn.functional.cosine_similarity(half.float().flatten(1), full.flatten(1))
    assert bool((cosine > 0.99).all()), cosine
