"""Encoder settings, declared once: everything that shapes the vectors.

Every list of setting names is derived from the fields of ``EncoderSettings``: what a shard's
vectors are identified by, what a model folder's retriever.json records, what a manifest hands
back to the query encoder, what `serve` shows and what the CLI collects. A new setting is one
field here plus its flag in ``retriever.cli.options``.

This module imports neither torch nor transformers (shard readers in spawned index workers use
it); the model folder is read only when settings are made.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field

from retriever.choices import DTYPES
from retriever.device import check_device_choice
from retriever.errors import NotForThisIndex, RetrieverError, check_kind
from retriever.wording import counted

if typing.TYPE_CHECKING:  # it imports torch
    from retriever.shared_encoders import SharedEncoders

TOWERS = ("shared", "untied")
# The fewest tokens a max length may be whatever the model: one, a token of the text. Tokenizers add their own
# special tokens to every text ([CLS] x [SEP] and <s> x </s> two, a [CLS]-only one, some three), so the floor that
# leaves a text a token of its own is checked where the tokenizer is loaded (``max_lengths.check_room_for_text``).
MIN_MAX_LENGTH = 1


def max_length_problem(value: int, special: tuple[str, ...] = ()) -> str | None:
    """Why a max length is too small to hold a token of a text next to the ``special`` tokens its tokenizer adds
    (None if it is not): at that length every text encodes to the same vector."""
    floor = MIN_MAX_LENGTH + len(special)
    if value >= floor:
        return None
    if not special:
        return f"{value} is less than {floor}: a max length counts a text's tokens, so give at least {floor}"
    return (f"{value} is less than {floor}, the fewest tokens that leave a text one of its own next to the "
            f"{counted(len(special), 'special token')} the model's tokenizer adds "
            f"({' '.join(special)}); below it every text encodes to the same vector")


def _setting(default: object, *, identity: bool = True, served: bool = False, passages_only: bool = False):
    """A field; ``identity``: vectors made with another value cannot be mixed; ``served``: `serve` shows it;
    ``passages_only``: only passages are encoded with it, so query vectors do not depend on it."""
    return field(default=default, metadata={"identity": identity, "served": served, "passages_only": passages_only})


@dataclass(frozen=True)
class EncoderSettings:
    """Everything that changes the vectors; recorded in manifests and compared at search time."""

    model: str = _setting("minilm", identity=False, served=True)  # the weights' fingerprint identifies it
    pooling: str = _setting("mean", served=True)
    normalize: bool = _setting(True, served=True)
    query_max_length: int | None = _setting(None, served=True)  # None: the same as passage_max_length
    passage_max_length: int | None = _setting(None, passages_only=True)  # None: the model's (default_max_length)
    query_prefix: str = _setting("", served=True)
    passage_prefix: str = _setting("", passages_only=True)
    towers: str = _setting("shared")

    def __post_init__(self) -> None:
        model_name(self.model)  # its kind, before the model is looked for
        for name, value in self.to_dict().items():  # a notebook's numpy scalar, as the Python value it holds
            if type(value).__module__ == "numpy" and hasattr(value, "item"):
                object.__setattr__(self, name, value.item())
        if self.passage_max_length is None:
            from retriever.max_lengths import default_max_length

            object.__setattr__(self, "passage_max_length", default_max_length(self.model))
        if self.query_max_length is None:
            object.__setattr__(self, "query_max_length", self.passage_max_length)

    @classmethod
    def for_model(cls, model: str = "minilm", *, training: bool = False, **overrides: object) -> "EncoderSettings":
        """Defaults, then what the model folder's retriever.json records (else what its sentence-transformers
        modules apply: pooling, Normalize, prompts), then explicit overrides (non-None). ``training`` lets a
        CrossEncoder's folder through, whose encoder a bi-encoder may start from; encoding refuses it."""
        from retriever.model_folder import sentence_transformers_settings
        from retriever.model_loading import RETRIEVER_CONFIG, model_files, read_retriever_config
        from retriever.model_names import resolve_model_path
        from retriever.st_router import refuse_router

        model = model_name(model)
        recorded = read_retriever_config(model)  # what retriever wrote beats the sentence-transformers files
        values = {k: v for k, v in recorded.items() if k in OVERRIDABLE}
        where = f"{resolve_model_path(model)}/{RETRIEVER_CONFIG}"
        check_types(values, where)
        try:  # a bad recorded value (an unknown pooling) names the file it is in; a stand-in length, so the folder's
            # default (whose bad max_seq_length names its own file) is looked up only where no flag gives one, below
            cls(model=model, **{"passage_max_length": MIN_MAX_LENGTH, **values}).validate()
        except RetrieverError as error:
            raise RetrieverError(f"{where}: {error}") from None
        folder = model_files(model)
        if recorded and folder is not None:
            _refuse_disagreement(where, folder, values, overrides)
        elif folder is not None:
            values = sentence_transformers_settings(folder, {k: v for k, v in overrides.items() if v is not None},
                                                    training)
        values.update({k: v for k, v in overrides.items() if v is not None})
        unknown = set(values) - set(OVERRIDABLE)
        if unknown:
            raise RetrieverError(f"unknown encoder settings: {', '.join(sorted(unknown))}")
        settings = cls(model=model, **values)
        settings.validate()
        if folder is not None and settings.towers == "shared" and not training:  # training says it for itself
            refuse_router(folder, "towers='shared' encodes with one transformer; leave towers out or pass 'untied'")
            if recorded.get("towers") == "untied":  # the root holds the passage tower, which would encode queries
                raise RetrieverError(f"{where}: the model's query and passage towers are untied, and towers='shared' "
                                     "would encode queries with the passage tower; leave towers out or pass 'untied'")
        return settings

    @classmethod
    def from_record(cls, recorded: dict, model: str, where: object = None,
                    written_by: object = None) -> "EncoderSettings":
        """The settings a shard's or manifest's encoder record holds (in folder ``where``, by retriever
        ``written_by`` if known), with the model found at ``model``; a bad value names the folder (it said "encoder
        settings: ... fix the value", or named a flag never given). A key no version of this one wrote (a newer
        retriever's setting) is refused: ignored, it let queries be encoded otherwise than the passages were."""
        source = "the encoder record" if where is None else f"{where}: the encoder record"
        unknown = unknown_setting_problem(recorded, written_by)
        if unknown:
            raise RetrieverError(f"{'' if where is None else f'{where}: '}{unknown}")
        values = {name: recorded[name] for name in OVERRIDABLE if name in recorded}
        check_types(values, source)
        settings = cls(model=model_name(model), **values)
        try:
            settings.validate()
        except RetrieverError as error:
            raise RetrieverError(f"{source}: {error}") from None
        return settings

    def validate(self) -> None:
        """Refuse settings of the wrong type or value, before any model is loaded."""
        from retriever.pooling import get_pooling

        check_types(self.to_dict(), "encoder settings")
        get_pooling(self.pooling)
        if self.towers not in TOWERS:
            raise RetrieverError(f"unknown towers {self.towers!r}; choose one of {', '.join(TOWERS)}")
        for name in ("passage_max_length", "query_max_length"):  # the query length defaults to the passage's
            problem = max_length_problem(getattr(self, name))
            if problem is not None:
                raise RetrieverError(f"{name} (--{name.replace('_', '-')}): {problem}")

    def to_dict(self) -> dict:
        """Every setting by name, the model included."""
        return dataclasses.asdict(self)

    def recorded(self) -> dict:
        """What a model folder's retriever.json records: every setting but where the model is."""
        return {name: getattr(self, name) for name in OVERRIDABLE}


