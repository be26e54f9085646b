"""The silence-timer endpointer: it has no opinion, so the turn coordinator's silence timer
alone decides when the user's turn is over."""

from __future__ import annotations

from plugins.audio import PCM
from plugins.contracts import EndpointVerdict

_NO_OPINION = EndpointVerdict(None)


class SilenceEndpointer:
    """Always answers "no opinion" at once (implements ``plugins.contracts.Endpointer``)."""

    async def predict(self, utterance: PCM) -> EndpointVerdict:
        """Return ``EndpointVerdict(None)`` without looking at the audio."""
        return _NO_OPINION
