"""Speech to text (tiny Whisper) and object detection (tiny OWLv2) end to end on the media server,
over HTTP and through the real sie-sdk, against transformers on the same bytes and weights."""

from __future__ import annotations

import base64
import concurrent.futures
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import media_samples as samples
from tests.boxes import bbox_matches
from tests.integration.media_models import MAX_AUDIO_S, OWLV2, WHISPER
from tests.integration.server import Server
from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk
from tests.integration.wire import decode, post
from tests.tiny_models.owlv2 import reference_detections

pytestmark = pytest.mark.slow

RATE = 16000
SHORT = samples.tone(3.0, RATE)
NOISE = (np.random.default_rng(1).standard_normal(RATE * 32) * 0.3).astype(np.float32)  # two windows
LABELS = ["a photo of a cat", "the dog", "car"]
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90)]

Media = tuple[Server, dict[str, Path]]


def audio_item(data: bytes, fmt: str | None = None, as_json: bool = False) -> dict[str, Any]:
    return {"audio": {"data": base64.b64encode(data).decode() if as_json else data, "format": fmt}}


def extract(url: str, model: str, items: list[dict[str, Any]], as_json: bool = False, **params: Any) -> Any:
    return post(url, f"/v1/extract/{model}", {"items": items, "params": params}, as_json=as_json, timeout=120)


def extracted(
    url: str, model: str, items: list[dict[str, Any]], as_json: bool = False, **params: Any
) -> list[Any]:
    response = extract(url, model, items, as_json, **params)
    assert response.status_code == 200, response.text
    return decode(response)["items"]


class WhisperReference:
    """generate() on each 30 s window of a clip, as transformers users call it (cached per clip)."""

    def __init__(self, folder: Path) -> None:
        import transformers

        self.model: Any = transformers.WhisperForConditionalGeneration.from_pretrained(folder).eval()
        self.features = transformers.WhisperFeatureExtractor.from_pretrained(folder)
        self.tokenizer: Any = transformers.AutoTokenizer.from_pretrained(folder)
        self._done: dict[tuple[str, bool], list[tuple[list[int], str]]] = {}

    def windows(self, name: str, clip: np.ndarray, timestamps: bool) -> list[tuple[list[int], str]]:
        """Per window: the generated ids and the detected language token."""
        import torch

        key = (name, timestamps)
        if key not in self._done:
            out = []
            for start in range(0, len(clip), 30 * RATE):
                window = self.features(
                    clip[start : start + 30 * RATE],
                    sampling_rate=RATE,
                    return_attention_mask=True,
                    return_tensors="pt",
                )
                with torch.no_grad():
                    ids = self.model.generate(
                        window.input_features,
                        attention_mask=window.attention_mask,
                        return_timestamps=timestamps,
                    )
                    language = self.model.detect_language(input_features=window.input_features)[0]
                out.append((ids[0].tolist(), self.tokenizer.convert_ids_to_tokens(int(language))))
            self._done[key] = out
        return self._done[key]


@pytest.fixture(scope="module")
def whisper_reference(media: Media) -> WhisperReference:
    return WhisperReference(media[1][WHISPER])


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_transcripts_match_generate(media: Media, whisper_reference: WhisperReference, as_json: bool) -> None:
    server, _ = media
    clips = {"short": SHORT, "noise": NOISE} if not as_json else {"short": SHORT}
    items = [
        audio_item(samples.audio_bytes(clip, RATE, "WAV", "FLOAT"), "wav", as_json) for clip in clips.values()
    ]
    got = [entry["data"] for entry in extracted(server.url, WHISPER, items, as_json)]
    decode = whisper_reference.tokenizer.decode
    for (name, clip), data in zip(clips.items(), got, strict=True):
        windows = whisper_reference.windows(name, clip, timestamps=False)
        assert data["text"] == "".join(decode(ids, skip_special_tokens=True) for ids, _ in windows)
        assert f"<|{data['language']}|>" == windows[0][1]
        assert data["duration_ms"] == round(len(clip) / RATE * 1000)
        assert "segments" not in data and "words" not in data


def test_segments_and_words_follow_their_window(media: Media, whisper_reference: WhisperReference) -> None:
    server, _ = media
    items = [audio_item(samples.audio_bytes(NOISE, RATE, "FLAC"), "flac")]
    [entry] = extracted(server.url, WHISPER, items, options={"timestamp_granularities": ["segment", "word"]})
    data = entry["data"]
    windows = whisper_reference.windows("noise", NOISE, timestamps=True)
    want = [
        (o["text"], o["timestamp"][0] + 30 * w, o["timestamp"][1] + 30 * w)
        for w, (ids, _) in enumerate(windows)
        for o in whisper_reference.tokenizer.decode(ids, output_offsets=True)["offsets"]
    ]
    segments = data["segments"]
    assert [s["id"] for s in segments] == list(range(len(segments)))
    assert [s["text"] for s in segments] == [text for text, _, _ in want]
    np.testing.assert_allclose(
        [(s["start"], s["end"]) for s in segments], [(a, b) for _, a, b in want], atol=1e-6
    )
    assert data["words"] and "".join(w["word"] for w in data["words"]) == data["text"]
    assert all(w["start"] <= w["end"] for w in data["words"])


