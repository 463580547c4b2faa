"""Training examples (a query, its positives, optional hard negatives) and the batches made from them.

Two sources:

* a BEIR folder and split: every query with a qrels score > 0, its judged documents as positives,
  and hard negatives from an optional ``--negatives`` file (``{"query_id", "negatives": [doc ids]}``
  lines, as ``retriever mine`` writes);
* a JSONL file, one ``{"query", "positives", "negatives"?, "query_id"?}`` object a line.  The rule for
  an item of ``positives``/``negatives``: a string is a document id when a corpus is given
  (``--corpus``) and the passage text itself when none is; an object ``{"text", "title"?, "id"?}``
  is always a text, and an object with only an ``id`` (``_id``, Tevatron's ``docid``) is a document id.

Every passage carries an id (the document id, the object's id, or a hash of an inline text) so a
batch can mask a document that is a judged positive of more than one query.
"""
from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from retriever.corpus import BeirDataset, Fields, iter_documents, read_queries
from retriever.corpus_records import as_token_id, beir_keys, json_object_lines
from retriever.encoder_settings import EncoderSettings
from retriever.errors import InputFileError, RetrieverError
from retriever.qrels import is_reported_split
from retriever.runs import read_qrels
from retriever.texts import check_text, is_blank, passage_text, tokenize_bounded
from retriever.training.copies import judgments_by_text, merged_copies, shared_judgments
from retriever.training.examples import Passage, TrainExample
from retriever.training.loss import passage_key
from retriever.training.negatives import log_negatives, read_negatives_file
from retriever.training.processes import log
from retriever.wording import agree, counted


def _inline_id(title: str, text: str) -> str:
    return "text:" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:16]


def read_corpus_passages(corpus: str | Path, wanted: set[str] | None = None, fmt: str = "auto",
                         fields: Fields = Fields()) -> dict[str, Passage]:
    """Stream the corpus and keep only the documents training refers to, so a large corpus need not fit in memory."""
    passages: dict[str, Passage] = {}
    for document in iter_documents(corpus, fmt, fields):
        if wanted is None or document.id in wanted:
            passages[document.id] = Passage(document.id, passage_text(document.title, document.text))
    return passages


def load_beir_examples(dataset: str | Path, split: str = "train",
                       negatives_file: str | Path | None = None) -> list[TrainExample]:
    """One example per query with a relevant judgment; documents missing from the corpus are dropped and counted."""
    beir = BeirDataset.open(dataset)
    qrels = read_qrels(beir.qrels_path(split))
    if is_reported_split(beir.qrels_path(split), split):  # trained on without a word, where tuning is refused
        log(f"warning: training on the {split!r} split, whose queries results are reported on: scores on it will "
             "overstate the model; train on train (or a split of it) and keep test for the report")
    positives = {qid: [d for d, grade in docs.items() if grade > 0] for qid, docs in qrels.items()}
    positives = {qid: ids for qid, ids in positives.items() if ids}
    negatives = read_negatives_file(negatives_file) if negatives_file else {}
    unknown_queries = set(negatives) - set(positives)
    if negatives and len(unknown_queries) == len(negatives):
        raise RetrieverError(f"{negatives_file}: none of its query ids has a positive in the {split!r} qrels; "
                             "was it mined from another split?")
    wanted = {d for ids in positives.values() for d in ids} | {d for ids in negatives.values() for d in ids}
    with beir_keys():  # a blank document trains its query toward nothing, as a blank query would: left out alike
        passages = {d: p for d, p in read_corpus_passages(beir.corpus_path, wanted).items() if not is_blank(p.text)}
        queries = {q.id: q.text for q in read_queries(beir.queries_path)}
    judged_of = shared_judgments(queries, positives, str(beir.queries_path))
    examples, missing_docs, missing_queries = [], 0, 0
    for qid, ids in positives.items():
        if qid not in queries or is_blank(queries[qid]):  # an empty query trains toward its positive on nothing
            missing_queries += 1
            continue
        found = [passages[d] for d in ids if d in passages]
        missing_docs += len(ids) - len(found)
        if not found:
            continue
        judged = frozenset(judged_of[qid])
        hard = [passages[d] for d in dict.fromkeys(negatives.get(qid, ())) if d in passages and d not in judged]
        examples.append(TrainExample(qid, queries[qid], tuple(found), tuple(hard), judged))
    if missing_docs or missing_queries:
        log(f"training data: {counted(missing_docs, 'judged document')} missing from the corpus or blank there and "
             f"{counted(missing_queries, 'judged query', 'judged queries')} missing from queries.jsonl or blank there "
             f"{agree(missing_docs + missing_queries, 'was', 'were')} skipped")
    if negatives:  # a query skipped above (blank, or no positive left) uses none of its negatives either
        skipped = set(negatives) - unknown_queries - {example.query_id for example in examples}
        log_negatives(negatives, unknown_queries, skipped, passages, judged_of, negatives_file)
    if not examples:
        raise RetrieverError(f"{beir.root}: split {split!r} yields no training examples (no query with a "
                             "positive judgment whose document is in the corpus, not blank)")
    return merged_copies(examples, str(beir.corpus_path))


