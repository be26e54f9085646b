"""Aligning Piper's phonemes with the words of the text, without a model."""

from __future__ import annotations

from pipeline.audio import WordTiming
from plugins.tts.piper_words import plan_words, text_words

# Phonemes of each word spoken on its own, as eSpeak would give them (one symbol per letter
# keeps the tests readable).
ALONE = {
    "in": "ɪn",
    "the": "ðə",
    "morning": "mɔːɹnɪŋ",
    "42": "fɔːɹɾi tuː",
    "I": "aɪ",
    "left": "lɛft",
    "Dr": "dɑːktɚ",
    "Smith": "smɪθ",
    "and": "ænd",
}


def phonemize_word(word: str) -> list[str]:
    return list(ALONE.get(word, word))


def sentence(phonemes: str) -> list[str]:
    return list(phonemes)


def spans(text: str, timings: tuple[WordTiming, ...]) -> list[str]:
    return [text[t.text_start : t.text_end] for t in timings]


def test_text_words_split_on_whitespace_and_drop_surrounding_punctuation() -> None:
    text = '"Dr. Smith," she said — it\'s 3:30.'

    assert [text[w.start : w.end] for w in text_words(text)] == [
        "Dr",
        "Smith",
        "she",
        "said",
        "it's",
        "3:30",
    ]


def test_a_phoneme_word_joining_two_words_is_split_where_their_phonemes_meet() -> None:
    text = "in the morning"
    plan = plan_words(text, [sentence("ɪnðə mɔːɹnɪŋ.")], phonemize_word)
    samples = [100] + [10] * len("ɪnðə mɔːɹnɪŋ.") + [100]

    timings = plan.timings(0, samples, sample_rate=1000)

    assert spans(text, timings) == ["in", "the", "morning"]
    assert [(t.start_ms, t.end_ms) for t in timings] == [
        (100.0, 120.0),
        (120.0, 140.0),
        (150.0, 220.0),
    ]


def test_a_number_spoken_as_two_words_is_one_timing() -> None:
    text = "I left 42"
    plan = plan_words(text, [sentence("aɪ lɛft fɔːɹɾi tuː")], phonemize_word)

    timings = plan.timings(0, [0] + [1] * len("aɪ lɛft fɔːɹɾi tuː") + [0], sample_rate=1000)

    assert spans(text, timings) == ["I", "left", "42"]
    assert (timings[2].start_ms, timings[2].end_ms) == (8.0, 18.0)


def test_unmatched_phoneme_words_fill_an_unclaimed_word_first() -> None:
    text = "I left 42 in"
    phonemes = "aɪ lɛft fɔːɹɾi tuː ɪn"
    plan = plan_words(text, [sentence(phonemes)], lambda w: [] if w == "42" else phonemize_word(w))

    timings = plan.timings(0, [0] + [1] * len(phonemes) + [0], sample_rate=1000)

    assert spans(text, timings) == ["I", "left", "42", "in"]
    assert (timings[2].start_ms, timings[2].end_ms) == (8.0, 18.0)


def test_unmatched_phoneme_words_without_a_gap_extend_the_previous_word() -> None:
    text = "I left & in"  # "&" is punctuation, not a word, but eSpeak says "and"
    phonemes = "aɪ lɛft ænd ɪn"

    timings = plan_words(text, [sentence(phonemes)], phonemize_word).timings(
        0, [0] + [1] * len(phonemes) + [0], sample_rate=1000
    )

    assert spans(text, timings) == ["I", "left", "in"]
    assert (timings[1].start_ms, timings[1].end_ms) == (3.0, 11.0)


def test_words_without_phonemes_merge_into_their_neighbour() -> None:
    text = "I left it"
    plan = plan_words(text, [sentence("aɪ lɛft")], phonemize_word)

    timings = plan.timings(0, [0] + [1] * len("aɪ lɛft") + [0], sample_rate=1000)

    assert spans(text, timings) == ["I", "left it"]


def test_sentences_split_at_abbreviations_get_their_own_words() -> None:
    text = "Dr. Smith left."
    plan = plan_words(text, [sentence("dɑːktɚ."), sentence("smɪθ lɛft.")], phonemize_word)

    first = plan.timings(0, [0] + [1] * len("dɑːktɚ.") + [0], sample_rate=1000)
    second = plan.timings(1, [0] + [1] * len("smɪθ lɛft.") + [0], sample_rate=1000)

    assert spans(text, first) == ["Dr"]
    assert spans(text, second) == ["Smith", "left"]


def test_text_without_words_has_no_timings() -> None:
    plan = plan_words("...", [sentence("...")], phonemize_word)

    assert plan.timings(0, [0, 1, 1, 1, 0], sample_rate=1000) == ()