def test_named_language_and_bad_options(media: Media) -> None:
    server, _ = media
    item = audio_item(samples.audio_bytes(SHORT, RATE), "wav")
    [entry] = extracted(server.url, WHISPER, [item], options={"language": "de"})
    assert entry["data"]["language"] == "de"
    for options, message in [
        ({"language": "xx"}, "Unsupported language 'xx'"),
        ({"temperature": 2}, "temperature must be a number between 0 and 1"),
        ({"timestamp_granularities": ["char"]}, "timestamp_granularities"),
        ({"beam_size": 5}, "Unsupported options for speech to text: beam_size"),
    ]:
        response = extract(server.url, WHISPER, [item], options=options)
        assert response.status_code == 400 and message in response.json()["detail"]["message"], response.text


@pytest.mark.parametrize(
    ("model", "item", "params", "message"),
    [
        (WHISPER, {"text": "hello"}, {}, "Item 0 has text, which model"),
        (WHISPER, audio_item(b"not audio"), {}, "Item 0 audio: the bytes are not decodable audio"),
        (WHISPER, audio_item(b"RIFF", "m4a"), {}, "unsupported audio format 'm4a'"),
        (
            WHISPER,
            audio_item(samples.audio_bytes(samples.tone(MAX_AUDIO_S + 5, 8000), 8000, "FLAC")),
            {},
            f"longer than {MAX_AUDIO_S} s",
        ),
        (WHISPER, audio_item(samples.audio_bytes(SHORT, RATE)), {"labels": ["x"]}, "take no params.labels"),
        (OWLV2, {"images": [{"data": IMAGES[0]}]}, {}, "params.labels must list at least one label"),
        (
            OWLV2,
            {"images": [{"data": IMAGES[0]}] * 2},
            {"labels": ["x"]},
            "detection reads one image per item",
        ),
        (OWLV2, {"text": "a cat"}, {"labels": ["x"]}, "Item 0 has text, which model"),
    ],
    ids=["text", "undecodable", "unsupported", "too-long", "labels", "no-labels", "two-images", "owl-text"],
)
def test_bad_extract_input_is_a_400(
    media: Media, model: str, item: dict[str, Any], params: dict[str, Any], message: str
) -> None:
    server, _ = media
    response = extract(server.url, model, [item], **params)
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]["message"]


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_detections_match_transformers(media: Media, as_json: bool) -> None:
    server, folders = media
    items = [{"images": [{"data": base64.b64encode(d).decode() if as_json else d}]} for d in IMAGES]
    got = extracted(server.url, OWLV2, items, as_json, labels=LABELS, options={"threshold": 0.2})
    for image, entry in zip(IMAGES, got, strict=True):
        assert entry["entities"] == [] and entry["data"] == {}
        want = reference_detections(folders[OWLV2], image, LABELS, 0.2)
        assert len(entry["objects"]) == len(want["scores"]) > 0
        assert sorted(o["label"] for o in entry["objects"]) == sorted(LABELS[k] for k in want["labels"])
        np.testing.assert_allclose(
            sorted(o["score"] for o in entry["objects"]), sorted(want["scores"]), atol=1e-5
        )
        best = int(np.argmax(want["scores"]))
        assert bbox_matches(entry["objects"][0]["bbox"], want["boxes"][best]), entry["objects"][0]


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason="the sie-sdk venv is missing (scripts/install.sh --test)")
def test_the_sdk_transcribes_files_and_detects_in_images(media: Media, tmp_path: Path) -> None:
    server, _ = media
    wav, jpg = tmp_path / "clip.wav", tmp_path / "photo.jpg"
    wav.write_bytes(samples.audio_bytes(SHORT, RATE))
    jpg.write_bytes(IMAGES[0])
    actions = [
        {"op": "extract", "model": WHISPER, "items": [{"audio": {"path": str(wav)}}]},
        {
            "op": "extract",
            "model": OWLV2,
            "items": [{"images": [{"bytes": str(jpg)}]}],
            "kwargs": {"labels": LABELS},
        },
    ]
    transcript, detection = (ok(entry) for entry in run_sdk(server.url, actions))
    [http_transcript] = extracted(server.url, WHISPER, [audio_item(wav.read_bytes(), "wav")])
    assert transcript[0]["data"] == http_transcript["data"]
    [http_detection] = extracted(server.url, OWLV2, [{"images": [{"data": IMAGES[0]}]}], labels=LABELS)
    assert [o["label"] for o in detection[0]["objects"]] == [o["label"] for o in http_detection["objects"]]
    assert [o["bbox"] for o in detection[0]["objects"]] == [o["bbox"] for o in http_detection["objects"]]


def test_the_device_loop_beats_while_a_generation_runs(media: Media) -> None:
    from sie.shm.control import ControlBlock
    from sie.shm.names import Namespace

    server, _ = media
    control = ControlBlock.attach(Namespace(server.instance, server.process.pid).control())
    item = audio_item(samples.audio_bytes(NOISE, RATE, "FLAC"), "flac")
    staleness_s: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        words = {"timestamp_granularities": ["word"], "temperature": 0.5}
        pending = pool.submit(extract, server.url, WHISPER, [item] * 3, options=words)
        while not pending.done():
            staleness_s.append((time.monotonic_ns() - control.heartbeat_ns(0)) / 1e9)
            time.sleep(0.05)
        assert pending.result().status_code == 200
    # The generation runs on the inference thread for seconds; the loop thread beats all along
    # (it wakes at least every 0.25 s), so the supervisor never takes the device for stuck.
    assert len(staleness_s) >= 10  # the request ran long enough to tell
    assert max(staleness_s) < 1.0, max(staleness_s)
