"""oneDNN linear layers on a CPU device: the same results as torch's own, and chosen only when faster."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.cpu_linear import (
    MIN_SPEEDUP,
    OneDnnLinear,
    onednn_wanted,
    probe_speedup,
    swap_linears,
    with_onednn_linears,
)
from sie.gpu_proc.runner import Runner
from sie.gpu_proc.threads import modules_of

from .test_dense_adapter import ARCHS, assert_close, reference
from .tiny import as_batch, model_config, random_items

HAS_ONEDNN = probe_speedup() is not None
needs_onednn = pytest.mark.skipif(not HAS_ONEDNN, reason="this torch build has no oneDNN linear")


def onednn_layer(linear: torch.nn.Linear) -> torch.nn.Linear:
    swapped = copy.deepcopy(linear)
    assert swap_linears([swapped]) == 1 and type(swapped) is OneDnnLinear
    return swapped


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "shape", [(5, 48), (3, 7, 48), (1, 48), (2, 3, 4, 48), (300, 48)], ids=lambda s: "x".join(map(str, s))
)
def test_float32_matches_torch_linear(shape: tuple[int, ...], bias: bool) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(48, 40, bias=bias)
    x = torch.randn(shape)
    with torch.inference_mode():
        torch.testing.assert_close(onednn_layer(linear)(x), F.linear(x, linear.weight, linear.bias))


@needs_onednn
def test_a_non_contiguous_input_and_bfloat16_match() -> None:
    torch.manual_seed(1)
    linear = torch.nn.Linear(48, 40)
    swapped = onednn_layer(linear)
    x = torch.randn(48, 9).t()  # [9, 48] strided
    assert not x.is_contiguous()
    with torch.inference_mode():
        torch.testing.assert_close(swapped(x), F.linear(x, linear.weight, linear.bias))
        linear_bf16, swapped_bf16, x_bf16 = linear.bfloat16(), swapped.bfloat16(), x.bfloat16()
        want = F.linear(x_bf16, linear_bf16.weight, linear_bf16.bias)
        torch.testing.assert_close(swapped_bf16(x_bf16), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_other_dtypes_and_vectors_take_torchs_path(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    linear = torch.nn.Linear(16, 8).to(dtype)
    swapped = onednn_layer(linear)
    for x in (torch.randn(4, 16, dtype=dtype), torch.randn(16, dtype=dtype)):
        with torch.inference_mode():
            torch.testing.assert_close(swapped(x), F.linear(x, linear.weight, linear.bias))


def test_gradients_flow_when_autograd_is_on() -> None:
    torch.manual_seed(3)
    linear = torch.nn.Linear(16, 8)
    swapped = onednn_layer(linear)
    x = torch.randn(4, 16, requires_grad=True)
    swapped(x).sum().backward()
    assert swapped.weight.grad is not None and x.grad is not None
    torch.testing.assert_close(x.grad, linear.weight.sum(0).expand(4, 16))


def test_only_plain_linear_layers_swap_and_the_weights_stay_the_same_tensors() -> None:
    class Custom(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), Custom(4, 4), torch.nn.Linear(4, 2))
    weights = [p.data_ptr() for p in model.parameters()]
    assert swap_linears([model, model[0]]) == 2  # a layer reached twice swaps once
    assert [type(m) for m in model] == [OneDnnLinear, torch.nn.ReLU, Custom, OneDnnLinear]
    assert all(isinstance(m, torch.nn.Linear) for m in (model[0], model[3]))
    assert [p.data_ptr() for p in model.parameters()] == weights
    assert set(model.state_dict()) == {"0.weight", "0.bias", "2.weight", "2.bias", "3.weight", "3.bias"}


@needs_onednn
@pytest.mark.parametrize("arch", ARCHS)
def test_a_served_model_with_onednn_layers_matches_plain_transformers(
    tiny_models: dict[str, Path], arch: str
) -> None:
    adapter = with_onednn_linears(load_adapter)(model_config(arch), tiny_models[arch], "cpu", None)
    layers = [m for module in modules_of(adapter) for m in module.modules() if isinstance(m, torch.nn.Linear)]
    assert layers and all(type(m) is OneDnnLinear for m in layers)
    items = random_items(24, seed=7)
    got = Runner(torch.device("cpu")).run_dense(adapter, as_batch(items))
    assert_close(got, reference(tiny_models[arch], items, "mean"))


@needs_onednn
def test_lora_injected_into_onednn_layers_matches_lora_on_torchs() -> None:
    peft = pytest.importorskip("peft")
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(4)
    plain = transformers.BertModel(config).eval()
    swapped = copy.deepcopy(plain)
    swap_linears([swapped])
    lora = peft.LoraConfig(r=4, target_modules=["query", "value"], init_lora_weights=False)
    ids = torch.randint(4, 100, (3, 11))
    with torch.inference_mode():
        base = plain(input_ids=ids).last_hidden_state
    torch.manual_seed(5)
    want_model = peft.inject_adapter_in_model(lora, plain).eval()
    torch.manual_seed(5)
    got_model = peft.inject_adapter_in_model(lora, swapped).eval()
    with torch.inference_mode():
        want = want_model(input_ids=ids).last_hidden_state
        got = got_model(input_ids=ids).last_hidden_state
    assert (got - base).abs().max() > 1e-3  # the adapter is in the path
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-5)


def test_torch_is_never_probed_and_onednn_is_taken_when_present() -> None:
    def no_probe() -> float | None:
        raise AssertionError("probed")

    assert onednn_wanted("torch", no_probe) is False
    assert onednn_wanted("onednn", lambda: 0.5) is True  # asked for: taken even when slower
    assert onednn_wanted("auto", lambda: MIN_SPEEDUP * 0.9) is False
    assert onednn_wanted("auto", lambda: MIN_SPEEDUP * 1.1) is True


def test_without_onednn_both_choices_fall_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert onednn_wanted("onednn", lambda: None) is False
        assert onednn_wanted("auto", lambda: None) is False
    assert "not available" in caplog.text


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown CPU linear backend"):
        onednn_wanted("mkl", lambda: 2.0)


def test_the_probe_leaves_the_thread_count_as_it_was() -> None:
    before = torch.get_num_threads()
    speedup = probe_speedup()
    assert torch.get_num_threads() == before
    assert speedup is None or speedup > 0
