"""What the encoder can take: one check for texts and ids, shared by the readers, the CLI and the server,
and tokenisation that never hands the tokenizer more text than the max length can use."""
from __future__ import annotations

import itertools
import operator
import re
import unicodedata
from collections.abc import Sequence

import numpy as np

from retriever.errors import RetrieverError

# A first guess of how many characters max_length tokens span; a text cut too short is retried with more.
CHARS_PER_TOKEN = 8
# Past this many characters per allowed token the rest of a text is not read: a head this long that still
# yields fewer tokens is whitespace or one unknown "word" (a base64 blob, a run of one letter), and reading
# on would cost time in proportion to the text. Such texts are counted as cut.
MAX_CHARS_PER_TOKEN = 128
_WHITESPACE = re.compile(r"\s")
_NOT_SPACE = re.compile(r"\S")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Control characters \s does not match: trec_eval reads an id only up to a NUL, and none belongs in a TREC file.
CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
# What a U+FEFF past a file's first line is: where `cat` joined a file saved with a byte-order mark to another.
MID_FILE_BOM = ("U+FEFF, a byte-order mark (one starting a line mid-file is where two files were joined; save them "
                "without it)")
_C_SPACES = re.compile(r"[ \t\n\v\f\r]+")  # C's isspace, where trec_eval splits a run or qrels line


def text_problem(text: str) -> str | None:
    """Why the tokenizer cannot take ``text`` (it rejects lone surrogates, e.g. from a JSON "\\ud800"), or None."""
    if text.isascii():
        return None
    surrogate = _SURROGATE.search(text)  # what UTF-8 cannot encode, found with no encoded copy of a long text
    if surrogate is not None:
        return f"a lone surrogate U+{ord(surrogate.group()):04X} at character {surrogate.start() + 1}"
    return None


# Characters BERT's tokenizer drops (control, format, private-use, lone combining marks) or cleans away (U+FFFD):
# a query of nothing else is encoded as [CLS][SEP] and returned arbitrary hits.
DROPPED_CATEGORIES = ("Cc", "Cf", "Co", "Mn")


def is_blank(text: str) -> bool:
    """Whether ``text`` has nothing to search for: only whitespace and characters the tokenizer drops
    (``DROPPED_CATEGORIES``, U+FFFD). A lone surrogate is left to ``text_problem``, an unassigned character reads
    as [UNK]."""
    first = _NOT_SPACE.search(text)  # C-fast past a run of whitespace, and no copy of a long text (as strip makes)
    if first is None:
        return True
    if text[first.start()].isalnum():  # the usual text: a letter or digit is in none of those categories
        return False
    return all(character.isspace() or character == "\ufffd" or unicodedata.category(character) in DROPPED_CATEGORIES
               for character in itertools.islice(text, first.start(), None))


def check_text(text: str, where: str, what: str = "text") -> str:
    """``text`` unchanged, or a RetrieverError ``WHERE: WHAT has ...; what to do``."""
    problem = text_problem(text)
    if problem is not None:
        raise RetrieverError(f"{where}: {what} has {problem}, which is not valid Unicode text; "
                             "remove it or replace it with U+FFFD")
    return text


def listed(values: object, what: str, advice: str = "") -> list:
    """``values`` as a list, in the order given: a string (searched character by character), None (as no queries), a
    dict and a number are refused, and so is a set, whose order is arbitrary (hash randomisation changes it from run to
    run), so its hits came back in no order the caller could pair with the queries."""
    if values is None or isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise RetrieverError(f"{what} must be a list of strings, not {type(values).__name__}{advice}")
    if isinstance(values, (set, frozenset)):
        raise RetrieverError(f"{what} must be a list of strings, not {type(values).__name__}: a set has no order, so "
                             "the results would come in an arbitrary one; pass a list (e.g. sorted(...))")
    return list(values)


def check_queries(queries: object) -> list[str]:
    """The queries of a library call as a list of valid strings. A lone string would be searched character by
    character and None as no queries, both silently; a non-string would fail deep in a tokenizer."""
    texts = listed(queries, "queries", "; wrap one query as [query]")
    for number, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise RetrieverError(f"query {number} of {len(texts)} is {type(text).__name__}, not a string")
        check_text(text, f"query {number} of {len(texts)}", "the query")
    return texts


