"""``openrealtime talk``: a terminal voice client (SPEC RTC-3).

``conversation`` is the sans-I/O core (what the client does with each server message, key press
and playback tick) and ``commands`` what it asks for; ``runner`` the asyncio ``Talk`` that moves
audio and messages; ``audio`` the microphone/speaker boundary, ``portaudio`` its real side
(``sounddevice``) and ``wav`` its stand-ins for tests; ``terminal`` the transcript printer and
keyboard; ``cli`` the command line.
"""

from __future__ import annotations

from runtime.talk.conversation import TalkConversation, TalkMode
from runtime.talk.runner import Talk

__all__ = ["Talk", "TalkConversation", "TalkMode"]
