"""The encoder: texts in, one vector per text out, in input order.

Batches are sorted by length to cut padding (the largest CPU saving after bf16). The settings
that shape the vectors (``retriever.encoder_settings``) and the weights' fingerprint make one
record that shards, indexes and model folders store, so a mismatched query encoder is refused.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from retriever.corpus import Document
from retriever.device import autocast, resolve_batch_size, resolve_device, resolve_dtype, torch_dtype
from retriever.encoder_settings import QUERY_SETTINGS, EncoderSettings, check_encoder_arguments
from retriever.errors import RetrieverError
from retriever.max_lengths import check_max_lengths, check_room_for_text
from retriever.model_folder import refuse_recorded_model, untied_tower_paths
from retriever.model_loading import (check_vocabulary, load_model, load_tokenizer, model_files, tokenizer_behaviour,
                                     tokenizer_fingerprint, weights_fingerprint)
from retriever.model_names import resolve_model_path
from retriever.pooling import check_pooler_weights, drop_untrained_pooler, get_pooling
from retriever.recorded_paths import recorded_model
from retriever.texts import (check_queries, check_text, non_word_ids, only_unknown_tokens, passage_text, special_ids,
                             tokenize_bounded)
from retriever.token_batches import cut_lengths, length_batches, tokenize_in_pieces
from retriever.wording import agree, counted

if TYPE_CHECKING:  # it imports this module
    from retriever.shared_encoders import SharedEncoders


def _passage_texts(documents: object) -> list[str]:
    """What is encoded of each ``corpus.Document``, refused where it is no Document of strings: a string or a list of
    strings failed deep in the encoder (an AttributeError), a lone surrogate in the tokenizer (a TypeError)."""
    if isinstance(documents, (str, bytes, dict)) or not hasattr(documents, "__iter__"):
        raise RetrieverError(f"passages must be a list of retriever.corpus.Document, not {type(documents).__name__}")
    documents, texts = list(documents), []
    for number, document in enumerate(documents, 1):
        where = f"passage {number} of {len(documents)}"
        if not isinstance(document, Document):
            raise RetrieverError(f"{where} is {type(document).__name__}, not a Document; wrap each text as "
                                 "retriever.corpus.Document(id, text, title)")
        if not (isinstance(document.text, str) and isinstance(document.title or "", str)):
            raise RetrieverError(f"{where} has a text or title that is no string ({type(document.text).__name__}, "
                                 f"{type(document.title).__name__}); give strings")
        texts.append(check_text(passage_text(document.title, document.text), where))
    return texts


class Encoder:
    """A loaded query/passage encoder on one device."""

    def __init__(self, settings: EncoderSettings, device: str = "auto", dtype: str = "auto",
                 batch_size: int | None = None) -> None:
        if not isinstance(settings, EncoderSettings):
            raise RetrieverError(f"Encoder takes EncoderSettings, not {type(settings).__name__}; use Encoder("
                                 "EncoderSettings.for_model(MODEL)), which reads the model folder's settings")
        settings.validate()
        self.settings = settings
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.batch_size = resolve_batch_size(batch_size, self.device)
        self.pooling = get_pooling(settings.pooling)
        self.tokenizer = load_tokenizer(settings.model)
        check_room_for_text(settings, self.tokenizer)  # before the weights load
        if settings.towers == "untied":
            query_path, passage_path = untied_tower_paths(resolve_model_path(settings.model))
            self.query_model, self.passage_model = self._load(str(query_path)), self._load(str(passage_path))
        else:
            self.query_model = self.passage_model = self._load(settings.model)
        self.dim = int(self.query_model.config.hidden_size)
        check_max_lengths(settings, self.query_model.config)
        models = [self.query_model] if self.query_model is self.passage_model else [self.query_model, self.passage_model]
        self.weights_sha256 = weights_fingerprint(*models)  # of the stored weights, whatever the compute dtype
        self.tokenizer_sha256 = tokenizer_fingerprint(self.tokenizer)
        self.tokenizer_behaviour_sha256 = tokenizer_behaviour(self.tokenizer)
        for model in models:
            # Inference-only copies may hold their weights in the compute dtype: that saves autocast's weight
            # casts on every batch, a large share of a one-query forward (benchmarks/README.md).
            model.to(torch_dtype(self.dtype))

    def _load(self, name: str) -> torch.nn.Module:
        model, info = load_model(name, refuse_random=True)
        check_pooler_weights(self.settings.pooling, model, info, name)
        drop_untrained_pooler(model, info)
        check_vocabulary(self.tokenizer, model, name)
        return model.to(self.device).eval()

    def metadata(self) -> dict:
        """The record written into shards and manifests (which re-express ``model_path`` relative to themselves)."""
        return {**self.settings.to_dict(), "model_path": resolve_model_path(self.settings.model),
                "weights_sha256": self.weights_sha256, "tokenizer_sha256": self.tokenizer_sha256,
                "tokenizer_behaviour_sha256": self.tokenizer_behaviour_sha256, "dim": self.dim, "dtype": self.dtype}

    def encode_queries(self, texts: Sequence[str], progress: Callable[[int], None] | None = None,
                       batch_size: int | None = None, mix_lengths: bool = False,
                       cut_at: list | None = None, unknown: list | None = None) -> np.ndarray:
        """One row per query, in order; a lone string is refused (it would be encoded letter by letter).
        ``batch_size`` (default ``self.batch_size``) and ``mix_lengths`` (see ``length_batches``) are the server's
        for its micro-batches, per call: set on the encoder, which a caller may share, they changed its own vectors.
        ``cut_at``, when given, is filled with one entry per query: the tokens it was cut to (the query max length)
        if it was longer, else None; the server tells each client so, from the tokenization the vectors used.
        ``unknown``, likewise: whether that tokenization holds no word the model knows (``unknown_queries``)."""
        texts = [self.settings.query_prefix + t for t in check_queries(texts)]
        batch_size = self.batch_size if batch_size is None else resolve_batch_size(batch_size, self.device)
        return self._encode(texts, self.query_model, self.settings.query_max_length, progress, "queries",
                            (batch_size, mix_lengths), cut_at, unknown)

    def unknown_queries(self, texts: Sequence[str], cut_at: list | None = None) -> list[bool]:
        """Which queries hold no word the model knows (its vector is any unknown word's), without encoding them: for
        queries encoded elsewhere. ``encode_queries(unknown=)`` says the same of the queries it encodes (a batch run's
        warning takes it from there, so no query is tokenized twice); ``cut_at`` as there, uncounted."""
        texts = [self.settings.query_prefix + t for t in check_queries(texts)]
        if not texts:
            return []
        encoded, cut = self._tokenize(texts, "queries", self.settings.query_max_length)
        if cut_at is not None:
            cut_at[:] = cut_lengths(cut, self.settings.query_max_length)
        return self._unknown(encoded)

    def _tokenize(self, texts: list[str], kind: str, max_length: int):
        """``texts`` tokenized as ``kind`` is (queries read special-token text as text, on their own tokenizer), a
        piece at a time (``tokenize_in_pieces``), and which were cut (``token_batches.cut_flags``)."""
        queries = kind == "queries"
        tokenizer = self._query_tokenizer() if queries else self.tokenizer
        return tokenize_in_pieces(lambda piece, unread: tokenize_bounded(tokenizer, piece, max_length, queries, unread),
                                  texts, max_length)

    def _query_tokenizer(self):
        """A copy of the tokenizer that reads special-token text in queries as text. A fast tokenizer keeps that
        switch, and its truncation length, in its one Rust backend and sets them on each call that differs: one
        tokenizer shared by query and passage calls on two threads could tokenize a batch with the other's."""
        if "_queries_tokenizer" not in self.__dict__:  # set lazily: subclasses skip __init__
            tokenizer = copy.deepcopy(self.tokenizer)
            tokenizer.split_special_tokens = True
            self._queries_tokenizer = tokenizer
        return self._queries_tokenizer

    def _unknown(self, encoded) -> list[bool]:
        """``texts.only_unknown_tokens`` of tokenized queries."""
        return only_unknown_tokens(encoded["input_ids"], *self._unknown_rule())

    def _unknown_rule(self) -> tuple:
        """What ``only_unknown_tokens`` takes: special ids, non-word ids and the query prefix's tokens, found once."""
        if "_unknown_ids" not in self.__dict__:  # set lazily: subclasses skip __init__
            tokenizer, prefix = self._query_tokenizer(), self.settings.query_prefix
            prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else []
            self._unknown_ids = (special_ids(tokenizer), non_word_ids(tokenizer), prefix_ids)
        return self._unknown_ids

    def for_queries(self, settings: EncoderSettings) -> Encoder:
        """This loaded model as the query encoder of ``settings`` (equal to its own in ``QUERY_SETTINGS``), loading
        nothing: a copy with those settings, its own cut counts, and no passages (its passage settings may differ,
        and one tokenizer shared by passage calls of two lengths on two threads mixes them: ``_query_tokenizer``)."""
        mine = {name: getattr(self.settings, name) for name in QUERY_SETTINGS}
        if mine != {name: getattr(settings, name) for name in mine}:
            raise RetrieverError("a loaded encoder is shared only by indexes of equal query settings")
        check_max_lengths(settings, self.query_model.config)  # as loading the model for ``settings`` would
        check_room_for_text(settings, self.tokenizer)
        self._unknown_rule()  # found once, for every copy
        view = copy.copy(self)
        for state in ("cut_counts", "last_cut"):
            view.__dict__.pop(state, None)
        view.settings, view.queries_only = settings, True
        return view

    def encode_passages(self, documents: Sequence[Document],
                        progress: Callable[[int], None] | None = None) -> np.ndarray:
        """One row per ``corpus.Document`` (title and text joined as ``passage_text`` joins them), in order."""
        if self.__dict__.get("queries_only"):
            raise RetrieverError("this encoder is shared by served indexes for their queries only; open "
                                 "Encoder(EncoderSettings.for_model(MODEL)) to encode passages")
        texts = [self.settings.passage_prefix + text for text in _passage_texts(documents)]
        return self._encode(texts, self.passage_model, self.settings.passage_max_length, progress, "passages",
                            (self.batch_size, True))

    def _count_cut(self, kind: str, flags: list[bool]) -> None:
        """Which texts were cut (``token_batches.cut_flags``), counted for ``truncation_report``."""
        counts = self.__dict__.setdefault("cut_counts", {})  # set lazily: subclasses skip __init__
        seen, cut = counts.get(kind, (0, 0)), sum(flags)
        counts[kind] = (seen[0] + cut, seen[1] + len(flags))
        self.last_cut = cut

    def truncation_report(self) -> list[str]:
        """One line per kind of text this encoder cut at its max length, so no cut goes unsaid."""
        limits = {"queries": ("query", self.settings.query_max_length),
                  "passages": ("passage", self.settings.passage_max_length)}
        return [f"note: {cut} of {counted(total, limits[kind][0])} {agree(cut, 'was', 'were')} longer than "
                f"{limits[kind][1]} tokens and {agree(cut, 'was', 'were')} cut (--{limits[kind][0]}-max-length)"
                for kind, (cut, total) in self.__dict__.get("cut_counts", {}).items() if cut]

    @torch.inference_mode()
    def _encode(self, texts: list[str], model: torch.nn.Module, max_length: int,
                progress: Callable[[int], None] | None, kind: str, batching: tuple[int, bool],
                cut_at: list | None = None, unknown: list | None = None) -> np.ndarray:
        output = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return output
        encoded, flags = self._tokenize(texts, kind, max_length)
        self._count_cut(kind, flags)
        if cut_at is not None:
            cut_at[:] = cut_lengths(flags, max_length)
        if unknown is not None:
            unknown[:] = self._unknown(encoded)
        for rows in length_batches([len(ids) for ids in encoded["input_ids"]], *batching):
            batch = self.tokenizer.pad({key: [encoded[key][i] for i in rows] for key in encoded.keys()},
                                       return_tensors="pt")
            batch = {key: value.to(self.device) for key, value in batch.items()}
            with autocast(self.device, self.dtype):
                outputs = model(**batch)
                pooled = self.pooling(outputs, batch["attention_mask"])
            pooled = pooled.float()
            if self.settings.normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            output[rows] = pooled.cpu().numpy()
            if progress is not None:
                progress(len(rows))
        return output


def recorded_encoder(recorded: dict, made: str, folder: str | Path, device: str = "auto", dtype: str = "auto",
                     batch_size: int | None = None, model: str | None = None,
                     shared: SharedEncoders | None = None, remedy: str | None = None,
                     written_by: str | None = None) -> Encoder:
    """The encoder an encoder record names (a manifest's or shards', written in ``folder``), refused if its
    weights differ from the recorded ones; ``made`` says what was made with it, for the error. ``model``
    says where the model is when it moved away from ``folder``; ``shared``, where to take it from if loaded;
    ``remedy``, what to do when the model is gone or changed, for a command that takes no --model; ``written_by``,
    the retriever version that wrote the record, if known."""
    check_encoder_arguments(device, dtype, batch_size, model, shared)
    settings = EncoderSettings.from_record(recorded, model or recorded_model(recorded, folder, remedy), folder,
                                           written_by)
    refuse_recorded_model(model_files(settings.model), made)  # an index built before such models were refused
    recorded_sha = recorded.get("weights_sha256")
    if shared is None:
        encoder = Encoder(settings, device=device, dtype=dtype, batch_size=batch_size)
    else:
        encoder = shared.get(settings, device=device, dtype=dtype, batch_size=batch_size, weights_sha256=recorded_sha)
    if encoder.weights_sha256 != recorded_sha:
        raise RetrieverError(f"the model at {settings.model} has weights {encoder.weights_sha256} but {made} with "
                             f"{recorded_sha}; it is another model or it changed since, so " + (remedy or "pass the "
                             "model the index was built with (--model) or rebuild the index"))
    for field, what in (("tokenizer_sha256", "vocabulary"), ("tokenizer_behaviour_sha256", "normalisation")):
        found, expected = getattr(encoder, field), recorded.get(field)  # absent from records older than the check
        if expected is not None and found != expected:
            raise RetrieverError(f"the model at {settings.model} has a tokenizer with {what} {found} but {made} "
                                 f"with {expected}; its tokenizer files changed since, so " + (remedy or "restore "
                                 "them (or pass the model the index was built with, --model) or rebuild the index"))
    return encoder
