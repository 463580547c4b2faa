"""Fusing a dense and a lexical ranking into one: reciprocal-rank fusion or a convex combination.

RRF needs no tuning and ignores score scales, which is why it is the default. The convex combination
``alpha * z(dense) + (1 - alpha) * z(bm25)`` uses the scores themselves, z-normalised per query over
each list's top ``depth``; it can do better with ``alpha`` tuned on judged queries
(``retriever.fusion_tuning``). In RRF, documents a list scores equally share their places' mean
1/(k + rank), so the fused score never depends on the order an engine lists tied documents in. A
document missing from one list gets that list's lowest normalised score there, as Pyserini's hybrid
search does; when a list gives one score to all it found (a lone BM25 match), z has no spread and the
documents it missed get -1 there, one unit under the found, so finding a document still counts. A list weighted 0
(alpha 0 or 1) brings no documents: at alpha 0 hybrid ranks what BM25 found, as bm25 mode does, and a query BM25
finds nothing for gets no hits (it got the dense list's, every one scored 0, the last a negative denormal).

Ties are broken by the other fusion's score, which the fusion has at hand: RRF sees only ranks, so a
document at ranks (1, 2) ties one at (2, 1); the equal-weight score sum z(dense) + z(bm25) (what the convex
fusion ranks by at alpha 0.5, the untuned weight) says which of them both systems scored higher; convex
ties fall back to RRF. The returned float32 scores keep that order: documents the two keys
separate get scores at least one float32 step apart (fused sums that float32 would round together are
separated the same way), so ``runs.rank_order``, which re-sorts every result by score, cannot reorder them;
only documents equal on both keys stay tied and are ordered there, by doc id, like every other tie.
"""
from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from retriever.errors import IndexDamaged, RetrieverError
from retriever.texts import whole_number
from retriever.wording import shown_number

MODES = ("dense", "bm25", "hybrid")
METHODS = ("rrf", "convex")
FUSION_SETTINGS = ("method", "rrf_k", "alpha", "depth")  # what FusionParams.overridden takes
# Fused scores this close (relative) are tied: RRF sums equal in exact arithmetic can differ in the last bit
# of a float64 (1/275 + 1/330 and 2/300), while distinct sums of depth-1000 ranks differ by far more.
TIE_TOLERANCE = 1e-12
# RRF's largest constant, far past any in use: by 1e13 neighbouring ranks' shares differed by less than TIE_TOLERANCE
# (every document tied, and the convex tie-break ranked them), and by 1e39 the scores left float32's range
RRF_K_MAX = 1e6


@dataclass(frozen=True)
class FusionParams:
    method: str = "rrf"
    rrf_k: float = 60.0
    alpha: float = 0.5
    depth: int = 1000

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise RetrieverError(f"unknown fusion {self.method!r}; use one of {', '.join(METHODS)}")
        if not is_number(self.alpha):
            raise RetrieverError(f"--alpha must be a number from 0 to 1 (the weight of the dense score), not "
                                 f"{type(self.alpha).__name__} {self.alpha!r}"[:160])
        if not 0.0 <= self.alpha <= 1.0:  # nan fails it
            raise RetrieverError(f"--alpha {self.alpha!r} is outside 0..1 (the weight of the dense score)")
        if not (is_number(self.rrf_k) and 0 < self.rrf_k <= RRF_K_MAX):  # nan fails both
            raise RetrieverError(f"--rrf-k must be a positive number up to 1e6, not {self.rrf_k!r}")
        object.__setattr__(self, "depth", whole_number(self.depth, "--fusion-depth", 1))
        for name in ("rrf_k", "alpha"):  # a NumPy float as the Python one (the manifest's record is JSON)
            object.__setattr__(self, name, float(getattr(self, name)))

    def record(self) -> dict:
        return asdict(self)

    def setting(self) -> str:
        return fusion_setting(self.method, self.rrf_k, self.alpha)

    @classmethod
    def from_record(cls, record: dict | None) -> FusionParams:
        known = {name: record[name] for name in FUSION_SETTINGS if record and name in record}
        return cls(**known)

    def overridden(self, method: str | None = None, rrf_k: float | None = None, alpha: float | None = None,
                   depth: int | None = None) -> FusionParams:
        """These params with the flags a user gave. A lone --alpha means the convex combination and a lone
        --rrf-k means RRF, whatever the manifest's tuned method, so a flag is never silently unused; a flag
        for the other method than the one named is refused for the same reason."""
        if alpha is not None and rrf_k is not None:
            raise RetrieverError("--alpha weights the convex fusion and --rrf-k sets RRF's constant: give one of them")
        if method is None and (alpha is not None or rrf_k is not None):
            method = "convex" if alpha is not None else "rrf"
        if (method == "rrf" and alpha is not None) or (method == "convex" and rrf_k is not None):
            flag = "--alpha" if method == "rrf" else "--rrf-k"
            raise RetrieverError(f"{flag} does not apply to --fusion {method}: drop it or change --fusion")
        given = {"method": method, "rrf_k": rrf_k, "alpha": alpha, "depth": depth}
        return replace(self, **{name: value for name, value in given.items() if value is not None})