def _nonempty(value: str, path: Path, number: int) -> str:
    """``value``, refused if blank: an empty passage or id would train on nothing or match nothing."""
    if not value.strip():
        raise InputFileError(path, number, "empty passage or document id")
    return value


def _parse_item(item: object, path: Path, number: int, with_corpus: bool) -> tuple[str, Passage | None]:
    """Return (doc id to look up, None) or ("", inline passage), following the module's rule."""
    if isinstance(item, str):
        if with_corpus:
            return _nonempty(item, path, number), None
        check_text(_nonempty(item, path, number), f"{path}:{number}")
        return "", Passage(_inline_id("", item), item)
    if isinstance(item, dict):
        _refuse_unknown_keys(item, PASSAGE_KEYS, path, number, "passage key", "a passage object holds")
        key = next((key for key in PASSAGE_KEYS[2:] if item.get(key) is not None), None)
        doc_id = as_token_id(item[key], path, number, key) if key is not None else None
        if isinstance(item.get("text"), str):
            title = item.get("title") if isinstance(item.get("title"), str) else ""
            text = check_text(_nonempty(passage_text(title, item["text"]), path, number), f"{path}:{number}")
            return "", Passage(doc_id or _inline_id(title, item["text"]), text)
        if doc_id is not None:
            if not with_corpus:
                raise InputFileError(path, number, f"passage {doc_id!r} is given by id only",
                                     "pass --corpus so ids can be looked up, or give its text")
            return _nonempty(doc_id, path, number), None
    raise InputFileError(path, number, f"a passage must be a string or an object with 'text' or 'id', "
                         f"got {json.dumps(item)[:60]}")


JSONL_KEYS = ("query", "positives", "negatives", "query_id")
PASSAGE_KEYS = ("text", "title", "id", "_id", "docid")  # then the id's names, in the order they are taken
OTHER_FORMATS = {"positive_passages": ("Tevatron", "positives"), "negative_passages": ("Tevatron", "negatives"),
                 "pos": ("FlagEmbedding", "positives"), "neg": ("FlagEmbedding", "negatives")}


def _refuse_unknown_keys(record: dict, keys: tuple[str, ...], path: Path, number: int, what: str,
                         holds: str) -> None:
    """Refuse a key the reader does not take: a misspelt one ("negs", "titel") would drop its data silently."""
    unknown = sorted(set(record) - set(keys))
    if unknown:
        tool, ours = OTHER_FORMATS.get(unknown[0], (None, None))
        raise InputFileError(path, number, f"unknown {what} {unknown[0]!r} ({holds} {', '.join(keys)})"
                             + (f"; {tool}'s {unknown[0]!r} is {ours!r} here" if tool else ""),
                             "rename it" if tool else "rename or remove it")


