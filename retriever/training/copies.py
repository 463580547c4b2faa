"""Passages holding one text under several ids (a corpus's duplicates, an inline text given again by id) are one
passage to the loss. A batch masks a query's judged positives by id, so a copy of its positive under another id (the
positive of another query in the batch, or a hard negative) was a negative of the same text: training pushed one
text both up and down. Every copy takes the id of the first passage seen with that text, judgments follow, and a
hard negative that is then a judged positive of its own query is left out, as `retriever mine` leaves such copies out.
Queries holding one text under several ids share their judgments (``shared_judgments``), in training and in mining.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from retriever.texts import is_blank
from retriever.training.examples import Passage, TrainExample
from retriever.training.processes import log
from retriever.wording import agree, counted


def merged_copies(examples: list[TrainExample], source: str) -> list[TrainExample]:
    """``examples`` with every passage's id made its text's first id; said on stderr when any copy is found."""
    first_id: dict[str, str] = {}  # text -> the first id seen with it
    renamed: dict[str, str] = {}  # id -> the first id of its text
    for example in examples:
        for passage in (*example.positives, *example.negatives):
            renamed[passage.id] = first_id.setdefault(passage.text, passage.id)
    copies = sum(1 for passage_id, first in renamed.items() if passage_id != first)
    if not copies:
        return examples
    merged, left_out = [], 0
    for example in examples:
        judged = frozenset(renamed.get(passage_id, passage_id) for passage_id in example.judged)
        positives = tuple({renamed[p.id]: Passage(renamed[p.id], p.text) for p in example.positives}.values())
        negatives = [Passage(renamed[n.id], n.text) for n in example.negatives]
        kept = tuple({n.id: n for n in negatives if n.id not in judged}.values())
        left_out += len(negatives) - len(kept)
        merged.append(TrainExample(example.query_id, example.query, positives, kept, judged))
    log(f"training data ({source}): {counted(copies, 'passage')} {agree(copies, 'holds', 'hold')} the text of "
          "another under another id; each counts as one with it, so a copy of a query's positive is no negative of "
          f"that query" + (f" ({counted(left_out, 'hard negative')} left out)" if left_out else ""))
    return merged


def judgments_by_text(judged: Iterable[tuple[str, Iterable[str]]]) -> dict[str, set[str]]:
    """Query text -> every passage id judged relevant to a query of that text: queries holding one text under several
    ids (a collection's duplicate questions, a JSONL query on several lines) are one query to the loss, so a positive
    of one is masked for the others, never a negative of the same text pushed down while another row pulls it up."""
    shared: dict[str, set[str]] = {}
    for query, ids in judged:
        shared.setdefault(query, set()).update(ids)
    return shared


def shared_judgments(queries: Mapping[str, str], positives: Mapping[str, Iterable[str]],
                     source: str) -> dict[str, set[str]]:
    """Query id -> the passage ids judged relevant to it or to another query of its text (``judgments_by_text``), for
    each query of ``positives``; one ``queries`` (id -> text) lacks keeps its own. Said on stderr when any widened: the
    rule `train` trains by and `mine` mines by (it wrote a positive of a query's twin as that query's hard negative)."""
    own = {query_id: set(ids) for query_id, ids in positives.items()}
    by_text = judgments_by_text((queries[query_id], ids) for query_id, ids in own.items() if query_id in queries)
    judged_of = {query_id: by_text[queries[query_id]] if query_id in queries else ids for query_id, ids in own.items()}
    say_widened_judgments([query_id for query_id, ids in own.items() if judged_of[query_id] != ids
                           and not is_blank(queries.get(query_id, ""))], source)
    return judged_of


def say_widened_judgments(widened: list[str], source: str) -> None:
    """Say on stderr which queries (ids) took judgments from another query of their text, as copies of passages are
    said: their in-batch negatives changed."""
    if widened:
        log(f"training data ({source}): {counted(len(widened), 'judged query', 'judged queries')} "
            f"{agree(len(widened), 'holds', 'hold')} the text of another judged otherwise (e.g. {widened[0]!r}); "
            "queries of one text share their judgments, so a positive of one is no negative of another")