# What each recorded setting must be, in the manifest's terms (FusionParams says it in the flags').
_RECORDED = {"method": f"one of {', '.join(METHODS)}", "rrf_k": "a positive number up to 1e6",
             "alpha": "a number from 0 to 1", "depth": "a whole number of at least 1"}


def recorded_fusion(index_dir: Path, manifest: dict, overrides: dict | None) -> tuple[FusionParams, IndexDamaged | None]:
    """The manifest's fusion with the user's ``overrides``, and the damage of its record (None if sound, or if the
    overrides give the method and its setting, all hybrid reads of it but the depth). A damaged record fails hybrid
    search alone (``Searcher.check_mode``), as it matters to nothing else; until it is mended, the defaults stand in,
    so overrides are still checked when the folder opens."""
    damage = record_damage(index_dir, manifest, overrides)
    recorded = FusionParams() if damage else FusionParams.from_record(manifest.get("fusion"))
    return recorded.overridden(**(overrides or {})), None if _stands_in(overrides) else damage


def record_damage(index_dir: Path, manifest: dict, overrides: dict | None = None) -> IndexDamaged | None:
    """The damage of the manifest's fusion record with its repairs (None if sound), whether or not ``overrides``
    stand in for it: `serve` names it at start even then, as `info` shows it. A record lacking a setting is damaged:
    every record written holds all four, and the default filled in for a lost one went unsaid."""
    from retriever.index_folder import MANIFEST_FILE, fusion_shape_problem

    record, problem = manifest.get("fusion"), fusion_shape_problem(manifest)
    missing = [name for name in FUSION_SETTINGS if name not in record] if problem is None and record else []
    problem = f"fusion.{missing[0]} is missing" if missing else problem
    for name in FUSION_SETTINGS if problem is None and record else ():
        try:
            FusionParams.from_record({name: record[name]})
        except RetrieverError:
            problem = f"fusion.{name} is {record[name]!r:.40}, not {_RECORDED[name]}"
            break
    if problem is None:
        return None
    stood_in = _stands_in(overrides)
    return IndexDamaged(
        f"{index_dir / MANIFEST_FILE}: {problem}, so the hybrid fusion's record is damaged and "
        + ("the fusion flags given stand in for it" if stood_in else
           "hybrid search refused (--mode dense and --mode bm25 still work)")
        + f"; tune it again with `retriever bm25 {index_dir} --tune-fusion-on DATASET --split train`, or drop it "
        f"(hybrid then uses RRF k=60) with `retriever bm25 {index_dir} --drop-fusion`"
        + ("" if stood_in else ", or search hybrid with --fusion rrf --rrf-k K or --alpha A, which need no record"))


def _stands_in(overrides: dict | None) -> bool:
    """Whether fusion flags give a setting of the method they use, all hybrid reads of the record but the depth."""
    return any((overrides or {}).get(name) is not None for name in ("alpha", "rrf_k"))


def fusion_setting(method: object, rrf_k: object, alpha: object) -> str:
    """The method and the one parameter it uses ('convex alpha=0.65', 'rrf rrf_k=60'): the other is unused, and
    naming it beside the method read as if both applied. A damaged record's values (``info`` shows one) read '?'."""
    if method == "convex":
        return f"convex alpha={shown_number(alpha)}"
    return f"{'rrf' if method == 'rrf' else '?'} rrf_k={shown_number(rrf_k)}"


def is_number(value: object) -> bool:
    """A plain or NumPy number: text such as "0.3" (a library call, an edited manifest) raised a TypeError deep in a
    comparison, and True passed as 1."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise RetrieverError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    return mode


def _zscore(scores: np.ndarray) -> np.ndarray:
    if len(scores) == 0:
        return scores
    spread = scores.std()
    return (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)


def _contributions(scores: np.ndarray, method: str, rrf_k: float) -> tuple[np.ndarray, float]:
    """Each listed document's share of the fused score, and the share of a document the list missed."""
    if method == "rrf":
        return _shared_by_ties(scores, 1.0 / (rrf_k + np.arange(1, len(scores) + 1))), 0.0
    normalised = _zscore(scores.astype(np.float64))
    if len(normalised) and not normalised.any():  # one score (a lone BM25 match): no spread to put the missed under
        return normalised, -1.0
    return normalised, float(normalised.min()) if len(normalised) else 0.0