def load_jsonl_examples(path: str | Path, corpus: str | Path | None = None, corpus_format: str = "auto",
                        fields: Fields = Fields()) -> list[TrainExample]:
    """Examples from ``{query, positives, negatives?}`` lines; string items are doc ids iff a corpus is given."""
    path = Path(path)
    if not path.is_file():
        raise RetrieverError(f"{path}: no such training file")
    rows: list[tuple[int, str, str, list, list]] = []
    first_line_of: dict[str, int] = {}
    for number, record in json_object_lines(path):
        _refuse_unknown_keys(record, JSONL_KEYS, path, number, "key", "a line holds")
        query = record.get("query")
        if not isinstance(query, str) or is_blank(query):  # blank: nothing the tokenizer reads, as "\x01"
            raise InputFileError(path, number, "missing or empty 'query' (a string)")
        check_text(query, f"{path}:{number}", "the query")
        parsed = []
        for key in ("positives", "negatives"):
            items = record.get(key, [])
            if not isinstance(items, list):
                raise InputFileError(path, number, f"'{key}' must be a list")
            parsed.append([_parse_item(item, path, number, corpus is not None) for item in items])
        if not parsed[0]:
            raise InputFileError(path, number, "'positives' is missing or empty")
        for doc_id, _ in parsed[0] + parsed[1]:
            if doc_id:
                first_line_of.setdefault(doc_id, number)
        query_id = as_token_id(record["query_id"], path, number, "query_id") if "query_id" in record else f"line-{number}"
        rows.append((number, query_id, query, parsed[0], parsed[1]))
    if not rows:
        raise InputFileError(path, None, "the file holds no training examples")
    passages = read_corpus_passages(corpus, set(first_line_of), corpus_format, fields) if corpus else {}
    for doc_id, number in first_line_of.items():
        if doc_id not in passages:
            raise InputFileError(path, number, f"document id {doc_id!r} is not in the corpus {corpus}",
                                 "without --corpus, strings are read as passage texts")
        if is_blank(passages[doc_id].text):  # as an empty inline passage is refused: trained toward nothing
            raise InputFileError(path, number, f"document {doc_id!r} of the corpus {corpus} has a blank title and "
                                 "text", "fix it in the corpus, or leave it out of this line")

    def resolve(items: list[tuple[str, Passage | None]]) -> list[Passage]:
        """The line's passages, each once (the first of an id): one listed twice was sampled twice into a group, two
        columns of one text in the loss, where a --negatives file's repeats are read once."""
        unique: dict[str, Passage] = {}
        for doc_id, passage in items:
            found = passages[doc_id] if doc_id else passage
            unique.setdefault(found.id, found)
        return list(unique.values())

    resolved = [(qid, query, resolve(pos), resolve(neg)) for _, qid, query, pos, neg in rows]
    judged_by_query = judgments_by_text((query, (p.id for p in pos)) for _, query, pos, _ in resolved)
    examples = [TrainExample(qid, query, tuple(pos), tuple(n for n in neg if n.id not in judged_by_query[query]),
                             frozenset(judged_by_query[query])) for qid, query, pos, neg in resolved]
    given, used = sum(len(neg) for *_, neg in resolved), sum(len(e.negatives) for e in examples)
    if used < given:  # as for a --negatives file: none is dropped silently
        log(f"hard negatives ({path}): {used} of {given} used; left out: {given - used} judged relevant (a positive "
             "of the same query)")
    return merged_copies(examples, str(path))


@dataclass(frozen=True)
class Group:
    """One query of a batch with the passages it brings: its positive first, then its hard negatives."""

    example: TrainExample
    passages: tuple[Passage, ...]


def epoch_groups(examples: Sequence[TrainExample], epoch: int, seed: int, group_size: int) -> list[Group]:
    """Shuffle and sample (one positive, up to group_size-1 negatives) per query; depends only on seed and epoch.

    Recomputing an epoch's order from (seed, epoch) is what lets a resumed run skip the batches it
    already trained on.  A query with fewer negatives than asked brings all it has.
    """
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(examples)))
    rng.shuffle(order)
    groups = []
    for index in order:
        example = examples[index]
        positive = rng.choice(example.positives)
        count = min(group_size - 1, len(example.negatives))
        negatives = rng.sample(example.negatives, count) if count > 0 else []
        groups.append(Group(example, (positive, *negatives)))
    return groups


class EpochGroups(list):
    """The groups of the current epoch in order; the Trainer reads it sequentially and calls ``set_epoch``."""

    def __init__(self, examples: Sequence[TrainExample], seed: int, group_size: int) -> None:
        super().__init__()
        self.examples, self.seed, self.group_size = examples, seed, group_size
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self[:] = epoch_groups(self.examples, epoch, self.seed, self.group_size)


class Collator:
    """Tokenise a batch of groups the way the saved model's encoder will: same prefixes, lengths and title join.

    The batch carries each query's target column and, as `passage_key` ints, its judged documents
    and the batch's passage ids, so the shared-positive mask can be built over the global batch.
    """

    def __init__(self, tokenizer, settings: EncoderSettings) -> None:
        self.tokenizer = tokenizer
        self.settings = settings

    def _tokenize(self, texts: Iterable[str], max_length: int, queries: bool = False) -> dict[str, torch.Tensor]:
        """Padded tensors; only the head of a long text is tokenised, so one huge line costs what a short one does.
        Queries read special-token text ("[SEP]") as text, as the encoder reads them at search time."""
        encoded = tokenize_bounded(self.tokenizer, list(texts), max_length, split_special=queries)
        return dict(self.tokenizer.pad(encoded, return_tensors="pt"))

    def __call__(self, groups: Sequence[Group]) -> dict:
        passages: list[Passage] = []
        targets = []
        for group in groups:
            targets.append(len(passages))
            passages.extend(group.passages)
        s = self.settings
        widest = max(len(g.example.judged) for g in groups)
        judged = [sorted(passage_key(i) for i in g.example.judged) for g in groups]
        return {"query": self._tokenize((s.query_prefix + g.example.query for g in groups), s.query_max_length, True),
                "passage": self._tokenize((s.passage_prefix + p.text for p in passages), s.passage_max_length),
                "targets": torch.tensor(targets, dtype=torch.long),
                "judged_keys": torch.tensor([keys + [-1] * (widest - len(keys)) for keys in judged], dtype=torch.long),
                "passage_keys": torch.tensor([passage_key(p.id) for p in passages], dtype=torch.long)}
