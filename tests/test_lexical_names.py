"""One spelling for each stemmer and stopword list, however the flag or an older manifest names it."""
from __future__ import annotations

import itertools
import string

import pytest

from retriever.lexical import LexicalParams


@pytest.mark.parametrize("given, recorded", [
    ({"stemmer": "en"}, {"stemmer": "english"}), ({"stemmer": "eng"}, {"stemmer": "english"}),
    ({"stemmer": "de"}, {"stemmer": "german"}), ({"stemmer": "kraaij_pohlmann"}, {"stemmer": "dutch"}),
    ({"stopwords": "english"}, {"stopwords": "en"}), ({"stopwords": "de"}, {"stopwords": "german"}),
    ({"stopwords": "no"}, {"stopwords": "norwegian"}), ({"stemmer": None, "stopwords": None}, {}),
    ({"stemmer": "", "stopwords": ""}, {"stemmer": None, "stopwords": None}),
    ({"stemmer": "none", "stopwords": "None"}, {"stemmer": None, "stopwords": None})])
def test_a_setting_named_either_way_is_one_setting_recorded_by_one_name(given, recorded):
    """`--bm25-stemmer en` and `english` name one Snowball stemmer, but the manifest recorded each as given, so a
    rebuild naming it the other way was another setting and dropped the tuned fusion."""
    params = LexicalParams(**given)
    assert params == LexicalParams(**{**given, **recorded})
    for name, value in {**given, **recorded}.items():
        assert getattr(params, name) == recorded.get(name, value)
    params.check()


def test_the_stemmer_names_known_are_every_name_pystemmer_takes_and_stem_as_their_algorithm():
    """The table of other names (ISO 639 codes) must hold every one PyStemmer takes, each stemming as the algorithm
    it is said to name: a name missing from it would be recorded as given, and compare unequal again."""
    import Stemmer

    from retriever.lexical_names import STEMMER_NAMES

    taken = set()
    for size in (2, 3):
        for letters in itertools.product(string.ascii_lowercase, repeat=size):
            try:
                Stemmer.Stemmer("".join(letters))
            except KeyError:
                continue
            taken.add("".join(letters))
    assert taken == {name for name in STEMMER_NAMES if len(name) <= 3}
    assert set(STEMMER_NAMES.values()) == set(Stemmer.algorithms())
    words = ["running", "nationalities", "häuser", "bibliotheken", "maisons", "книгами", "ανθρώπους", "kitapları",
             "कमरों", "குழந்தைகள்", "կատուներ", "المكتبات", "کتاب‌ها", "mesaje", "sveikinimai", "gyerekeknek"]
    for name, algorithm in STEMMER_NAMES.items():
        assert Stemmer.Stemmer(name).stemWords(words) == Stemmer.Stemmer(algorithm).stemWords(words), name


@pytest.mark.parametrize("field", ["stemmer", "stopwords"])
def test_a_part_recorded_with_an_empty_name_and_rebuilt_with_none_changes_no_setting(field, tmp_path):
    """`--bm25-stemmer ""` meant none, but the library recorded ``""``: a rebuild with None counted as a changed
    setting and dropped the tuned fusion. ``""`` and ``none`` are spellings of None, in records older ones too."""
    from retriever.lexical_part import _scoring_changes

    record = LexicalParams().record()
    older = {**record, field: ""}
    assert _scoring_changes({"lexical": older}, {**record, field: None}, tmp_path) == []
    assert LexicalParams(**{field: ""}).record()[field] is None
    assert _scoring_changes({"lexical": older}, {**record, field: "porter" if field == "stemmer" else "de"}, tmp_path)
