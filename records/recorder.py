"""One session's recording: both sides on one timeline, encoded as it goes (SPEC REC-2).

Theory of operation
-------------------
Rule 1. The person's input is the clock. Every frame the session received, silence included,
        is appended to the left channel in order; the number of input samples so far is the
        recording's *now*. Nothing needs a wall clock, so a recording in virtual time is the
        same as one in real time.
Rule 2. The agent's audio goes to the right channel where it plays: from *now* when it is sent,
        or after the agent's audio still queued ahead of it (a client plays what it received
        in order). It is resampled once, from the session's output rate to ``RATE``; the end
        of an answer (``answered``) flushes the resampler, so every sample sent is placed in
        its own answer.
Rule 3. An interruption (``cut``) ends the agent's track at *now*: what was queued after it was
        cleared at the client and never heard.
Rule 4. Encoded as it goes: everything before *now* is final, so the frames up to *now* are
        encoded a block (``BLOCK`` samples) at a time, each frame's agent samples taken as it
        is heard: one encoder call a second, not one a frame. Stereo FLAC, 16 kHz, 16 bit:
        measured on this machine kind against Ogg Opus (libopus at complexity 0, 24 kbit/s),
        Opus cost 4.5 ms of CPU per second of audio, FLAC 0.8 ms — a session with the fake
        plugins costs 6.1 ms a second, and recording may add at most a fifth (SPEC REC-2
        allows FLAC for this).
Rule 5. The encoded bytes leave in pieces (``Piece``): the file's head (its first
        ``HEAD_BYTES``) last, as the encoder rewrites its stream info there when it closes,
        and once early, provisional, so a session that dies before ``close`` still leaves a
        readable file; every later piece once. Pieces are numbered; a store keeps the last
        of each number (``records.audio_store``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import soundfile
import soxr

RATE = 16_000
"""The recording's sample rate (the person's input rate; wideband speech)."""
HEAD_BYTES = 8192
"""The file's head: FLAC's stream info lives in its first 42 bytes."""
PIECE_BYTES = 64 * 1024
"""Encoded bytes are handed on in pieces of about this size."""
BLOCK = RATE
"""Samples encoded at once (Rule 4)."""

PCM = npt.NDArray[np.int16]


_SILENCE: dict[int, PCM] = {}


def _silence(samples: int) -> PCM:
    """A frame of silence for the agent's channel (one array per frame size, never written)."""
    found = _SILENCE.get(samples)
    if found is None:
        found = _SILENCE[samples] = np.zeros(samples, np.int16)
    return found


@dataclass(frozen=True, slots=True)
class Piece:
    """Encoded bytes: piece ``index`` of the file (0 is the head, Rule 5)."""

    index: int
    data: bytes
    final: bool = True
    """False for the provisional head (replaced by the final one at ``close``)."""


class _Sink(io.RawIOBase):
    """The encoder's file: the head kept in memory (rewritable), the rest handed on."""

    def __init__(self, hand_on: Callable[[Piece], None]) -> None:
        self.hand_on = hand_on
        self.head = bytearray()
        self.tail = bytearray()
        self.position = 0
        self.size = 0
        self.index = 1
        self.provisional = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = {io.SEEK_SET: offset, io.SEEK_CUR: self.position + offset,
                  io.SEEK_END: self.size + offset}[whence]  # fmt: skip
        if target != self.size and target + 0 >= HEAD_BYTES:
            raise OSError("a recording can only be rewritten in its head")
        self.position = target
        return target

    def write(self, data: bytes) -> int:  # type: ignore[override]
        data = bytes(data)
        if self.position < self.size:  # the encoder rewrites its head (Rule 5)
            end = self.position + len(data)
            if end > HEAD_BYTES:
                raise OSError("a recording can only be rewritten in its head")
            self.head[self.position : end] = data
        else:
            room = max(0, HEAD_BYTES - self.size)
            self.head += data[:room]
            self.tail += data[room:]
            self.size += len(data)
            if not self.provisional and self.size >= HEAD_BYTES:
                self.provisional = True
                self.hand_on(Piece(0, bytes(self.head), final=False))
            if len(self.tail) >= PIECE_BYTES:
                self.flush_tail()
        self.position += len(data)
        return len(data)

    def flush_tail(self) -> None:
        if self.tail:
            self.hand_on(Piece(self.index, bytes(self.tail)))
            self.index += 1
            self.tail.clear()


