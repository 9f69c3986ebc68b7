from __future__ import annotations

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.postprocess import apply_output_dtype, l2_normalize, wire_dtype_name


def test_l2_normalize_rows_and_zero_rows() -> None:
    x = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 0.0]], dtype=np.float32)
    out = l2_normalize(x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]], rtol=1e-6)
    assert not np.isnan(out).any()


def test_l2_normalize_unit_norm() -> None:
    x = np.random.default_rng(0).standard_normal((5, 384)).astype(np.float32)
    np.testing.assert_allclose(np.linalg.norm(l2_normalize(x), axis=1), 1.0, rtol=1e-6)


def test_float32_and_float16() -> None:
    x = np.array([[0.1, -0.2, 65504.0]], dtype=np.float32)
    assert apply_output_dtype(x, "float32").dtype == np.float32
    half = apply_output_dtype(x, "float16")
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, x.astype(np.float16))


def test_int8_per_row_with_round_half_to_even() -> None:
    # Each value / 127 * 127 lands exactly on .5 in float32: ties go to the even integer.
    x = np.array(
        [[127.0, 0.5, 1.5, 2.5, 3.5, -0.5, -2.5], [1.0, 0.5, -1.0, 0.0, 0.25, 0.75, 0.1]],
        dtype=np.float32,
    )
    out = apply_output_dtype(x, "int8")
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out[0], [127, 0, 2, 2, 4, 0, -2])
    # 0.5 * 127 = 63.5 -> 64; 0.25 * 127 = 31.75 -> 32; 0.75 * 127 = 95.25 -> 95; 12.7 -> 13
    np.testing.assert_array_equal(out[1], [127, 64, -127, 0, 32, 95, 13])


def test_int8_zero_row_and_negative_max() -> None:
    x = np.array([[0.0, 0.0, 0.0], [-2.0, 1.0, 0.0]], dtype=np.float32)
    out = apply_output_dtype(x, "int8")
    np.testing.assert_array_equal(out, [[0, 0, 0], [-127, 64, 0]])


def test_int8_matches_formula_on_random_rows() -> None:
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    expected = [[round(float(v)) for v in row / np.max(np.abs(row)) * np.float32(127)] for row in x]
    np.testing.assert_array_equal(apply_output_dtype(x, "int8"), expected)


def test_uint8_per_row_constant_row_and_ties() -> None:
    x = np.array([[-1.0, 0.0, 1.0, 0.5], [0.7, 0.7, 0.7, 0.7], [0.0, 2.0, 4.0, 1.0]], dtype=np.float32)
    out = apply_output_dtype(x, "uint8")
    assert out.dtype == np.uint8
    # (0 - -1) / 2 * 255 = 127.5 -> 128 (even); 0.75 * 255 = 191.25 -> 191
    np.testing.assert_array_equal(out[0], [0, 128, 255, 191])
    np.testing.assert_array_equal(out[1], [0, 0, 0, 0])
    # 0.25 * 255 = 63.75 -> 64
    np.testing.assert_array_equal(out[2], [0, 128, 255, 64])


@pytest.mark.parametrize("dtype", ["binary", "ubinary"])
def test_binary_packbits_msb_first(dtype: str) -> None:
    x = np.array(
        [[1.0, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 3.0], [-1.0] * 8 + [0.0]],
        dtype=np.float32,
    )
    out = apply_output_dtype(x, dtype)
    assert out.dtype == np.uint8 and out.shape == (2, 2)
    # bit = x > 0 (zero is 0), first element in the most significant bit, last byte zero-padded.
    np.testing.assert_array_equal(out, [[0b10010000, 0b10000000], [0, 0]])


def test_binary_length_is_ceil_dims_over_8() -> None:
    x = np.ones((3, 384), dtype=np.float32)
    assert apply_output_dtype(x, "binary").shape == (3, 48)
    assert apply_output_dtype(np.ones((1, 10), dtype=np.float32), "binary").tolist() == [[255, 192]]


def test_unknown_dtype() -> None:
    with pytest.raises(InvalidInput, match="Unsupported output_dtype: float64"):
        apply_output_dtype(np.zeros((1, 2), dtype=np.float32), "float64")


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        ("float32", "float32"),
        ("float16", "float16"),
        ("int8", "int8"),
        ("uint8", "uint8"),
        ("binary", "binary"),
        ("ubinary", "binary"),
    ],
)
def test_wire_dtype_name(dtype: str, name: str) -> None:
    assert wire_dtype_name(dtype) == name
