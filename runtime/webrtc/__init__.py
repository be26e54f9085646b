"""WebRTC: calls as OpenAI's GA API has them (``calls.py``), the agent's voice as a media track
(``track.py``), and an aiortc client (``client.py``)."""