class Recorder:
    """Rules 1–5 for one session; ``hand_on`` receives the pieces (to seal and store)."""

    def __init__(self, hand_on: Callable[[Piece], None], *, output_rate: int) -> None:
        self._sink = _Sink(hand_on)
        self._file = soundfile.SoundFile(
            self._sink, mode="w", samplerate=RATE, channels=2, format="FLAC", subtype="PCM_16"
        )
        self._output = (
            None if output_rate == RATE else soxr.ResampleStream(output_rate, RATE, 1, "int16")
        )
        self._agent = np.zeros(0, np.int16)
        """The agent's samples from *now* on (queued, not yet played)."""
        self._person_block: list[PCM] = []
        self._agent_block: list[PCM] = []
        self._block = 0
        """Samples heard and not yet encoded (Rule 4)."""
        self.now = 0
        """Input samples so far: the recording's clock (Rule 1)."""
        self.closed = False

    @property
    def duration_ms(self) -> int:
        return self.now * 1000 // RATE

    @property
    def size(self) -> int:
        return self._sink.size

    @property
    def queued_ms(self) -> int:
        """Where the agent's audio sent so far stops playing (Rule 2)."""
        return (self.now + self._agent.size) * 1000 // RATE

    def heard(self, pcm: PCM) -> None:
        """One input frame at ``RATE`` (Rules 1, 4)."""
        if self.closed or pcm.size == 0:
            return
        n = pcm.size
        if self._agent.size:
            agent = self._agent[:n]
            self._agent = self._agent[n:]
            if agent.size < n:
                agent = np.concatenate((agent, np.zeros(n - agent.size, np.int16)))
            self._agent_block.append(agent)
        else:
            self._agent_block.append(_silence(n))
        self._person_block.append(pcm)
        self._block += n
        self.now += n
        if self._block >= BLOCK:
            self._encode()

    def _encode(self) -> None:
        if not self._block:
            return
        block = np.empty((self._block, 2), np.int16)
        block[:, 0] = np.concatenate(self._person_block)
        block[:, 1] = np.concatenate(self._agent_block)
        self._person_block.clear()
        self._agent_block.clear()
        self._block = 0
        self._file.write(block)

    def said(self, pcm: PCM) -> None:
        """Agent audio at the session's output rate, as it is sent (Rule 2)."""
        if self.closed or pcm.size == 0:
            return
        if self._output is not None:
            pcm = self._output.resample_chunk(pcm)
        self._agent = np.concatenate((self._agent, pcm.astype(np.int16, copy=False)))

    def answered(self) -> None:
        """An answer's audio is all sent: the resampler's held-back tail goes out now (else it
        would come out at the start of the next answer, or never)."""
        if self._output is not None and not self.closed:
            tail = self._output.resample_chunk(np.zeros(0, np.int16), last=True)
            self._agent = np.concatenate((self._agent, tail.astype(np.int16, copy=False)))
            self._output.clear()

    def cut(self) -> None:
        """The agent was interrupted: what is queued after *now* was never heard (Rule 3)."""
        self._agent = np.zeros(0, np.int16)
        if self._output is not None:
            self._output.clear()

    def close(self) -> None:
        """Encode the rest, then hand on the last piece and the final head (Rule 5)."""
        if self.closed:
            return
        self._encode()
        self.closed = True
        self._file.close()
        self._sink.flush_tail()
        self._sink.hand_on(Piece(0, bytes(self._sink.head)))
