"""Run files read back: TREC (``qid Q0 docid rank score tag``, ranked by score as trec_eval ranks it) or JSON
(``run_json``). Every malformed line is reported as ``file:line: problem; what to do``."""
from __future__ import annotations

import itertools
import math
import shlex
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

from retriever.errors import InputFileError
from retriever.files import carriage_return_error, check_is_file, decoded_lines
from retriever.json_shapes import opens_json
from retriever.qrels import file_path, first_line_where
from retriever.run_json import SWAPPED_HINT, read_json_run
from retriever.texts import columns, first_id_problem, id_problem
from retriever.trec_numbers import DECIMAL_NUMBER

Run = dict[str, dict[str, float]]
"""qid -> docid -> score."""


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, stripped text) for non-blank lines, through the corpus readers' line reader
    (BOM skipped, invalid UTF-8 named by line)."""
    check_is_file(path)
    for lineno, text in decoded_lines(path):
        yield lineno, text.strip()


def _parse_score(path: Path, lineno: int, text: str) -> float:
    """A score in plain ASCII decimal syntax (as trec_eval's atof reads it); beyond float range it is +-inf."""
    if DECIMAL_NUMBER.fullmatch(text) is None:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise InputFileError(path, lineno, f"score {shown!r} is not a number",
                             "write scores as plain decimal numbers such as 0.5, -3 or 1e-3")
    score = float(text)
    if math.isnan(score):
        raise InputFileError(path, lineno, "score is NaN", "fix the system that produced this run")
    return score


def read_trec_run(path: str | Path) -> Run:
    """Read a TREC run (``qid Q0 docid rank score tag``). The Q0 and rank columns are not interpreted: like
    trec_eval, ranking comes from the score. A repeated (qid, docid) is an error, as trec_eval refuses it too."""
    path = file_path(path)
    return _trec_run_lines(path, _numbered_lines(path))


class _RankDirection:
    """Whether a run's scores rise with its rank column, told from lines of one query that follow each other: a run
    of distances (FAISS L2, lowest nearest) is ranked by score, highest first, as trec_eval ranks it, so it was scored
    backwards without a word. Only a run that never falls is warned of, and one whose every score ties (a ranked list
    written with a score of 1 throughout), which trec_eval orders by document id; the first pairs tell, so a long run
    is not slowed."""

    PAIRS = 10_000  # pairs of lines compared, at most
    TIED_PAIRS = 10  # all-tied pairs that tell a run of one score, not a query with a few equal hits

    def __init__(self) -> None:
        self.previous: tuple[str, str, float] = ("", "", 0.0)
        self.rising = self.falling = self.tied = 0
        self.open = True  # still comparing

    def see(self, qid: str, rank: str, score: float) -> None:
        (last_qid, last_rank, last_score), self.previous = self.previous, (qid, rank, score)
        if last_qid == qid and rank.isdigit() and last_rank.isdigit() and rank != last_rank:
            if score == last_score:
                self.tied += 1
            elif (int(rank) > int(last_rank)) == (score > last_score):
                self.rising += 1
            else:
                self.falling += 1
            self.open = self.rising + self.falling + self.tied < self.PAIRS

    def warn(self, path: Path) -> None:
        def rewritten(suffix: str) -> str:  # the run's path and a new one beside it, for an awk line
            return f"{shlex.quote(str(path))} > {shlex.quote(str(path.with_name(path.name + suffix)))}"

        if self.rising and not self.falling:
            print(f"warning: {path}: its scores rise with its rank column (rank 1 scored lowest, as distances are), "
                  "but a run is ranked by score, highest first, as trec_eval ranks it, so this one is scored ranked "
                  "backwards; if lower means nearer, negate the scores (awk '{ if (!sub(/^-/, \"\", $5)) $5 = \"-\" $5 } 1' "
                  f"{rewritten('.negated')})", file=sys.stderr)
        if self.tied >= self.TIED_PAIRS and not (self.rising or self.falling):
            print(f"warning: {path}: every score ties with the one before it ({self.tied} pairs of lines), and "
                  "trec_eval ranks tied hits by document id, not by the rank column, so this run is scored in document "
                  "id order; if the rank column holds the ranking, make it the score (awk '{ $5 = -$4 } 1' "
                  f"{rewritten('.ranked')})", file=sys.stderr)


def _trec_run_lines(path: Path, lines: Iterable[tuple[int, str]]) -> Run:
    run: Run = {}
    direction = _RankDirection()
    for lineno, text in lines:
        cols = columns(text)
        if len(cols) != 6 and "\r" in text:
            raise carriage_return_error(path, lineno)
        if len(cols) != 6:
            raise _columns_error(path, lineno, cols)
        qid, _, docid, rank, score_text, _ = cols
        if first_id_problem((qid, docid)) is not None:  # the qrels reader's rule (a no-break space was read here)
            _check_line_ids(path, lineno, qid, docid)
        score = _parse_score(path, lineno, score_text)
        if direction.open:
            direction.see(qid, rank, score)
        hits = run.setdefault(qid, {})
        if docid in hits:  # the first line is found again only now: a line number per hit tripled the memory
            first = first_line_where(path, lambda cols: cols[:3:2] == [qid, docid])
            raise InputFileError(path, lineno, f"document {docid!r} appears twice for query {qid!r} (first on "
                                               f"{first})", "keep one line per (query, document)")
        hits[docid] = score
    if not run:
        raise InputFileError(path, None, "run file is empty", "check that retrieval produced output")
    direction.warn(path)
    return run


def _columns_error(path: Path, lineno: int, cols: list[str]) -> InputFileError:
    """A TREC run line without 6 columns; 'qid docid rank' (MS MARCO's runs, Pyserini's --output-format msmarco) is
    named, with a conversion whose score (-rank) keeps the ranking, since its missing score cannot be guessed."""
    found = f"expected 6 whitespace-separated columns, found {len(cols)}"
    if len(cols) == 3 and cols[2].isascii() and cols[2].isdigit():
        out = shlex.quote(str(path.with_name(f"{path.name}.trec")))
        return InputFileError(path, lineno, f"{found}: 'qid docid rank' is an MS MARCO run, which holds no score",
                              "convert it to TREC with the rank as the score's order (awk '{print $1, \"Q0\", $2, $3, "
                              f"-$3, \"msmarco\"}}' {shlex.quote(str(path))} > {out}) and evaluate that")
    if (len(cols) == 4 and cols[3].lstrip("-").isdigit()) or "corpus-id" in cols:  # a qrels line, or BEIR's header
        return InputFileError(path, lineno, f"{found}: the line reads as qrels, not a run", SWAPPED_HINT)
    return InputFileError(path, lineno, found, "TREC run lines are 'qid Q0 docid rank score tag'")


def _check_line_ids(path: Path, lineno: int, qid: str, docid: str) -> None:
    """A TREC run line's ids refused as the JSONL run and qrels readers refuse them (``id_problem``: a control
    character, which trec_eval would cut an id at, or whitespace C's isspace does not split at)."""
    for what, value in (("query id", qid), ("document id", docid)):
        problem = id_problem(value)
        if problem is not None:
            raise InputFileError(path, lineno, f"bad {what}: {problem}", "ids must be one non-empty token")


def read_run(path: str | Path) -> Run:
    """Read a run in TREC format, or in JSON when its first non-blank line opens it (``opens_json``): JSONL, one JSON
    object mapping query ids to ``{document id: score}``, or a flat hit per line (``run_json.read_json_run``)."""
    path = file_path(path)
    lines = _numbered_lines(path)  # read once: the path may be a pipe
    first = next(lines, None)
    if first is None:
        raise InputFileError(path, None, "run file is empty", "check that retrieval produced output")
    numbered = itertools.chain([first], lines)
    if opens_json(first[1]):
        return read_json_run(path, first[1], numbered)
    return _trec_run_lines(path, numbered)
