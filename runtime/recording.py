"""A session's recording (SPEC REC-1, REC-2): decided when the session starts, written as it
goes, closed with the session.

Rules
-----
1. A session is recorded when the deployment lets its tenant record (``recording_tenants``,
   the ceiling) and an admin switched its role on (``recording_enabled``). Otherwise nothing
   is recorded and nothing is said about recording.
2. The recording's row is written before the first frame is recorded (session, thread, owner,
   role, the store, the key id, ``retain_until`` from ``recording_retention_days``); the client
   is told in the session's ``openrealtime.recording`` field and by the extension event
   ``openrealtime.session.recording``.
3. The engine's ``AudioTap`` feeds the recorder (``records.recorder``); its pieces are sealed
   with the keyring (tenant, recording and piece number bound) and put in the audio store by
   one writer task, in order, off the audio path. The row's duration, size and key id follow
   every few pieces and at the end.
4. Beside the audio, the timeline (``records.timeline``): the speech events, transcripts,
   answers' audio and interruptions the session sends, placed on the recording's clock
   (``audio_start_ms`` is on the session's input stream, which the recording follows from its
   first recorded frame). Sealed, it goes with the row's progress.
5. A spoken notice (SPEC REC-1): a recorded session that answers in audio says
   ``recording_notice`` (or the default in the role's language) as its first output, out of
   band; its input is not recorded until the notice starts to play, so the person hears it
   before their first recorded word. The notice is in the recording.
6. A recording never fails its session: a piece that cannot be stored is logged (the
   recording's id and the error's kind, never audio) and counted in ``lost_pieces``; the
   conversation goes on.
7. Every process deletes expired recordings every ``recording_expiry_interval_s``
   (``RecordingExpiry``, ``records.expiry``); a failed run is logged and the next one tries
   again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from datetime import UTC, datetime, timedelta

from memory.crypto import Keyring
from pipeline import events as ev
from pipeline.audio import PCM, pcm_from_bytes
from records.audio_store import AudioStore, LocalAudioStore, seal_piece
from records.expiry import expire_recordings
from records.recorder import RATE, Piece, Recorder
from records.recordings import Recording, RecordingIndex
from records.s3_store import S3AudioStore, s3_client
from records.timeline import Timeline, seal_timeline
from runtime.config import Settings

log = logging.getLogger(__name__)

RECORDING_NOTICE = {
    "en": "This conversation is recorded.",
    "zh": "本次对话会被录音。",
}
"""Rule 5's default words, by the role's language (``recording_notice`` replaces them)."""

PROGRESS_EVERY = 8
"""Pieces between two notes of the row's duration and size (Rule 3)."""


