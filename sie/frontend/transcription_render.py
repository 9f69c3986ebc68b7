"""A Whisper transcript (the `data` of a /v1/extract item) in OpenAI's transcription formats.

json: {text, usage}; text: the bare transcript; verbose_json: task, language, duration, text,
segments and/or words, usage; srt and vtt: one cue per segment.
"""

from __future__ import annotations

from typing import Any

import msgspec

MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def render_transcription(data: dict[str, Any], response_format: str, granularities: list[str]) -> bytes:
    text: str = data["text"]
    seconds = data["duration_ms"] / 1000
    usage = {"type": "duration", "seconds": seconds}
    if response_format == "json":
        return msgspec.json.encode({"text": text, "usage": usage})
    if response_format == "text":
        return text.encode()
    if response_format in ("srt", "vtt"):
        return _subtitles(data.get("segments", []), vtt=response_format == "vtt").encode()
    verbose: dict[str, Any] = {
        "task": "transcribe",
        "language": data.get("language") or "unknown",
        "duration": seconds,
        "text": text,
    }
    if "segment" in granularities:
        verbose["segments"] = data.get("segments", [])
    if "word" in granularities:
        verbose["words"] = data.get("words", [])
    verbose["usage"] = usage
    return msgspec.json.encode(verbose)


def _subtitles(segments: list[dict[str, Any]], *, vtt: bool) -> str:
    separator = "." if vtt else ","
    cues = []
    for number, segment in enumerate(segments, start=1):
        times = f"{_clock(segment['start'], separator)} --> {_clock(segment['end'], separator)}"
        heading = times if vtt else f"{number}\n{times}"
        cues.append(f"{heading}\n{segment['text'].strip()}\n")
    body = "\n".join(cues)
    return f"WEBVTT\n\n{body}" if vtt else body


def _clock(seconds: float, separator: str) -> str:
    """hh:mm:ss,mmm (SRT) or hh:mm:ss.mmm (WebVTT)."""
    total_ms = max(0, round(seconds * 1000))
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{whole:02d}{separator}{millis:03d}"
