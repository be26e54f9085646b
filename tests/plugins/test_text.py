"""Chunking keeps sentences whole; terms are Chinese bigrams and English whole words."""

from __future__ import annotations

import pytest

from plugins.text import (
    COMMON_WEIGHT,
    AnswerType,
    answer_type,
    background_weight,
    chunk_text,
    holds_answer,
    parse_query,
    sentences,
    stem,
    terms,
)


def test_sentences_split_at_chinese_and_english_punctuation_and_line_breaks() -> None:
    text = "退货期限为 7 天。包装要完整!Version 3.5 is out. Is it? Yes\n新的一行"
    assert sentences(text) == [
        "退货期限为 7 天。",
        "包装要完整!",
        "Version 3.5 is out.",
        "Is it?",
        "Yes",
        "新的一行",
    ]


def test_chunks_never_cut_a_sentence() -> None:
    sentence_zh = "星河商店的退货期限为签收后七天。"
    sentence_en = "Returns are accepted within seven days of delivery."
    text = " ".join([sentence_zh, sentence_en] * 20)
    pieces = chunk_text(text, target_chars=100, max_chars=200)
    assert len(pieces) > 5
    for piece in pieces:
        assert len(piece) <= 200
        rest = piece
        while rest:  # every chunk is whole sentences, nothing else
            for sentence in (sentence_zh, sentence_en):
                if rest.startswith(sentence):
                    rest = rest[len(sentence) :].lstrip()
                    break
            else:
                raise AssertionError(f"a cut sentence in {piece!r}")


def test_a_sentence_longer_than_the_maximum_is_cut_at_a_comma() -> None:
    text = "，".join(["很长的句子"] * 60) + "。"
    pieces = chunk_text(text, target_chars=50, max_chars=100)
    assert all(len(p) <= 100 for p in pieces)
    assert "".join(pieces) == text


def test_headings_open_chunks_and_carry_over() -> None:
    text = (
        "# Handbook\n\n## Hours\n\nOpen at 8. " + "Closed on Sunday. " * 8 + "\n\n## Wi-Fi\n\nAsk."
    )
    pieces = chunk_text(text, target_chars=80, max_chars=200)
    assert pieces[0].startswith("Handbook\nHours\nOpen at 8.")
    assert all(p.startswith("Handbook\nHours\n") for p in pieces[:-1])
    assert pieces[-1] == "Wi-Fi\nAsk."


def test_terms_are_bigrams_and_stemmed_words() -> None:
    assert terms("退货期限") == ["退货", "货期", "期限"]
    assert terms("Parking permits, PARKED cars") == ["park", "permit", "park", "car"]
    assert terms("税") == ["税"]
    assert stem("policies") == "policy" and stem("boxes") == "box" and stem("bus") == "bus"


@pytest.mark.parametrize(
    ("word", "base"),
    [("smoking", "smoke"), ("vaping", "vape"), ("closed", "close"), ("riding", "ride"),
     ("shopping", "shop"), ("showing", "show"), ("fixed", "fix"), ("opening", "open"),
     ("booking", "book")],
)  # fmt: skip
def test_a_silent_e_dropped_by_ing_or_ed_comes_back(word: str, base: str) -> None:
    # The new ferry guide: "Can I vape on the deck?" found nothing in "Smoking and vaping are
    # not allowed", and "smoke on my balcony" shared no word with "Smoking is not allowed".
    assert stem(word) == base == stem(base)


def test_filler_and_particles_do_not_count_in_a_query() -> None:
    query = parse_query("星河商店的退货期限是多少?")
    assert "多少" not in query.terms and "店的" not in query.terms
    assert {"星河", "商店", "退货", "期限"} <= set(query.terms)
    english = parse_query("What is the return policy?")
    assert english.terms == ("return", "policy")
    # Nothing but filler: the filler is what there is to search.
    assert parse_query("怎么").terms == ("怎么",)


