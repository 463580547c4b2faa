"""Hard negatives files (``--negatives``: ``{"query_id", "negatives": [doc ids]}`` lines, as ``retriever mine``
writes them): reading one, and saying on stderr how many of its negatives training uses and why not the others."""
from __future__ import annotations

from pathlib import Path

from retriever.corpus_records import as_token_id, json_object_lines
from retriever.errors import InputFileError, RetrieverError
from retriever.training.processes import log
from retriever.wording import counted


def read_negatives_file(path: str | Path) -> dict[str, list[str]]:
    """``{"query_id", "negatives": [doc ids]}`` lines -> query id -> doc ids (later lines extend earlier ones)."""
    path = Path(path)
    if not path.is_file():
        raise RetrieverError(f"{path}: no such negatives file")
    negatives: dict[str, list[str]] = {}
    for number, record in json_object_lines(path):
        ids = record.get("negatives")
        if "query_id" not in record or not isinstance(ids, list):
            raise InputFileError(path, number, 'expected {"query_id": ..., "negatives": [doc ids]}',
                                 "write it with `retriever mine`")
        query_id = as_token_id(record["query_id"], path, number, "query_id")
        negatives.setdefault(query_id, []).extend(as_token_id(i, path, number, "negatives") for i in ids)
    if not negatives:  # trained on in-batch negatives alone, warned of as if the lines had been read and left out
        raise RetrieverError(f'{path}: the negatives file holds no line; write it with `retriever mine` (one '
                             '{"query_id", "negatives": [doc ids]} a line), or drop --negatives')
    return negatives


def log_negatives(negatives: dict[str, list[str]], unknown_queries: set[str], skipped_queries: set[str],
                  passages: dict, positives: dict[str, list[str]], path: str | Path) -> None:
    """Say how many hard negatives are used and why the others are not, so none is dropped silently: those of
    queries without a positive, of queries training left out (a blank query, no positive left), not in the corpus
    (or blank there) and judged relevant; each reason named only when it left some out."""
    given = sum(len(set(ids)) for ids in negatives.values())
    unused = sum(len(set(negatives[qid])) for qid in unknown_queries)
    skipped = sum(len(set(negatives[qid])) for qid in skipped_queries)
    trained = [(qid, set(ids)) for qid, ids in negatives.items() if qid not in unknown_queries | skipped_queries]
    not_in_corpus = sum(1 for _, ids in trained for d in ids if d not in passages)
    judged = sum(1 for qid, ids in trained for d in ids if d in passages and d in positives[qid])
    used = given - not_in_corpus - judged - unused - skipped
    reasons = [f"{unused} of queries without a positive in this split ({counted(len(unknown_queries), 'query')})"
               * bool(unused),
               f"{skipped} of queries left out of training above ({counted(len(skipped_queries), 'query')})"
               * bool(skipped),
               f"{counted(not_in_corpus, 'id')} not in the corpus or blank there" * bool(not_in_corpus),
               f"{judged} judged relevant" * bool(judged)]
    if used < given:
        log(f"hard negatives ({path}): {used} of {given} used; left out: {', '.join(filter(None, reasons))}")
