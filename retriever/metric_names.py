"""Metric names as this engine spells them (``family@k``), checked before any search so a typo costs nothing."""
from __future__ import annotations

import re
from collections.abc import Sequence

from retriever.errors import RetrieverError

DEFAULT_METRICS: tuple[str, ...] = (
    "recall@1", "recall@5", "recall@10", "recall@20", "recall@100", "recall@1000",
    "mrr@10", "ndcg@10", "map@1000",
)
_FAMILIES = ("recall", "mrr", "ndcg", "map")
_METRIC_RE = re.compile(r"^(recall|mrr|ndcg|map)@([1-9][0-9]*)$")


def _parse_metric(name: str) -> tuple[str, int]:
    match = _METRIC_RE.match(name)
    if not match:
        raise RetrieverError(
            f"unknown metric {name!r}; use one of {', '.join(f + '@k' for f in _FAMILIES)} with k >= 1, "
            f"e.g. {', '.join(DEFAULT_METRICS)}"
        )
    return match.group(1), int(match.group(2))


def check_metrics(metrics: Sequence[str]) -> list[tuple[str, int]]:
    """(family, k) of each metric name; refuse an empty list, an unknown name or a duplicate (and a lone string,
    which was read letter by letter: "metric list has duplicates: ['r', 'e', 'c', ...]")."""
    if isinstance(metrics, str):
        raise RetrieverError(f"metrics must be a list of names, not the string {metrics!r}; wrap one metric as "
                             f"[{metrics!r}] (parse_metric_list reads a comma-separated list)")
    if not metrics:
        raise RetrieverError(f"no metric given; name at least one, e.g. {','.join(DEFAULT_METRICS[:3])}")
    if len(set(metrics)) != len(metrics):
        raise RetrieverError(f"metric list has duplicates: {list(metrics)}")
    return [_parse_metric(m) for m in metrics]


def parse_metric_list(text: str) -> tuple[str, ...]:
    """A comma-separated --metrics value, checked when the command starts so a typo costs no search."""
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    check_metrics(names)
    return names


def metric_cutoff(name: str) -> int:
    """The k of a metric name such as ``ndcg@10``."""
    return _parse_metric(name)[1]
