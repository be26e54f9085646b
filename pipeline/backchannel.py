"""Is what the user said over the answer a real turn, or a backchannel or noise?

Theory of operation
-------------------
While the assistant speaks, sound from the user first *holds* the answer (``pipeline.turns``
Rule 3); the engine transcribes the sound and asks ``is_real_turn``. Only a real turn
interrupts; anything else lets the answer resume where it paused and leaves no trace.

Rule 1 — no words is no turn. An empty transcript, or one that is only punctuation, a
bracketed sound description (Whisper writes "(coughing)", "[MUSIC]", "*sighs*", "♪"), or one of
the phrases Whisper is known to produce from noise and silence (``_NOISE_PHRASES``) is not a
turn.

Rule 2 — backchannels. A transcript made only of backchannel phrases — listener feedback that
asks for nothing: "uh-huh", "mm-hmm", "ok", "right", "yeah", "I see", "got it", "thanks", 嗯,
对, 好的, 是的, 明白 … (``_EN_BACKCHANNELS``, ``_ZH_BACKCHANNELS``), repeated or mixed ("yeah
yeah", "ok, right", "嗯嗯，对对") — is not a turn. Words that stop or redirect ("no", "wait",
"stop", "不对", "等一下") are not backchannels. Chinese phrases are matched on the text with
spaces and punctuation removed; English on its lower-case words.

Rule 3 — everything else with a word in it is a real turn. The lists are closed-class words of
English and Mandarin (with traditional forms, as Whisper writes them), not phrases chosen for a
test set.
"""

from __future__ import annotations

import re

_EN_BACKCHANNELS = frozenset(
    {"uh huh", "uh-huh", "uhhuh", "mm hmm", "mm-hmm", "mmhmm", "mhm", "mm", "mmm", "hmm", "hm",
     "uh", "um", "ah", "oh", "ooh", "aha", "ok", "okay", "k", "right", "alright", "all right",
     "yeah", "yea", "yes", "yep", "yup", "sure", "i see", "got it", "gotcha", "cool", "nice",
     "great", "good", "exactly", "true", "indeed", "thanks", "thank you", "of course",
     "makes sense", "that makes sense", "i know", "wow", "oh okay", "oh ok", "oh right",
     "oh yeah", "oh i see", "ah okay", "ah ok", "ah i see", "uh huh yeah"}
)  # fmt: skip
_ZH_BACKCHANNELS = (
    "嗯哼", "嗯", "恩", "哦", "噢", "喔", "啊", "呀", "哎", "欸", "对对", "对", "對", "好的",
    "好", "行", "是的", "是", "没错", "沒錯", "明白", "明白了", "知道", "知道了", "了解",
    "懂了", "可以", "谢谢", "謝謝", "原来如此", "原來如此", "这样啊", "這樣啊", "然后呢",
)  # fmt: skip
"""Matched greedily from the start of the text, longest first, until nothing is left."""
_NOISE_PHRASES = frozenset(
    {"you", "thank you for watching", "thanks for watching", "please subscribe", "bye",
     "字幕由amara.org社区提供", "请不吝点赞订阅转发打赏支持明镜与点点栏目", "中文字幕",
     "谢谢观看", "謝謝觀看", "字幕", "優優獨播劇場——youyoutvcom"}
)  # fmt: skip
"""What Whisper tends to write for noise and silence (cleaned as Rule 1 cleans text)."""

_NOISE_SQUASHED = frozenset(re.sub(r"[\s,.!?'—-]+", "", phrase) for phrase in _NOISE_PHRASES)
_SOUND_DESCRIPTION = re.compile(r"\([^)]*\)|\[[^\]]*\]|（[^）]*）|\*[^*]*\*|♪+")
_SEPARATORS = re.compile(r"[\s,，、.。!！?？;；:：…~～\-—–'\"“”‘’「」]+")
_EN_WORD = re.compile(r"[a-z]+(?:[-'][a-z]+)*")
_ZH_ORDERED = sorted(_ZH_BACKCHANNELS, key=len, reverse=True)
_EN_LONGEST = max(len(p.split()) for p in _EN_BACKCHANNELS)


def is_real_turn(text: str) -> bool:
    """Whether ``text`` (the transcript of sound over the answer) should interrupt it."""
    cleaned = _SOUND_DESCRIPTION.sub(" ", text.lower())
    squashed = _SEPARATORS.sub("", cleaned).replace(".", "")
    if not squashed or squashed in _NOISE_SQUASHED:
        return False
    return not _only_backchannels(cleaned)


def _only_backchannels(cleaned: str) -> bool:
    words = _EN_WORD.findall(cleaned)
    if words and not _covered_by_english(words):
        return False
    return _covered_by_chinese(_SEPARATORS.sub("", _EN_WORD.sub(" ", cleaned)))


def _covered_by_english(words: list[str]) -> bool:
    """The words split into backchannel phrases (longest match first)."""
    i = 0
    while i < len(words):
        for size in range(min(_EN_LONGEST, len(words) - i), 0, -1):
            if " ".join(words[i : i + size]) in _EN_BACKCHANNELS:
                i += size
                break
        else:
            return False
    return True


def _covered_by_chinese(text: str) -> bool:
    i = 0
    while i < len(text):
        for phrase in _ZH_ORDERED:
            if text.startswith(phrase, i):
                i += len(phrase)
                break
        else:
            return False
    return True


__all__ = ["is_real_turn"]