class SessionRecording:
    """Rules 3–6: the ``AudioTap`` of one session."""

    def __init__(
        self,
        recording: Recording,
        *,
        keyring: Keyring,
        store: AudioStore,
        index: RecordingIndex,
        output_rate: int,
        notice: bool = False,
    ) -> None:
        self.recording = recording
        self.keyring = keyring
        self.store = store
        self.index = index
        self.recorder = Recorder(self._piece, output_rate=output_rate)
        self.timeline = Timeline()
        self.waiting_for_notice = notice
        """Rule 5: input is not recorded until the notice plays."""
        self._skipped = 0
        """Input samples received before the recording's first frame."""
        self.lost_pieces = 0
        self._pieces: asyncio.Queue[Piece | None] = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write())

    @property
    def id(self) -> str:
        return self.recording.id

    def heard(self, pcm: PCM) -> None:
        if self.waiting_for_notice:
            self._skipped += pcm.size
            return
        self.recorder.heard(pcm)

    def sent(self, event: ev.ServerEvent) -> None:
        """Rules 3–5: an event the session sent, as the recording keeps it."""
        recorder, timeline = self.recorder, self.timeline
        if isinstance(event, ev.OutputAudioDelta):
            self.waiting_for_notice = False
            start = recorder.queued_ms
            recorder.said(pcm_from_bytes(event.delta))
            timeline.agent_audio(event.item_id, start, recorder.queued_ms)
        elif isinstance(event, ev.OutputAudioDone):
            recorder.answered()
            timeline.agent_audio(event.item_id, recorder.queued_ms, recorder.queued_ms)
        elif isinstance(event, ev.ResponseInterrupted):
            timeline.agent_cut(recorder.duration_ms)
            recorder.cut()
        elif isinstance(event, ev.SpeechStarted):
            timeline.person_started(event.item_id, self._at(event.audio_start_ms))
        elif isinstance(event, ev.SpeechStopped):
            timeline.person_stopped(event.item_id, self._at(event.audio_end_ms))
        elif isinstance(event, ev.TranscriptionCompleted):
            timeline.person_said(event.item_id, event.transcript)
        elif isinstance(event, ev.OutputAudioTranscriptDelta):
            timeline.agent_said(event.item_id, event.delta, more=True)
        elif isinstance(event, ev.OutputAudioTranscriptDone):
            timeline.agent_said(event.item_id, event.transcript)

    def _at(self, stream_ms: int) -> int:
        """A position on the session's input stream, on the recording's clock (Rule 4)."""
        return max(0, stream_ms - self._skipped * 1000 // RATE)

    def _piece(self, piece: Piece) -> None:
        self._pieces.put_nowait(piece)

    async def _write(self) -> None:
        written = 0
        while (piece := await self._pieces.get()) is not None:
            r = self.recording
            try:
                sealed = seal_piece(self.keyring, r.tenant, r.id, piece.index, piece.data)
                await self.store.put(r.id, piece.index, sealed)
            except Exception as e:  # Rule 4
                self.lost_pieces += 1
                log.warning("recording %s: a piece was not stored (%s)", r.id, type(e).__name__)
                continue
            written += 1
            if written % PROGRESS_EVERY == 0:
                await self._progress(None)

    async def _progress(self, ended_at: datetime | None) -> None:
        try:
            await self.index.progress(
                self.recording.tenant,
                self.recording.id,
                duration_ms=self.recorder.duration_ms,
                size_bytes=self.recorder.size,
                key_id=self.keyring.active_id,
                ended_at=ended_at,
                timeline=seal_timeline(
                    self.keyring, self.recording.tenant, self.recording.id, self.timeline
                ),
            )
        except Exception as e:  # Rule 4
            log.warning("recording %s: its row was not updated (%s)", self.id, type(e).__name__)

    async def close(self) -> None:
        """The session ended: the last pieces and the final head stored, the row updated."""
        if self.recorder.closed:
            return
        self.recorder.close()
        self._pieces.put_nowait(None)
        await self._writer
        await self._progress(datetime.now(UTC))


def open_audio_store(settings: Settings) -> tuple[AudioStore, str]:
    """The configured audio store and its name (``recording_store``): the data directory's,
    or S3-compatible object storage."""
    if settings.recording_store == "s3":
        client = s3_client(
            endpoint_url=settings.recording_s3_endpoint_url,
            region=settings.recording_s3_region,
        )
        store = S3AudioStore(
            client, settings.recording_s3_bucket, prefix=settings.recording_s3_prefix
        )
        return store, "s3"
    return LocalAudioStore(settings.data_dir / "recordings"), "local"


async def start_recording(
    *,
    tenant: str,
    owner: str,
    session_id: str,
    thread_id: str,
    role_id: str,
    output_rate: int,
    keyring: Keyring,
    store: AudioStore,
    store_name: str,
    index: RecordingIndex,
    retention_days: int | None,
    notice: bool = False,
) -> SessionRecording:
    """Rule 2: the row, then the recorder."""
    now = datetime.now(UTC)
    recording = Recording(
        tenant=tenant,
        id=f"rec_{uuid.uuid4().hex}",
        owner=owner,
        session_id=session_id,
        thread_id=thread_id,
        role_id=role_id,
        store=store_name,
        key_id=keyring.active_id,
        started_at=now,
        retain_until=None if retention_days is None else now + timedelta(days=retention_days),
    )
    await index.add(recording)
    return SessionRecording(
        recording,
        keyring=keyring,
        store=store,
        index=index,
        output_rate=output_rate,
        notice=notice,
    )


class RecordingExpiry:
    """Rule 5."""

    def __init__(self, index: RecordingIndex, store: AudioStore, *, interval_s: float) -> None:
        self.index = index
        self.store = store
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            try:
                await expire_recordings(self.index, self.store, now=datetime.now(UTC))
            except Exception as e:  # the next run tries again
                log.warning("recordings: the expiry run failed (%s)", type(e).__name__)
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