def _refuse_disagreement(where: str, folder, recorded: dict, overrides: dict) -> None:
    """Refuse a retriever.json whose settings the folder's sentence-transformers files (edited since) contradict,
    unless a flag settles each such setting: which of the two the user meant cannot be guessed."""
    from retriever.model_folder import st_disagreements

    differing = {name: pair for name, pair in st_disagreements(folder, recorded).items() if overrides.get(name) is None}
    if differing:
        named = "; ".join(f"{name} {ours!r} in retriever.json, {theirs!r} in its sentence-transformers files"
                          for name, (ours, theirs) in differing.items())
        flags = " ".join(f"--{name.replace('_', '-')}" for name in differing)
        raise RetrieverError(f"{where}: disagrees with the folder's sentence-transformers files, edited since "
                             f"retriever wrote both ({named}), so retriever and SentenceTransformer(folder) would "
                             f"give other vectors; make them agree (delete retriever.json to use the "
                             f"sentence-transformers files), or pass {flags}")


_FIELDS = dataclasses.fields(EncoderSettings)
# Each setting's type, without the None that means "the default" where a field allows it.
_HINTS = typing.get_type_hints(EncoderSettings)
_KINDS = {name: next((a for a in typing.get_args(hint) if a is not type(None)), hint) for name, hint in _HINTS.items()}
_OPTIONAL = {name for name, hint in _HINTS.items() if type(None) in typing.get_args(hint)}
_KIND_NAMES = {bool: "true or false", int: "a whole number", str: "a string"}


def model_name(model: object) -> str:
    """A model folder given as a Path, as the string settings record; a model of another kind is refused (None or 5
    raised an AttributeError in finding its max length, naming no argument)."""
    check_kind(model, (str, os.PathLike), "model", "a model folder's path (str or Path), a Hugging Face hub id "
               "(ORG/NAME) or minilm")
    return os.fspath(model)


