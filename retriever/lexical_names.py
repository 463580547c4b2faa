"""The names a BM25 stemmer or stopword list goes by, and the one each is recorded by.

PyStemmer takes a Snowball algorithm by its name or by an ISO 639 code (``en``, ``eng``: Snowball's
``modules.txt``), and bm25s a stopword list by a language name or code (``en``, ``english``). Two names of one
setting are one setting: a manifest records its canonical name, and settings recorded before (as given) are read
through ``canonical`` before they are compared, so a rebuild naming it otherwise keeps a tuned fusion.
Kept here as tables, so that checking a setting imports neither bm25s (and its scipy) nor PyStemmer.
"""
from __future__ import annotations

# Snowball's other names for its algorithms (PyStemmer has no call that lists them); tests check the table against
# every two- and three-letter name PyStemmer takes, and that each stems as the algorithm it names.
_CODES = {
    "arabic": "ar ara", "armenian": "hy hye arm", "basque": "eu eus baq", "catalan": "ca cat",
    "czech": "cs ces cze", "danish": "da dan", "dutch": "nl nld dut kraaij_pohlmann", "dutch_porter": "",
    "english": "en eng", "esperanto": "eo epo", "estonian": "et est", "finnish": "fi fin", "french": "fr fra fre",
    "german": "de deu ger", "greek": "el ell gre", "hindi": "hi hin", "hungarian": "hu hun", "indonesian": "id ind",
    "irish": "ga gle", "italian": "it ita", "lithuanian": "lt lit", "nepali": "ne nep", "norwegian": "no nor",
    "persian": "fa fas pers", "polish": "pl pol", "porter": "", "portuguese": "pt por", "romanian": "ro ron rum",
    "russian": "ru rus", "serbian": "sr srp", "sesotho": "st sot", "spanish": "es spa esl", "swedish": "sv swe",
    "tamil": "ta tam", "turkish": "tr tur", "yiddish": "yi yid"}
STEMMER_NAMES = {name: algorithm for algorithm, codes in _CODES.items() for name in (algorithm, *codes.split())}
# The names bm25s's tokenizer takes for its stopword lists (its ``STOPWORDS_<LIST>`` constants)
STOPWORD_LIST_OF = {name: constant for constant, names in (
    ("EN", "english en"), ("EN_PLUS", "english_plus en_plus"), ("GERMAN", "german de"), ("DUTCH", "dutch nl"),
    ("FRENCH", "french fr"), ("SPANISH", "spanish es"), ("PORTUGUESE", "portuguese pt"), ("ITALIAN", "italian it"),
    ("RUSSIAN", "russian ru"), ("SWEDISH", "swedish sv"), ("NORWEGIAN", "norwegian no"), ("CHINESE", "chinese zh"),
    ("TURKISH", "turkish tr"), ("KOREAN", "korean ko"), ("DANISH", "danish da")) for name in names.split()}


def stemmers() -> list[str]:
    """The Snowball algorithms, by the names they are recorded by."""
    return sorted(_CODES)


def stopword_lists() -> list[str]:
    """The stopword lists bm25s ships, by the names they are recorded by (``en`` for its ``STOPWORDS_EN``)."""
    return sorted({constant.lower() for constant in STOPWORD_LIST_OF.values()})


# The spellings of "no stemmer" or "no stopword list" a flag or a library call may give: each is recorded as None
# (a part recorded with "" and rebuilt with None counted as changed, and dropped its tuned fusion)
NONE_NAMES = ("", "none")


def canonical(setting: str, name: object) -> object:
    """The name a ``stemmer`` or ``stopwords`` setting is recorded by (``en`` and ``eng`` stem as ``english``;
    ``english`` lists as ``en``; ``""`` and ``none`` are None); a name neither table has, or no name, as it is."""
    if not isinstance(name, str) or setting not in ("stemmer", "stopwords"):
        return name
    if name.lower() in NONE_NAMES:
        return None
    if setting == "stemmer":
        return STEMMER_NAMES.get(name, name)
    return STOPWORD_LIST_OF[name].lower() if name in STOPWORD_LIST_OF else name


def unknown_name(setting: str, name: object) -> str | None:
    """Why ``name`` is no stemmer (``setting`` "stemmer") or stopword list ("stopwords"), naming the ones there are,
    or None; the caller says how to turn it off."""
    if setting == "stemmer":
        return None if name in STEMMER_NAMES else (f"no stemmer for {name!r}; use one of {', '.join(stemmers())} "
                                                   "(or its ISO 639 code: en for english)")
    if name in STOPWORD_LIST_OF:
        return None
    return f"{name!r} is not a stopword list; use one of {', '.join(stopword_lists())} (lower case)"