def test_bigrams_across_filler_and_particles_are_dropped() -> None:
    # 足什 straddles 满足|什么, 限是 straddles 期限|是: neither names anything.
    assert parse_query("退货需要满足什么条件?").terms == ("退货", "满足", "条件")
    assert "限是" not in parse_query("退货期限是多少?").terms


def test_synonyms_cover_the_same_unit() -> None:
    query = parse_query("把商品寄回去的邮费由谁来出?")
    assert {"邮费", "运费"} <= set(query.terms)
    assert any({"邮费", "运费"} <= unit for unit in query.units)
    english = parse_query("Is the headset covered by the guarantee?")
    assert {"headset", "headphone", "guarantee", "warranty"} <= set(english.terms)
    assert len(english.units) == len(english.words) == 3  # headset, cover, guarantee


def test_everyday_words_weigh_less_than_rare_ones() -> None:
    assert background_weight("way") == background_weight("someone") == COMMON_WEIGHT
    assert background_weight("colour") > background_weight("right")
    assert background_weight("满足") < background_weight("私教") == 1.0
    assert background_weight("xinghe") == 1.0  # not a common word at all


def test_a_query_knows_its_language() -> None:
    # The rule itself: plugins.language.dominant_language (tests/plugins/test_language.py).
    assert parse_query("退款多久到账?").language == "zh"
    assert parse_query("How many days do I have to return an item to the 星河 shop?").language == (
        "en"
    )
    assert parse_query("12:30").language == ""


def test_answer_types_of_questions() -> None:
    assert answer_type("客服几点上班?") == AnswerType("clock")
    assert answer_type("What time does the gym open?") == AnswerType("clock")
    assert answer_type("How many vacation days do I get?") == AnswerType("duration", "long")
    assert answer_type("几个小时能充满?") == AnswerType("duration", "short")
    assert answer_type("How long is the warranty?") == AnswerType("duration")
    assert answer_type("积分的有效期是多久?") == AnswerType("duration")
    assert answer_type("How much does a pass cost?") == AnswerType("price")
    assert answer_type("My kids are 3 and 8. What do they pay for breakfast?") == (
        AnswerType("price")
    )
    assert answer_type("停车费收多少?") == AnswerType("price")
    assert answer_type("How much luggage can I take?") == AnswerType("number")
    assert answer_type("单笔订单最多可以使用多少积分?") == AnswerType("number")
    assert answer_type("Is alcohol reimbursed?") is None
    assert parse_query("How long is the warranty?").answer == AnswerType("duration")


def test_a_text_holds_an_answer_of_the_kind_asked() -> None:
    days = AnswerType("duration", "long")
    assert holds_answer("签收后 7 天内可以退货。", days)
    assert holds_answer("Claims are paid within two weeks.", days)
    assert not holds_answer("Employees fly economy on flights shorter than six hours.", days)
    assert holds_answer("Charging takes two hours.", AnswerType("duration"))
    assert holds_answer("A two-year limited warranty.", AnswerType("duration"))
    assert not holds_answer("Wipe the cushions with a damp cloth.", AnswerType("duration"))
    assert holds_answer("客服服务时间为工作日 09:00—18:00。", AnswerType("clock"))
    assert holds_answer("每天早上八点开门。", AnswerType("clock"))
    assert not holds_answer("团体课需要提前预约。", AnswerType("clock"))
    assert holds_answer("Permits cost 30 euros.", AnswerType("number"))
    assert holds_answer("每个订单最多换货一次。", AnswerType("number"))
    assert not holds_answer("Visitors wear a badge.", AnswerType("number"))
    # A price is an amount of money, or free: breakfast hours hold numbers and no price.
    price = AnswerType("price")
    assert holds_answer("It costs $18 per adult and $9 per child.", price)
    assert holds_answer("每瓶收取 50 元开瓶费。", price)
    assert holds_answer("Chargers are available at no extra charge.", price)
    assert holds_answer("驿站提供免费纸箱。", price)
    assert not holds_answer("Breakfast is served from 7:00 to 10:30 am.", price)