def _shared_by_ties(scores: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """``shares`` of rank-ordered ``scores`` with each block of equal float32 scores given its mean: the engines list
    tied documents in their own row order, and RRF read that order as ranks (copies of one passage got unequal
    fused scores, in an order set by where each sat in FAISS and in bm25s)."""
    as_f32 = scores.astype(np.float32)
    starts = np.flatnonzero(np.r_[True, as_f32[1:] != as_f32[:-1]]) if len(scores) else np.zeros(0, np.int64)
    if len(starts) == len(scores):  # no tie (or nothing): the usual case
        return shares
    sizes = np.diff(np.r_[starts, len(scores)])
    return np.repeat(np.add.reduceat(shares, starts) / sizes, sizes)


def _weights(method: str, alpha: float) -> tuple[float, float]:
    """The (dense, lexical) lists' weights in the fused score."""
    return (alpha, 1.0 - alpha) if method == "convex" else (1.0, 1.0)


def _fused(scores: list[np.ndarray], rows: list[np.ndarray], size: int, method: str, rrf_k: float,
           alpha: float) -> np.ndarray:
    """The (dense, lexical) lists' fused score of each of ``size`` labels, in float64; ``rows[i]`` says which
    label each of ``scores[i]`` belongs to."""
    weights = _weights(method, alpha)
    fused = np.zeros(size, dtype=np.float64)
    for weight, list_scores, listed_rows in zip(weights, scores, rows):
        share, missed = _contributions(list_scores, method, rrf_k)
        column = np.full(size, missed)
        column[listed_rows] = share
        fused += weight * column
    return fused


def _ordered_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as int64 keys in the same order, one apart for neighbouring floats."""
    bits = values.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def _float32_of_bits(keys: np.ndarray) -> np.ndarray:
    return np.where(keys < 0, -keys | 0x80000000, keys).astype(np.uint32).view(np.float32)


def _tie_groups(primary: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows that can reach the top ``k`` (every row of the first ``k`` tie classes of ``primary``, highest
    first) and their class numbers, values equal up to float64 rounding (``TIE_TOLERANCE``) counting as one.
    Only those rows need the tie-breaking sort."""
    by_primary = np.argsort(-primary, kind="stable")
    values = primary[by_primary]
    groups = np.r_[0, np.cumsum(values[:-1] - values[1:] > TIE_TOLERANCE * np.abs(values[1:]))]
    reach = int(np.searchsorted(groups, groups[min(k, len(groups)) - 1], side="right"))
    return by_primary[:reach], groups[:reach]


def _separated(primary: np.ndarray, new: np.ndarray) -> np.ndarray:
    """float32 scores of rows in fused order: ``primary`` rounded to float32, lowered where needed so each row
    that starts a ``new`` tie class scores at least one float32 step below the row before; others keep
    the score of their class's first row."""
    steps = np.arange(int(new.sum()))
    keys = np.minimum.accumulate(_ordered_bits(primary[new]) + steps) - steps
    return _float32_of_bits(keys)[np.cumsum(new) - 1]


def fuse_one(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], params: FusionParams,
             k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, labels) of one query from two rank-ordered (scores, labels) lists; -1 labels are padding.
    Ranked by the fusion's score, ties by the other fusion's (module docstring), then by label."""
    kept = [(labels >= 0) & (weight > 0) for (_, labels), weight in
            zip((dense, lexical), _weights(params.method, params.alpha))]  # a list weighted 0 brings no documents
    scores = [dense[0][kept[0]], lexical[0][kept[1]]]
    labels, rows = np.unique(np.concatenate([dense[1][kept[0]], lexical[1][kept[1]]]), return_inverse=True)
    if len(labels) == 0 or k < 1:
        return np.zeros(0, dtype=np.float32), labels[:0]
    rows = np.split(rows.ravel(), [len(scores[0])])
    primary = _fused(scores, rows, len(labels), params.method, params.rrf_k, params.alpha)
    secondary = _fused(scores, rows, len(labels), "convex" if params.method == "rrf" else "rrf", params.rrf_k, 0.5)
    candidates, groups = _tie_groups(primary, k)
    order = np.lexsort((candidates, -secondary[candidates], groups))[:k]  # rows are in label order
    groups, order = groups[order], candidates[order]
    tie_breaker = secondary[order]
    new = np.r_[True, (groups[1:] != groups[:-1]) | (tie_breaker[1:] != tie_breaker[:-1])]
    return _separated(primary[order], new), labels[order]


def fuse(dense: tuple[np.ndarray, np.ndarray], lexical: tuple[np.ndarray, np.ndarray], params: FusionParams,
         k: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise ``fuse_one`` over a batch of queries, padded to k with -1 labels like a FAISS result."""
    count = len(dense[0])
    scores = np.full((count, k), -np.inf, dtype=np.float32)
    labels = np.full((count, k), -1, dtype=np.int64)
    for row in range(count):
        row_scores, row_labels = fuse_one((dense[0][row], dense[1][row]), (lexical[0][row], lexical[1][row]),
                                          params, k)
        scores[row, :len(row_scores)] = row_scores
        labels[row, :len(row_labels)] = row_labels
    return scores, labels
