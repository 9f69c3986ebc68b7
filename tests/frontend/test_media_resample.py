"""The compiled resize against Pillow's own on the same pixels: equal bit for bit, for both
filters the image processors use, both pass orders, growing and shrinking, with and without the
columns a centre crop drops; and left to Pillow where it cannot run."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from sie.frontend.media import resample

pytestmark = pytest.mark.skipif(resample.compiled() is None, reason="numba has no wheel here")

SIZES = [(640, 480), (480, 640), (224, 500), (1000, 290), (300, 3000), (97, 33), (64, 64)]
TARGETS = [(224, 224), (298, 224), (224, 298), (64, 64), (448, 448), (50, 37), (30, 200), (500, 40)]


def pixels(width: int, height: int) -> np.ndarray:
    rng = np.random.default_rng(width * 7919 + height)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def pillow(src: np.ndarray, width: int, height: int, filter_: int) -> np.ndarray:
    return np.asarray(Image.fromarray(src).resize((width, height), resample=filter_))


@pytest.mark.parametrize("filter_", [resample.BICUBIC, resample.BILINEAR], ids=["bicubic", "bilinear"])
@pytest.mark.parametrize("size", SIZES, ids=str)
def test_equals_pillow(size: tuple[int, int], filter_: int) -> None:
    src = pixels(*size)
    for width, height in [*TARGETS, (size[0], 224), (224, size[1])]:
        got = resample.resize(src, width, height, filter_)
        if got is None:  # only images narrower than the filter's window go to Pillow
            continue
        np.testing.assert_array_equal(
            got, pillow(src, width, height, filter_), err_msg=f"to {width}x{height}"
        )


@pytest.mark.parametrize(
    ("size", "target"),
    [
        ((640, 480), (224, 224)),
        ((1000, 4000), (224, 224)),
        ((224, 500), (28, 250)),
        ((300, 3000), (37, 1500)),
    ],
)
def test_both_pass_orders_are_pillows(size: tuple[int, int], target: tuple[int, int]) -> None:
    # Pillow 13 chooses the order by how much each side shrinks; a wrong order is off by levels.
    src = pixels(*size)
    got = resample.resize(src, *target, resample.BICUBIC)
    assert got is not None
    np.testing.assert_array_equal(got, pillow(src, *target, resample.BICUBIC))


def test_kept_columns_equal_the_whole_resize_cut() -> None:
    src = pixels(640, 480)
    got = resample.resize(src, 298, 224, resample.BICUBIC, left=37, kept=224)
    assert got is not None and got.shape == (224, 224, 3)
    np.testing.assert_array_equal(got, pillow(src, 298, 224, resample.BICUBIC)[:, 37:261])


def test_a_photo_takes_the_compiled_path() -> None:
    assert resample.resize(pixels(640, 480), 298, 224, resample.BICUBIC) is not None
    assert resample.resize(pixels(480, 640), 224, 224, resample.BILINEAR) is not None


@pytest.mark.parametrize(
    "filter_", [Image.Resampling.LANCZOS, Image.Resampling.BOX, Image.Resampling.NEAREST]
)
def test_other_filters_are_left_to_pillow(filter_: int) -> None:
    assert resample.resize(pixels(64, 64), 32, 32, int(filter_)) is None


def test_an_image_narrower_than_the_window_is_left_to_pillow() -> None:
    assert resample.resize(pixels(3, 300), 224, 224, resample.BICUBIC) is None


def test_a_frontend_loads_numba_only_when_it_resizes() -> None:
    # numba costs a process about 130 MB: text-only frontends must never import it.
    code = (
        "import sys; import sie.frontend.serve, sie.frontend.media.images; "
        "before = 'numba' in sys.modules; "
        "from sie.frontend.media import resample; resample.warm(); "
        "print(before, 'numba' in sys.modules)"
    )
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "True"]