def check_query_ids(query_ids: object) -> list[str]:
    """A run's query ids as a list: strings a run file can hold (``id_problem``; one such as "q 1" was searched, then
    refused by the run writers), an integer as its decimal text (``id_text``, as the run writers and evaluation take
    it), each given once (a second query of an id replaced the first's hits silently)."""
    query_ids, first = [id_text(qid, "query id") for qid in listed(query_ids, "query ids")], {}
    for number, qid in enumerate(query_ids, 1):
        problem = id_problem(qid)
        if problem is not None:
            raise RetrieverError(f"query id {number} of {len(query_ids)}: {problem}; give ids of one token")
        if first.setdefault(qid, number) != number:
            raise RetrieverError(f"query id {qid!r} is given twice (queries {first[qid]} and {number} of "
                                 f"{len(query_ids)}); give each query its own id")
    return query_ids


def refuse_blank(queries: list[str]) -> list[str]:
    """Queries a top-k search answers: a blank one (``is_blank``) is encoded as [CLS][SEP] and gets arbitrary
    hits, so it is refused, as the CLI's QUERY and a server request are (batch runs keep it and warn)."""
    for number, text in enumerate(queries, 1):
        if is_blank(text):
            raise RetrieverError(f"query {number} of {len(queries)} is empty (nothing but whitespace or invisible "
                                 "characters), so any hits would be arbitrary; drop it")
    return queries


def whole_number(value: object, name: str, minimum: int, maximum: int | None = None, why: str = "") -> int:
    """``value`` as a Python int from ``minimum`` (to ``maximum``); numpy and torch integers are taken (as such they
    broke json.dump and FAISS's setters late in a build), a bool, float or string is refused in one line naming it,
    the bound and ``why`` it is there."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or number < minimum or maximum is not None and number > maximum:
        bound = f"of at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise RetrieverError(f"{name} must be a whole number {bound}{f' ({why})' if why else ''}, not {value!r}")
    return number


def check_k(k: object) -> int:
    """``k`` as an int: a whole number of at least 1 (a bool or a string is refused, not compared)."""
    return whole_number(k, "k", 1)


def passage_text(title: str | None, text: str) -> str:
    """Title and body joined by a space, as BEIR's dense baselines do: what training, encoding and search see."""
    return f"{title} {text}".strip() if title else text


