"""The realtime session: one connection's read loop and handshake (``connection.py``), one client
message → the session's calls (``dispatch.py``), the voice session that outlives its
connections (``session.py``), the protocol (``protocol.py``), the outbox, resume and
continuity, the live registry and the links (``transport.py``)."""
