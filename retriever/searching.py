"""Search a built index with the encoder its manifest names.

Queries must be encoded exactly as the passages were; any requested encoder setting that
differs from the manifest, or a model whose weights changed since indexing, is refused.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from retriever.choices import DEFAULT_K
from retriever.encoder_settings import check_encoder_arguments, check_requested_encoder
from retriever.errors import INDEX_PATH, RetrieverError, check_kind, given_path
from retriever.first_use import OnFirstUse
from retriever.index_opening import check_default_mode, check_labels, checked_manifest, open_index, opened_whole
from retriever.fusion import FUSION_SETTINGS, MODES, check_mode, fuse, recorded_fusion
from retriever.lexical_opening import missing_lexical_message, open_lexical
from retriever.search_settings import NO_MODE, check_call_settings, check_mode_settings, search_with
from retriever.query_vectors import query_vectors
from retriever.runs import rank_order
from retriever.search_runs import BatchRuns
from retriever.hits import Hit
from retriever.texts import check_k, check_queries, passage_text, refuse_blank
from retriever.unknown_words import refusal, without_unknown
from retriever import tie_cut

if TYPE_CHECKING:  # torch and transformers, imported when the model loads: a bm25 search needs neither
    from retriever.encoder import Encoder
    from retriever.shared_encoders import SharedEncoders


class Searcher(BatchRuns):
    """An index folder loaded once: FAISS index, id map, doc store, query encoder and BM25 index if it has one (a
    damaged BM25 part fails only the modes that use it).

    ``mode`` (dense, bm25 or hybrid) is the default of every search. Hybrid fuses with the manifest's
    tuned fusion if it has one, else RRF; ``fusion_overrides`` (``FusionParams.overridden`` keywords)
    change single settings of it. Searchers given one ``encoders`` share the model of indexes built alike.
    """

    def __init__(self, index_dir: str | Path, device: str = "auto", dtype: str = "auto", batch_size: int | None = None,
                 model: str | None = None, mode: str = "dense", fusion_overrides: dict | None = None,
                 encoders: SharedEncoders | None = None, **requested_settings: object) -> None:
        self.index_dir = given_path(index_dir, "index_dir", INDEX_PATH)
        if fusion_overrides is not None and not isinstance(fusion_overrides, Mapping):
            raise RetrieverError(f"fusion_overrides must be a dict such as {{'alpha': 0.3}}, not "
                                 f"{type(fusion_overrides).__name__}")
        unknown = sorted(set(fusion_overrides or {}) - set(FUSION_SETTINGS))
        if unknown:
            raise RetrieverError(f"unknown fusion setting {unknown[0]!r}; use {', '.join(FUSION_SETTINGS)}")
        opened_whole(self.index_dir, lambda: self._open(device, dtype, batch_size, model, mode, fusion_overrides,
                                                        requested_settings, encoders))

    def __reduce_ex__(self, protocol: object) -> tuple:
        """Refused in one line (FAISS's own error names a ``cobj``): the loaded model, index and memory maps belong
        to this process."""
        raise RetrieverError(f"a Searcher cannot be pickled or deep-copied; open Searcher({str(self.index_dir)!r}) "
                             "in each process, or share this one between threads")

    def __copy__(self) -> Searcher:
        """A shallow copy sharing the loaded index and model (it is safe to share)."""
        copied = object.__new__(Searcher)
        copied.__dict__.update(self.__dict__)
        return copied

    def _open(self, device: str, dtype: str, batch_size: int | None, model: str | None, mode: str,
              fusion_overrides: dict | None, requested_settings: dict, encoders: SharedEncoders | None) -> None:
        """Everything read from the folder, at once: a build swapping in a new version meanwhile is seen by the
        manifest changing (``opened_whole`` then opens again), so files of two versions are never paired."""
        self.manifest = checked_manifest(self.index_dir)
        check_default_mode(self.index_dir, self.manifest, mode, fusion_overrides)
        check_requested_encoder(self.manifest, **requested_settings)
        check_encoder_arguments(device, dtype, batch_size, model, encoders)  # now, though the model may load later
        versions = self.manifest.get("versions")  # who wrote an encoder setting this version does not know
        built_by = versions.get("retriever") if isinstance(versions, dict) else None

        def load_encoder() -> Encoder:
            from retriever.encoder import recorded_encoder  # torch and transformers: not for a search needing no model

            return recorded_encoder(self.manifest["encoder"], "the index was built", self.index_dir, device, dtype,
                                    batch_size, model, encoders, written_by=built_by)
        self._encoder = OnFirstUse(load_encoder)
        if mode != "bm25":  # its searches need the model: a missing or changed one is refused now, not at a search
            self._encoder.get()
        self.index, self.documents = open_index(self.index_dir, self.manifest)
        defaults = self.manifest["index"].get("search_defaults") or {}  # null is allowed: no defaults
        self.default_nprobe = defaults.get("nprobe")
        self.default_ef_search = defaults.get("ef_search")
        try:  # damage to the BM25 part refuses the modes that read it (check_mode), not dense search
            self.lexical, self.lexical_problem = open_lexical(self.index_dir, self.manifest), None
        except RetrieverError as error:
            self.lexical, self.lexical_problem = None, error
        self.fusion, self.fusion_problem = recorded_fusion(self.index_dir, self.manifest, fusion_overrides)
        self.mode = self.check_mode(mode)

    @property
    def encoder(self) -> Encoder:
        """The query encoder, loaded by the first dense or hybrid search (or encoding) if the default mode is bm25,
        else on opening: BM25 needs no model, so a bm25 search neither waits for one nor fails where it moved away."""
        return self._encoder.get()

    @encoder.setter
    def encoder(self, encoder: Encoder) -> None:
        self._encoder = OnFirstUse(lambda: encoder)

    @property
    def loaded_encoder(self) -> Encoder | None:
        """The query encoder if it is loaded, else None (no query was encoded), loading nothing."""
        return self._encoder.made

    def modes(self) -> list[str]:
        """The search modes that work on this index now (a damaged BM25 part leaves dense alone: ``check_mode``
        says why to whoever asks for the others; a damaged fusion record leaves out hybrid alone)."""
        return ["dense"] if self.lexical is None else [m for m in MODES if m != "hybrid" or not self.fusion_problem]

    def check_mode(self, mode: str) -> str:
        """``mode``, refused when it needs a BM25 index this one lacks or could not open (``lexical_problem``: the
        error opening it raised, an ``IndexDamaged`` for damage, raised afresh for each search refused), or hybrid when
        the fusion record is damaged (``fusion_problem``)."""
        if check_mode(mode) != "dense" and self.lexical is None:
            problem = self.lexical_problem
            raise copy.copy(problem) if problem else RetrieverError(missing_lexical_message(self.index_dir))
        if mode == "hybrid" and self.fusion_problem:
            raise copy.copy(self.fusion_problem)
        return mode

    def rank(self, texts: Sequence[str], k: int, mode: str | None = None, vectors: np.ndarray | None = None,
             nprobe: int | None = None, ef_search: int | None = None, keep_unknown: bool = False,
             unknown: Sequence[bool] | None = None, unknown_found: list | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, FAISS labels) per query in ``mode``, in ``rank_order`` (so every prefix is the
        top of a smaller k, ties included: see ``tie_cut``); ``vectors`` are the encoded texts if at hand, with
        ``unknown`` (``encode_queries(unknown=)``) if known. A query the model reads as nothing but [UNK] is
        refused in dense mode (``refuse_unknown``), since any hits would be arbitrary, unless ``keep_unknown`` (batch
        runs keep every query, and warn); hybrid ranks it by BM25 alone. The encoder's tokenization says which, and
        ``unknown_found``, if given, is extended with those flags (none in bm25 mode), for a batch run's warning."""
        mode, texts, k = self.check_mode(mode or self.mode), check_queries(texts), check_k(k)
        if unknown_found is not None:
            check_kind(unknown_found, list, "unknown_found", "a list (each query's unknown-word flag is appended)")
        check_mode_settings(self.index, mode, nprobe, ef_search)
        if vectors is not None and mode != "bm25":
            vectors = query_vectors(vectors, self.index.d)
        if vectors is not None and len(vectors) != len(texts):
            raise RetrieverError(f"{len(vectors)} query vectors for {len(texts)} queries")
        cut_at: list = []
        encoded = mode != "bm25" and vectors is None
        if encoded:
            unknown = []
            vectors = self.encoder.encode_queries(texts, unknown=unknown, cut_at=cut_at)
        elif mode != "bm25" and unknown is None and (mode == "hybrid" or not keep_unknown):
            unknown = self.unknown_words(texts)  # the caller's own vectors: their tokenization is not at hand
        unknown = np.zeros(len(texts), bool) if unknown is None else np.asarray(unknown, dtype=bool)
        if unknown.shape != (len(texts),):
            raise RetrieverError(f"{unknown.size} unknown-word flags for {len(texts)} queries")
        if unknown_found is not None and mode != "bm25":
            unknown_found.extend(unknown.tolist())
        if mode == "dense" and not keep_unknown:
            self.refuse_unknown(unknown, texts, cut_at)
        if encoded:  # checked once (a caller's vectors above), not again at each tie_cut round
            vectors = query_vectors(vectors, self.index.d)
        dense = lambda rows, depth: self.search_vectors(vectors[rows], depth, nprobe, ef_search,  # noqa: E731
                                                        checked=True)
        lexical = lambda rows, depth: self.lexical_ranking([texts[i] for i in rows], depth)  # noqa: E731
        if mode != "hybrid":
            return self._top_k(dense if mode == "dense" else lexical, len(texts), k)
        depth = self.fusion_depth(k)
        # Each list is the top ``depth`` in rank_order, tied blocks at the cut complete (``tie_cut``), as fusion tuning
        # fuses them: the engines' own order chose which tied documents entered a list, and so the fused hits.
        # Fusion reads a tied block as one (``fuse``), so only the block at the cut is put in rank_order.
        dense_top = without_unknown(self._top_k(dense, len(texts), depth, order_within_ties=False), unknown)
        lexical_top = self._top_k(lexical, len(texts), depth, order_within_ties=False)
        fused = lambda rows, top: fuse((dense_top[0][rows], dense_top[1][rows]),  # noqa: E731
                                       (lexical_top[0][rows], lexical_top[1][rows]), self.fusion, top)
        return self._top_k(fused, len(texts), k)

    def unknown_words(self, texts: Sequence[str]) -> np.ndarray:
        """Which queries hold no word the model knows (``Encoder.unknown_queries``, a tokenization of its own, for
        queries not encoded here): the model reads "🐝" as [UNK] as it reads any unknown word, so its vector, and its
        dense hits, say nothing of the query."""
        return np.array(self.encoder.unknown_queries(texts), dtype=bool)

    def refuse_unknown(self, unknown: np.ndarray, texts: Sequence[str], cut_at: Sequence | None = None,
                       listed: bool = False) -> None:
        """Refuse a dense search of ``texts`` holding no word the model knows (``unknown``, one flag per query),
        naming the first and whether it was cut (``encode_queries(cut_at=)``; without it, that query is tokenized
        again alone); ``listed`` names it as a POST body's item (``unknown_words.refusal``)."""
        first, cut = np.flatnonzero(unknown)[:1], []
        if first.size and cut_at:
            cut = [cut_at[int(first[0])]]
        elif first.size:
            self.encoder.unknown_queries([texts[int(first[0])]], cut_at=cut)
        message = refusal(unknown, bool(cut and cut[0]), self.encoder.tokenizer.unk_token,
                          self.encoder.settings.query_max_length, self.lexical is not None, listed)
        if message is not None:
            raise RetrieverError(message)

    def _top_k(self, search, queries: int, k: int, order_within_ties: bool = True) -> tuple[np.ndarray, np.ndarray]:
        return tie_cut.top_k(search, queries, k, self.index.ntotal, self.documents.ids_of, order_within_ties)

    def fusion_depth(self, k: int) -> int:
        """How deep hybrid reads each engine's ranking: --fusion-depth, fixed, so k does not change the lists."""
        return max(k, self.fusion.depth)

    def lexical_ranking(self, texts: Sequence[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
        """BM25's top ``depth`` (scores, FAISS labels) per text; the index must have a BM25 part."""
        scores, rows = self.lexical.search(texts, depth)
        return scores, np.where(rows >= 0, self.documents.labels_of_rows(np.maximum(rows, 0)), -1)

    def search_vectors(self, vectors: np.ndarray, k: int, nprobe: int | None = None, ef_search: int | None = None,
                       checked: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Top-k (scores, FAISS labels) of query vectors, in FAISS's order; a setting of None is the index's default.
        ``checked``: the vectors (``query_vectors``), k and settings are checked already, as ``rank`` checks them once
        and then searches again deeper while a tie at the cut stays open (``tie_cut``)."""
        if not checked:
            k, vectors = check_k(k), query_vectors(vectors, self.index.d)
            check_call_settings(nprobe, ef_search, NO_MODE)
        scores, labels = search_with(self.index, vectors, min(k, self.index.ntotal),
                                     self.default_nprobe if nprobe is None else nprobe,
                                     self.default_ef_search if ef_search is None else ef_search)
        check_labels(labels, self.index, self.index_dir, self.manifest)
        return scores, labels

    def search(self, queries: Sequence[str], k: int = DEFAULT_K, nprobe: int | None = None,
               ef_search: int | None = None, mode: str | None = None) -> list[list[Hit]]:
        """Top-k hits with title and text for each query (a blank one is refused, and in dense mode one of unknown
        words: ``run`` keeps them)."""
        scores, labels = self.rank(refuse_blank(check_queries(queries)), k, mode, nprobe=nprobe, ef_search=ef_search)
        return [self.hits(row_scores, row_labels) for row_scores, row_labels in zip(scores, labels)]

    def ranked(self, scores: np.ndarray, labels: np.ndarray) -> tuple[list[str], list[float], list[int]]:
        """One result row's (ids, scores, labels) in ``runs.rank_order``, the order evaluation ranks ties in."""
        found = labels >= 0
        found_labels, found_scores = labels[found].tolist(), scores[found].astype(float).tolist()
        ids = self.documents.ids_of(found_labels)
        order = rank_order(ids, found_scores)
        return [ids[i] for i in order], [found_scores[i] for i in order], [found_labels[i] for i in order]

    def hits(self, scores: np.ndarray, labels: np.ndarray) -> list[Hit]:
        """One result row as ranked hits with title and text."""
        ids, ranked_scores, ranked_labels = self.ranked(scores, labels)
        rows = self.documents.records(ranked_labels)
        return [Hit(rank=i + 1, id=ids[i], score=ranked_scores[i], title=rows["title"][i] or "",
                    text=rows["text"][i] or "") for i in range(len(ids))]

    def document_text(self, doc_id: str) -> str:
        """Title and text of one document, for answer recall."""
        record = self.documents.document(doc_id)
        if record is None:
            raise KeyError(doc_id)
        return passage_text(record["title"], record["text"] or "")