_NOT_IN_AN_ID = re.compile(rf"\s|{CONTROL_CHARACTER.pattern}")  # both in one search: run writers check every id


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id in a TREC run or qrels file (one whitespace-free token), or None."""
    if not value:
        return "empty id"
    if value.isascii() and _NOT_IN_AN_ID.search(value) is None:
        return None  # the usual id, at the cost of one search
    match = _WHITESPACE.search(value)
    if match is not None:
        return (f"id {value[:40]!r} holds whitespace ({match.group()!r}), which TREC run and qrels files cannot "
                "hold")
    match = CONTROL_CHARACTER.search(value)
    if match is not None:
        return f"id {value[:40]!r} holds a control character ({match.group()!r}), which TREC run files cannot hold"
    if "\ufeff" in value:  # invisible: '\ufeffq2' never matched 'q2' in qrels or a run, and nothing said why
        return f"id {value[:40]!r} holds {MID_FILE_BOM}"
    return text_problem(value)


def trimmed_id(value: str) -> str:
    """An id read from a file, less the whitespace around it: ' d1' is d1 in a corpus, queries, qrels, run or
    training file alike (a TREC file's columns cannot hold it), so the files' ids match; whitespace inside one is
    left for ``id_problem`` to refuse."""
    return value.strip()


def id_text(value: object, what: str, qid: object = None) -> str:
    """An id as the text a run file holds: a string, an integer (numpy's too), or bytes of UTF-8. None, a float (a
    pandas column of ints holding a NaN gives 3.0) or a bool was written as 'None', '3.0', 'True', and bytes as
    "b'd1'": ids no qrels hold, scored 0 without a word."""
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    of = "" if what == "query id" else f" of query {qid!r}"
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise RetrieverError(f"{what} {value!r}{of} is bytes that are not UTF-8; give ids as text") from None
    raise RetrieverError(f"{what} {value!r}{of} is {type(value).__name__}, not a string or an integer; give ids as "
                         "text (a float's '3.0' never matches the '3' qrels hold)")


def first_id_problem(ids: Sequence[str]) -> tuple[str, str] | None:
    """The first of ``ids`` that cannot be an id and why (``id_problem``), or None: one search over them all when
    none is bad, so a run writer checks a query's thousand ids at the cost of one."""
    joined = "".join(ids)
    if all(ids) and joined.isascii() and _NOT_IN_AN_ID.search(joined) is None:
        return None
    return next(((value, problem) for value in ids for problem in [id_problem(value)] if problem), None)


def _head(text: str, limit: int) -> str:
    """The text up to the last whitespace before ``limit`` characters, so no word is cut in two."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    for position in range(len(head) - 1, limit // 2, -1):
        if head[position].isspace():
            return head[:position]
    return head


def tokenize_bounded(tokenizer, texts: Sequence[str], max_length: int, split_special: bool = False,
                     unread: list | None = None):
    """``tokenizer(texts, truncation=True, max_length=max_length)``, giving the tokenizer only the head of long texts.

    A tokenizer reads a whole text before it truncates, so one huge line costs memory and time in proportion to
    its length. Each text is cut at a word boundary after ``CHARS_PER_TOKEN * max_length`` characters; a cut
    text that then yields fewer than ``max_length`` tokens is retried with twice as many characters, so the
    result equals tokenising the whole text, up to ``MAX_CHARS_PER_TOKEN * max_length`` characters.
    ``split_special`` reads special-token text ("[SEP]") in the texts as plain text, not as that token.
    ``unread``, when given, is filled per text: whether text other than whitespace was left unread.
    """
    limit, most = CHARS_PER_TOKEN * max_length, MAX_CHARS_PER_TOKEN * max_length
    options = {"truncation": True, "max_length": max_length, **({"split_special_tokens": True} if split_special
                                                                  else {})}
    heads = [_head(t, limit) for t in texts]
    encoded = tokenizer(heads, **options)
    pending = [i for i, text in enumerate(texts) if len(text) > limit and len(encoded["input_ids"][i]) < max_length]
    while pending and limit < most:
        limit = min(2 * limit, most)
        again_heads = [_head(texts[i], limit) for i in pending]
        again = tokenizer(again_heads, **options)
        for j, i in enumerate(pending):
            heads[i] = again_heads[j]
            for key in encoded.keys():
                encoded[key][i] = again[key][j]
        pending = [i for j, i in enumerate(pending)
                   if len(texts[i]) > limit and len(again["input_ids"][j]) < max_length]
    if unread is not None:
        unread[:] = [len(head) < len(text) and _NOT_SPACE.search(text, len(head)) is not None
                     for head, text in zip(heads, texts)]
    return encoded


# What marks a token as the start or the rest of a word in WordPiece (BERT's "##ing"), SentencePiece ("▁wing") and
# byte-level BPE ("Ġwing"): stripped before asking whether a token holds a letter or digit.
WORD_PIECE_MARKS = ("##", "▁", "Ġ")


def special_ids(tokenizer) -> set[int]:
    """The ids of a tokenizer's control tokens ([CLS], <s>, [PAD]) and of its unknown token."""
    return set(tokenizer.all_special_ids) | ({tokenizer.unk_token_id} - {None})


def non_word_ids(tokenizer) -> frozenset[int]:
    """Ids of the tokens that are no word the model knows: special tokens ([UNK], [CLS], <s>) and tokens with no
    letter or digit once their word-piece marks (``WORD_PIECE_MARKS``) are stripped ("?", "!", SentencePiece's lone
    "▁"). A word in any script counts ("β", "中", "19"); punctuation alone does not."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return frozenset(special_ids(tokenizer) | {i for i, token in enumerate(tokens) if not _has_word(token)})


def _has_word(token: str | None) -> bool:
    if token is None:
        return False
    token = token[2:] if token.startswith(WORD_PIECE_MARKS[0]) else token
    return any(character.isalnum() for character in token.lstrip("".join(WORD_PIECE_MARKS[1:])))


def only_unknown_tokens(token_ids: Sequence[Sequence[int]], special: set[int], non_word: frozenset[int],
                        prefix: Sequence[int] = ()) -> list[bool]:
    """Which tokenized texts hold no word the model knows (every token in ``non_word``, see ``non_word_ids``) once
    the ``prefix`` tokens (the query prefix every query starts with) are dropped from their ``special``-free tokens:
    "🐝" is [CLS] [UNK] [SEP] to BERT and "🐝?" [CLS] [UNK] ? [SEP], the vector of any other unknown word, so its
    dense hits are arbitrary. Blank texts count too; a text whose first token the tokenizer merged with the prefix
    is tested whole."""
    prefix, flags = list(prefix), []
    for ids in token_ids:
        words = [token for token in ids if token not in special]
        words = words[len(prefix):] if prefix and words[:len(prefix)] == prefix else words
        flags.append(all(token in non_word for token in words))
    return flags


def columns(line: str) -> list[str]:
    """A run or qrels line's columns, split where trec_eval splits them, at C's whitespace alone: str.split() also
    splits at a no-break space, U+3000 or \\x1c-\\x1f, so an id holding one read as two columns, and a 5-column run
    line as 6 (its rank taken for the score). str.split() where it splits alike: it is several times faster."""
    if line.isascii() and "\x1c" not in line and "\x1d" not in line and "\x1e" not in line and "\x1f" not in line:
        return line.split()
    return [column for column in _C_SPACES.split(line) if column]