def unknown_setting_problem(recorded: dict, written_by: object = None, hand_edits_only: bool = False) -> str | None:
    """The first key of an encoder record that no version of this retriever wrote, with what to do, or None. A newer
    retriever's setting, ignored, let queries be encoded otherwise than the passages were; one in a record this
    version wrote is a hand edit. ``hand_edits_only``: None for another writer's record, whose settings are refused
    only where the encoder is made (`from_record`): an index manifest's reader, so a BM25 search needs no encoder."""
    from retriever import __version__

    unknown = sorted(set(recorded) - {"model", *OVERRIDABLE, *RECORD_FIELDS})
    if not unknown or hand_edits_only and written_by != __version__:
        return None
    said = f"the encoder record holds {unknown[0]!r}, a setting retriever {__version__} does not know"
    if written_by == __version__:
        return f"{said} and never writes (a hand edit?); remove it, or rebuild the index"
    writer = f"retriever {written_by}" if isinstance(written_by, str) else "a hand edit or a newer retriever"
    return (f"{said} (written by {writer}), and the vectors may depend on it; search it with the retriever that "
            "built it (or a newer one), or rebuild it with this one")


def check_types(values: dict, source: str) -> None:
    """Refuse a setting of the wrong JSON type (a retriever.json's "normalize": "false" would read as true)."""
    for name, value in values.items():
        kind = _KINDS.get(name)
        if kind is None or (value is None and name in _OPTIONAL):
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RetrieverError(f"{source}: {name} must be {_KIND_NAMES[kind]}, not {value!r}; fix the value")
# Settings a command line or a retriever.json may set (the model is named on its own).
OVERRIDABLE = tuple(f.name for f in _FIELDS if f.name != "model")
# What identifies the vectors: shards that differ in any of these cannot be mixed. Besides the settings, an
# encoder's record (Encoder.metadata) holds the weights' fingerprint, the dimension and the compute dtype.
VECTOR_FIELDS = ("weights_sha256", *(f.name for f in _FIELDS if f.metadata["identity"]), "dim", "dtype")
# What shapes query vectors besides the model and its weights: indexes whose settings differ only elsewhere (passage
# settings) may share one loaded query encoder (``shared_encoders.SharedEncoders``, which compares the model folder
# by its real path).
QUERY_SETTINGS = tuple(f.name for f in _FIELDS if f.name != "model" and not f.metadata["passages_only"])
# What an encoder record (``Encoder.metadata``) holds besides the settings, every key any version wrote, and the keys
# of a shard's metadata around it (its part, corpus and the flags that read it).
RECORD_FIELDS = ("model_path", "weights_sha256", "tokenizer_sha256", "tokenizer_behaviour_sha256", "dim", "dtype",
                 "shard", "corpus", "reading")
# The JSON kind of each setting an encoder record holds (null allowed where it means the default) and of its dimension
# and precision: a manifest's are checked when it is read (``index_folder.MANIFEST_SHAPE``), `info` included.
RECORD_KINDS = {**{name: (kind, type(None)) if name in _OPTIONAL else kind for name, kind in _KINDS.items()},
                "dim": int, "dtype": str}
RECORDED_DTYPES = tuple(dtype for dtype in DTYPES if dtype != "auto")  # what an Encoder computes in
# The encoder summary `serve` lists per index.
SERVED_FIELDS = (*(f.name for f in _FIELDS if f.metadata["served"]), "dim")


# Checked as a Searcher opens, before any model loads or without one (bm25 mode): here, not in retriever.encoder,
# whose import is torch's and transformers' seconds.
def check_requested_encoder(manifest: dict, **requested: object) -> None:
    """Refuse query-encoder settings that differ from the ones the passages were encoded with (a different
    model is refused by its weights' fingerprint in ``recorded_encoder``), and names that are no setting."""
    unknown = sorted(set(requested) - set(OVERRIDABLE))
    if unknown:
        raise RetrieverError(f"unknown encoder setting {unknown[0]!r}; the settings are {', '.join(OVERRIDABLE)}")
    recorded = manifest["encoder"]
    differing = {name: value for name, value in requested.items() if value is not None and recorded.get(name) != value}
    if differing:  # the flags as the CLI spells them: --no-normalize for normalize False
        flags = [f"--{'no-' if value is False else ''}{name.replace('_', '-')}" for name, value in differing.items()]
        raise NotForThisIndex("the index was built with a different encoder; refusing to search with "
                              + ", ".join(f"{name} {value!r} (index: {recorded.get(name)!r})"
                                          for name, value in differing.items())
                              + f"; drop {' and '.join(flags)} to use the index's own encoder")


def check_encoder_arguments(device: str = "auto", dtype: str = "auto", batch_size: int | None = None,
                            model: str | None = None, shared: SharedEncoders | None = None) -> None:
    """Refuse what ``recorded_encoder`` cannot take, loading nothing: a Searcher that loads its model on first use
    refuses them on opening, not at its first dense search."""
    check_kind(model, (str, os.PathLike, type(None)), "model", "the path of the model folder the index was built with "
               "(str or Path), or None for the one its record names")  # a traceback deep in loading named neither
    if shared is not None:  # its module imports torch, which the check of a bm25 search's arguments does without
        from retriever.shared_encoders import SharedEncoders

        check_kind(shared, SharedEncoders, "encoders", "a SharedEncoders, or None")
    check_device_choice(device, dtype, batch_size)
