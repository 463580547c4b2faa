"""Which FAISS index a collection gets: build settings, factory strings, training and search defaults."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, fields
from numbers import Real
from pathlib import Path

import faiss

from retriever.choices import INDEX_TYPES, ONDISK_TYPE, REFINE_K_FACTOR_MAX
from retriever.codebooks import FAISS_POINTS_PER_CENTROID, quiet_codebooks
from retriever.errors import RetrieverError, faiss_message
from retriever.factory_parsing import check_factory, unreadable_index_type, unreadable_words
from retriever.index_folder import SEARCH_SETTING_RANGE, SEARCH_SETTINGS
from retriever.index_type_settings import flag, ray_refusal, unused_setting, untuned_refusal
from retriever.ondisk import CODES
from retriever.shards import sample_vectors
from retriever.texts import whole_number
from retriever.train_memory import check_training_memory
from retriever.search_settings import SETTING_KINDS, apply_search_params, downcast_hnsw, ivf_part, untaken_setting



@dataclass
class IndexParams:
    """How to build the FAISS index; ``index_type`` may also be any FAISS factory string."""

    index_type: str = "flat"
    hnsw_m: int = 32
    ef_construction: int = 200
    nlist: int | None = None
    pq_m: int | None = None
    refine_k_factor: int = 50
    train_size: int = 100_000
    seed: int = 0
    target_recall: float | None = None
    tuning_queries: int = 1000
    tuning_k: int = 10
    search_defaults: dict = field(default_factory=dict)
    ondisk_codes: str = "sq8"
    part_size: int = 500_000
    parallel_parts: int | None = None
    ray_address: str | None = None  # ivf-ondisk: fill the parts as Ray tasks (see retriever.distributed.ray_parts)
    ray_workers: int | None = None
    ray_cpus_per_worker: int = 1

    def __post_init__(self) -> None:
        """Refuse what the CLI's flags refuse (a setting the index type does not use, when not left at its default),
        and make numpy numbers Python ones (the manifest is JSON)."""
        if not isinstance(self.index_type, str):
            raise RetrieverError(f"index_type must be one of {', '.join(INDEX_TYPES)} or a FAISS factory string, not "
                                 f"{self.index_type!r}")
        unreadable = unreadable_index_type(self.index_type)
        if unreadable is not None:
            raise RetrieverError(unreadable)
        self.search_defaults = _checked_search_defaults(self.search_defaults)
        if self.index_type in _TAKES:  # a factory string's, once its width is known: check_buildable (FAISS's own)
            check_defaults_taken(self.search_defaults, _TAKES[self.index_type], self.index_type)
        for setting in fields(self):
            least = _LEAST.get(setting.name)
            value = getattr(self, setting.name)
            if least is not None and not (value is None and setting.default is None):
                setattr(self, setting.name, whole_number(value, flag(setting.name), least))
            most, why = _MOST.get(setting.name, (None, ""))
            if most is not None and getattr(self, setting.name) > most:  # FAISS failed on it after the encoding
                raise RetrieverError(f"{flag(setting.name)} must be at most {most} ({why}), not {value}")
        if self.target_recall is not None:
            if isinstance(self.target_recall, bool) or not isinstance(self.target_recall, Real) \
                    or not 0 < self.target_recall <= 1:
                raise RetrieverError(f"--target-recall must be a number in (0, 1], not {self.target_recall!r}")
            self.target_recall = float(self.target_recall)
        unused = unused_setting(self.index_type, [setting.name for setting in fields(self)
                                                  if getattr(self, setting.name) != setting.default])
        if unused:  # IndexParams("hnsw", nlist=64) built the default graph, while the CLI refused --nlist there
            raise RetrieverError(unused)
        if self.target_recall is None and self.tuning_queries != IndexParams.tuning_queries:
            raise RetrieverError(untuned_refusal("--tuning-queries"))
        if self.target_recall is None and self.tuning_k != IndexParams.tuning_k:  # no tuning measures recall@k
            raise RetrieverError("tuning_k (the k of the recall@k --target-recall tunes for) is used only with "
                                 "target_recall; set target_recall or drop tuning_k")
        if self.ray_address is None and (self.ray_workers is not None or self.ray_cpus_per_worker != 1):
            raise RetrieverError("ray_workers and ray_cpus_per_worker size Ray's workers, and ray_address is None (no "
                                 "Ray): set ray_address or drop them")
        if self.ray_address is not None and self.index_type != ONDISK_TYPE:  # built in one process, Ray unused
            raise RetrieverError(ray_refusal("ray_address", f"index_type={ONDISK_TYPE!r}"))
        given = [name for name, value in self.search_defaults.items() if value is not None]
        if given and self.target_recall is not None:  # search_defaults() let the tuned value replace it
            raise RetrieverError(f"search_defaults[{given[0]!r}] and target_recall both set the search default: the "
                                 "tuning picks it; drop one of them")


_LEAST = {"hnsw_m": 2, "ef_construction": 1, "nlist": 1, "pq_m": 1, "refine_k_factor": 1, "train_size": 1, "seed": 0,
          "tuning_queries": 1, "tuning_k": 1, "part_size": 1, "parallel_parts": 1, "ray_workers": 1,
          "ray_cpus_per_worker": 1}  # the least each whole-number setting takes (the CLI's flags' ranges)
C_INT_MAX = 2**31 - 1
_MOST = {"hnsw_m": (C_INT_MAX, "FAISS takes it as a C int"), "ef_construction": (C_INT_MAX, "FAISS takes it as a C int"),
         "refine_k_factor": (REFINE_K_FACTOR_MAX, "FAISS reads no index with a larger one back")}  # the most each takes, and why


def _checked_search_defaults(defaults: object) -> dict:
    """The settings a search starts from, as the manifest's check takes them (``index_folder.SEARCH_SETTINGS``):
    one of the wrong kind or range was written, and every search then called the index damaged."""
    if not isinstance(defaults, dict) or not set(defaults) <= set(SEARCH_SETTINGS):
        raise RetrieverError(f"search_defaults must be a dict of {' and/or '.join(SEARCH_SETTINGS)}, not {defaults!r}")
    lowest, highest = SEARCH_SETTING_RANGE
    return {name: None if value is None else whole_number(value, f"search_defaults[{name!r}]", lowest, highest)
            for name, value in defaults.items()}


_TAKES = {"flat": None, "hnsw": "ef_search", "ivfpq": "nprobe", ONDISK_TYPE: "nprobe"}  # each type's search setting


def check_defaults_taken(defaults: dict, taken: str | None, index_type: str) -> None:
    """Refuse a search default the index never uses (``taken`` is the one it does), as `search` refuses --nprobe on a
    flat index: it was recorded, shown by `info`, and ignored by every search."""
    name = untaken_setting(defaults, taken)
    if name is not None:
        use = f"give {taken} instead" if taken else "it is exact and takes no search setting"
        raise RetrieverError(f"search_defaults[{name!r}] applies to {SETTING_KINDS[name][0]} indexes, not to "
                             f"index_type {index_type!r}: {use}, or drop it")


def default_nlist(count: int, train_size: int | None = None) -> int:
    """About 4·√N lists, but at least 39 points per list of the sample trained on (``train_size``), as FAISS wants."""
    return max(1, min(int(4 * math.sqrt(count)), min(count, train_size or count) // FAISS_POINTS_PER_CENTROID or 1))


def default_pq_m(dim: int) -> int:
    """Largest divisor of dim that gives sub-vectors of at least 8 dimensions."""
    return max(m for m in range(1, dim // 8 + 1) if dim % m == 0) if dim >= 8 else 1


def factory_string(params: IndexParams, dim: int, count: int) -> str:
    if params.index_type == "flat":
        return "Flat"
    if params.index_type == "hnsw":
        return f"HNSW{params.hnsw_m},Flat"
    if params.index_type == ONDISK_TYPE:
        if params.ondisk_codes not in CODES:
            raise RetrieverError(f"--ondisk-codes must be one of {', '.join(CODES)}")
        return f"IVF{params.nlist or default_nlist(count, params.train_size)},{CODES[params.ondisk_codes]}"
    if params.index_type == "ivfpq":
        nlist = params.nlist or default_nlist(count, params.train_size)
        pq_m = params.pq_m or default_pq_m(dim)
        if dim % pq_m:
            raise RetrieverError(f"--pq-m {pq_m} must divide the embedding dimension {dim}")
        # 8-bit codes need 256 training points per sub-quantiser; small collections get fewer bits.
        nbits = max(1, min(8, int(math.log2(max(count, 2)))))
        return f"IVF{nlist},PQ{pq_m}" + (f"x{nbits}" if nbits < 8 else "")
    return params.index_type


def new_index(spec: str, dim: int, params: IndexParams) -> faiss.Index:
    """An empty inner-product index from a factory string, with the build settings of ``params``."""
    check_factory(spec)
    try:
        index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as error:
        reason = faiss_message(error)
        raise RetrieverError(unreadable_words(spec, reason) or f"FAISS cannot build index {spec!r} for {dim}-dimension "
                             f"vectors: {reason}; use {', '.join(INDEX_TYPES)} or a valid FAISS factory string") from None
    except MemoryError:  # std::bad_alloc making its empty lists or codebooks, as train() catches it
        raise RetrieverError(f"FAISS ran out of memory making an empty {spec!r} index for {dim}-dimension vectors; "
                             "give it more memory (ulimit -v, the container's limit), or fewer IVF lists or smaller "
                             "codes") from None
    hnsw = downcast_hnsw(index)
    if hnsw is not None:
        hnsw.hnsw.efConstruction = params.ef_construction
    refine = faiss.downcast_index(index)
    if isinstance(refine, faiss.IndexRefine):
        # FAISS re-scores only k candidates by default, which leaves PQ's error in place.
        refine.k_factor = float(params.refine_k_factor)
    ivf = ivf_part(index)
    if ivf is not None:
        ivf = faiss.downcast_index(ivf)
        if getattr(ivf, "do_polysemous_training", False):
            # Polysemous codes only speed up Hamming-filtered search, which we never turn on, and
            # training them costs several times the IVF-PQ training (benchmarks/README.md).
            ivf.do_polysemous_training = False
    return index


def hnsw_record(index: faiss.Index) -> dict:
    """The manifest's ``hnsw_m`` and ``ef_construction``, read from the graph built rather than from the flags:
    a factory string such as 'PCA16,HNSW8,Flat' sets its own M, and the HNSW of an 'IVF16_HNSW8' quantizer is not
    the one efConstruction is set on (both were recorded as the flag defaults, 32 and 200)."""
    hnsw = downcast_hnsw(index)
    if hnsw is None:
        return {"hnsw_m": None, "ef_construction": None}
    return {"hnsw_m": int(hnsw.hnsw.nb_neighbors(1)), "ef_construction": int(hnsw.hnsw.efConstruction)}


def train(index: faiss.Index, shards: list[Path], count: int, params: IndexParams, spec: str,
          progress: bool = True) -> int | None:
    """Train on a sample read shard by shard; return the sample size (None if nothing to train)."""
    if index.is_trained:
        return None
    check_training_memory(index, min(count, params.train_size), index.d, spec, sampled=False,
                          index_type=params.index_type)
    sample = sample_vectors(shards, count, params.train_size, params.seed, "sample for training" if progress else None)
    threads = check_training_memory(index, len(sample), index.d, spec, True, index_type=params.index_type)
    before = faiss.omp_get_max_threads()
    if progress:
        alone = " on one thread (the address-space limit holds no more)" if threads < before else ""
        print(f"training {spec} on {len(sample)} sampled vectors{alone}", file=sys.stderr)
    codebooks_note = quiet_codebooks(index, len(sample), spec)
    faiss.omp_set_num_threads(threads)
    try:
        index.train(sample)
    except RuntimeError as error:  # what check_trainable could not foresee: the line names what to change
        from retriever.index_checks import training_failure  # it imports this module
        reason = faiss_message(error)
        raise RetrieverError(training_failure(spec, index.d, len(sample), count, params, reason)) from None
    except MemoryError:  # std::bad_alloc, past what check_training_memory foresaw (other memory in use)
        raise RetrieverError(f"FAISS ran out of memory training {spec!r} on {len(sample)} vectors; give it more "
                             "memory (ulimit -v, the container's limit), or train on fewer (--train-size)") from None
    finally:
        faiss.omp_set_num_threads(before)
    if codebooks_note and progress:
        print(codebooks_note, file=sys.stderr)
    return len(sample)


def with_search_defaults(index: faiss.Index, defaults: dict) -> faiss.Index:
    """``index`` with the manifest's nprobe / efSearch set on it, as FAISS saves them in the file: one opened with
    plain ``faiss.read_index`` then searches as `retriever search` does, not at FAISS's own nprobe 1 / efSearch 16."""
    apply_search_params(index, defaults.get("nprobe"), defaults.get("ef_search"))
    return index


def search_defaults(index: faiss.Index, params: IndexParams, tuning: dict | None) -> dict:
    defaults = {"nprobe": min(16, ivf_part(index).nlist) if ivf_part(index) is not None else None,
                "ef_search": 128 if downcast_hnsw(index) is not None else None, **params.search_defaults}
    if tuning is not None and tuning["parameter"]:
        defaults[tuning["parameter"]] = tuning["value"]
    return defaults


