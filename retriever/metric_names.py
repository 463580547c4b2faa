"""Metric names as this engine spells them (``family@k``), checked before any search so a typo costs nothing."""
from __future__ import annotations

import re
from collections.abc import Iterable

from retriever.errors import RetrieverError

DEFAULT_METRICS: tuple[str, ...] = (
    "recall@1", "recall@5", "recall@10", "recall@20", "recall@100", "recall@1000",
    "mrr@10", "ndcg@10", "map@1000",
)
_FAMILIES = ("recall", "mrr", "ndcg", "map")
_METRIC_RE = re.compile(r"^(recall|mrr|ndcg|map)@([1-9][0-9]*)\Z")  # \Z: $ matched before a final newline
MAX_CUTOFF_DIGITS = 18  # past Python's digit limit int() raised; no run is nearly that deep


# trec_eval's names (as pytrec_eval and Pyserini write them, "_" or "." before the cutoff) are refused, each metric
# having one spelling here, but the refusal names ours: a cut measure is family@k, a whole-run one family@depth.
_TREC_CUT = {"ndcg_cut": "ndcg", "recall": "recall", "map_cut": "map"}
_TREC_WHOLE = {"ndcg": ("nDCG", "ndcg", " (the same while no query has more relevant documents than k)"),
               "map": ("MAP", "map", ""), "recip_rank": ("reciprocal rank", "mrr", "")}
# measures this engine does not compute (trec_eval's, and BEIR's P@k), lower-cased
_NOT_COMPUTED = {"p": "precision", "precision": "precision", "success": "success", "rprec": "R-precision",
                 "bpref": "bpref", "set_p": "set precision", "set_recall": "set recall", "set_f": "set F-measure",
                 "set_map": "set MAP", "iprec_at_recall": "interpolated precision", "gm_map": "geometric-mean MAP",
                 "infap": "inferred AP", "num_ret": "retrieved count", "num_rel": "relevant count",
                 "num_rel_ret": "relevant retrieved count"}
_OTHER_NAME_RE = re.compile(rf"^([A-Za-z][A-Za-z_]*?)(?:([_.@])([0-9]{{1,{MAX_CUTOFF_DIGITS}}}))?\Z")


def _other_spelling(name: str) -> tuple[str, bool]:
    """What a refused name is in this engine's terms, for the refusal, and whether it names our equivalent: an
    upper-case spelling (BEIR prints NDCG@10), trec_eval's name of one of ours, or a measure not computed here;
    ("", False) when it is none of these."""
    if _METRIC_RE.match(name.lower()):
        return f"metric names are lower case; write {name.lower()}", True
    match = _OTHER_NAME_RE.match(name)
    if not match:
        return "", False
    base, separator, k = match.group(1), match.group(2), match.group(3)
    if separator == "@" and base.lower() in _FAMILIES and k.startswith("0") and int(k) >= 1:
        lower = "metric names are lower case and " if base != base.lower() else ""
        return f"{lower}a cutoff has no leading zeros; write {base.lower()}@{int(k)}", True
    if base.lower() in _NOT_COMPUTED:
        at = f" at {int(k)}" if k else ""
        return f"{name} is {_NOT_COMPUTED[base.lower()]}{at}, which this engine does not compute", False
    if separator == "@" or (k is not None and int(k) < 1):
        return "", False
    if base in _TREC_CUT:
        ours = f"{_TREC_CUT[base]}@{int(k) if k else 'k'}"
        return f"{name} is trec_eval's name for {ours}; write {ours}", True
    if base in _TREC_WHOLE and k is None:
        measure, family, caveat = _TREC_WHOLE[base]
        return (f"{name} is trec_eval's {measure} over the whole run, which {family}@k gives with k the run's depth"
                f"{caveat}; write e.g. {family}@1000"), True
    return "", False


def _parse_metric(name: str) -> tuple[str, int]:
    match = _METRIC_RE.match(name)
    if not match:
        known = f"use one of {', '.join(f + '@k' for f in _FAMILIES)} with k >= 1"
        hint, equivalent = _other_spelling(name) if isinstance(name, str) else ("", False)
        if equivalent:
            raise RetrieverError(f"unknown metric {name!r}: {hint}")
        raise RetrieverError(f"unknown metric {name!r}: {hint}; {known}" if hint else
                             f"unknown metric {name!r}; {known}, e.g. {', '.join(DEFAULT_METRICS)}")
    if len(match.group(2)) > MAX_CUTOFF_DIGITS:
        raise RetrieverError(f"unknown metric {name!r}: the cutoff has {len(match.group(2))} digits, and one of at most "
                             f"{MAX_CUTOFF_DIGITS} is taken (a cutoff past a run's depth counts only the run's hits)")
    return match.group(1), int(match.group(2))


def check_metrics(metrics: Iterable[str]) -> list[tuple[str, int]]:
    """(family, k) of each metric name; refuse an empty list, an unknown name or a duplicate (and a lone string,
    which was read letter by letter: "metric list has duplicates: ['r', 'e', 'c', ...]")."""
    if isinstance(metrics, str):
        raise RetrieverError(f"metrics must be a list of names, not the string {metrics!r}; wrap one metric as "
                             f"[{metrics!r}] (parse_metric_list reads a comma-separated list)")
    if not isinstance(metrics, Iterable):
        raise RetrieverError(f"metrics must be a list of names such as 'ndcg@10', not {type(metrics).__name__} "
                             f"{repr(metrics)[:60]}")
    metrics = list(metrics)  # a generator is read once
    if not metrics:
        raise RetrieverError(f"no metric given; name at least one, e.g. {','.join(DEFAULT_METRICS[:3])}")
    odd = [name for name in metrics if not isinstance(name, str)]  # re's TypeError (set()'s, for a list) named
    if odd:  # neither the argument nor the name
        raise RetrieverError(f"metric names must be strings such as 'ndcg@10', not {type(odd[0]).__name__} "
                             f"{repr(odd[0])[:60]}")
    if len(set(metrics)) != len(metrics):
        raise RetrieverError(f"metric list has duplicates: {list(metrics)}")
    return [_parse_metric(m) for m in metrics]


def metric_name(family: str, k: int) -> str:
    """The name ``check_metrics`` parsed into (``family``, ``k``): names have one spelling, so it is the name given."""
    return f"{family}@{k}"


def checked_metric_names(metrics: Iterable[str]) -> list[str]:
    """The names as a list (a generator is read once), checked by ``check_metrics``: evaluating an index checks them
    before its search, so a misspelt name costs no search."""
    return [metric_name(family, k) for family, k in check_metrics(metrics)]


def parse_metric_list(text: str) -> tuple[str, ...]:
    """A --metrics value, names separated by commas or whitespace (no name holds either), checked when the command
    starts so a typo costs no search."""
    names = tuple(name for name in re.split(r"[,\s]+", text) if name)
    check_metrics(names)
    return names


def metric_cutoff(name: str) -> int:
    """The k of a metric name such as ``ndcg@10``."""
    return _parse_metric(name)[1]
