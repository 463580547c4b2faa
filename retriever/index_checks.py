"""What FAISS would refuse only late (after the corpus is encoded, or at its second add), refused once the dimension
and the corpus's size are known: factory strings it cannot build or the build cannot fill, and indexes whose
training needs more vectors than the corpus or --train-size give."""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import faiss

from retriever.choices import INDEX_TYPES, ONDISK_TYPE
from retriever.errors import RetrieverError
from retriever.index_type_settings import fewer_lists, untrained_refusal
from retriever.faiss_index import IndexParams, check_defaults_taken, factory_string, new_index
from retriever.search_settings import downcast_hnsw, inner_index, ivf_part, taken_setting
from retriever.wording import counted


@dataclass(frozen=True)
class EmptyIndexFacts:
    """What the build's checks ask of an empty index of one factory string and width, read from one index made
    once per process (``empty_index_facts``): an exotic string's empty index holds hundreds of MB ('IVF1048576_HNSW32,
    PQ96x16' at 384 dimensions: 257 MB), and the CLI's, the encoding's and the build's checks each made their own."""

    trains: bool  # trained before vectors are added (so --train-size and the corpus's size matter)
    training_needs: tuple[tuple[int, str, str], ...]  # ``training_needs``
    taken_setting: str | None  # the search setting it takes (``search_settings.taken_setting``)
    own_hnsw: bool  # an HNSW graph of its own, which --ef-construction sets (not an IVF's HNSW quantizer)
    problem: str | None  # why the build cannot fill it, or FAISS cannot (``_structure_problem``)


@lru_cache(maxsize=32)
def empty_index_facts(spec: str, dim: int) -> EmptyIndexFacts:
    """``EmptyIndexFacts`` of the factory string ``spec`` at width ``dim``; the index is let go on return."""
    index = new_index(spec, dim, IndexParams())
    return EmptyIndexFacts(not index.is_trained, tuple(training_needs(index)), taken_setting(index),
                           downcast_hnsw(index) is not None, _structure_problem(spec, index, dim))


def trains(index_type: str, dim: int) -> bool:
    """Whether an index of ``index_type`` is trained before vectors are added (so --train-size and the corpus's size
    matter): flat and hnsw are not, ivfpq and ivf-ondisk are, and a factory string as FAISS builds it ('HNSW32,Flat'
    and 'SQfp16' train nothing)."""
    if index_type in INDEX_TYPES:
        return index_type not in ("flat", "hnsw")
    return empty_index_facts(index_type, dim).trains


def check_buildable(params: IndexParams, dim: int) -> None:
    """Refuse, once the dimension is known and before any encoding, what FAISS would refuse only after it (a
    string it cannot parse, an L2-only type, sub-quantisers not dividing the dimension, a PCA wider than the
    vectors) or an index the build cannot fill (``_structure_problem``), and build settings it would ignore."""
    if params.index_type in INDEX_TYPES:
        if params.index_type == "ivfpq" and params.pq_m and dim % params.pq_m:
            raise RetrieverError(f"--pq-m {params.pq_m} must divide the embedding dimension {dim}")
        return
    facts = empty_index_facts(params.index_type, dim)
    check_defaults_taken(params.search_defaults, facts.taken_setting, params.index_type)
    if not facts.trains and params.train_size != IndexParams.train_size:  # was ignored ('HNSW32,Flat', 'SQfp16')
        raise RetrieverError(untrained_refusal(params.index_type))
    if not facts.own_hnsw and params.ef_construction != IndexParams.ef_construction:
        raise RetrieverError(f"--ef-construction is used only by an index with an HNSW graph of its own, not by "
                             f"--index-type {params.index_type!r}, whose HNSW is its IVF's quantizer (FAISS builds it "
                             "with its own efConstruction); drop it")
    if facts.problem is not None:
        raise RetrieverError(f"--index-type {params.index_type!r}: {facts.problem}")


def _structure_problem(spec: str, index: faiss.Index, dim: int) -> str | None:
    """Why the build cannot fill ``index`` or FAISS cannot: NSG builds its graph in one add of every vector, the
    build adds shard by shard and the --target-recall sample after its sweep (it failed at the second add); the
    others failed at the first add or the training, after the encoding, or searched wrong."""
    if isinstance(inner_index(index), faiss.IndexNSG):
        return ("NSG needs every vector in one add, and the index is filled shard by shard; use HNSW instead, e.g. "
                "'HNSW32,Flat'")
    if isinstance(inner_index(index), faiss.IndexRowwiseMinMaxBase):
        return ("FAISS's MinMax wrapper cannot add vectors (it is filled from codes only); drop the MinMax part, "
                f"e.g. {re.sub(r'MinMax(FP16)?,', '', spec)!r}")
    quantizer = _quantizer_problem(index)
    if quantizer is not None:
        return quantizer
    direct = re.search(r"SQ8_direct(?:_signed)?(?![A-Za-z0-9_])", spec)
    if direct:  # FAISS takes each value as a code (0 to 255, or -128 to 127), unscaled
        return (f"{direct.group()} stores each value as the whole number it rounds to, and embedding values are "
                "fractions, so nearly every vector is stored as zeros and search finds nothing it should; use SQ8 "
                "(scaled to the values' range) or SQfp16")
    for graph in _hnsw_graphs(index):
        links = graph.hnsw.cum_nneighbor_per_level  # 0, then 2M on the bottom layer: M=1 sets no layer at all
        if links.size() < 2 or links.at(1) < 4:
            return "an HNSW graph needs at least 2 neighbours a node (FAISS crashes adding to one of fewer); use e.g. " \
                   "'HNSW32,Flat'"
    outer = faiss.downcast_index(index)  # a view: ``index`` owns the C++ object and must outlive it
    for position in range(outer.chain.size() if isinstance(outer, faiss.IndexPreTransform) else 0):
        transform = faiss.downcast_VectorTransform(outer.chain.at(position))
        if isinstance(transform, faiss.PCAMatrix) and transform.d_out > transform.d_in:
            return f"a PCA cannot output {transform.d_out} dimensions from {transform.d_in} (the vectors have {dim})"
        if isinstance(transform, faiss.OPQMatrix) and transform.d_out % transform.M:
            return (f"OPQ's {transform.M} sub-quantisers do not divide its {transform.d_out} dimensions (the vectors "
                    f"have {dim})")
    return None


def _quantizer_problem(index: faiss.Index) -> str | None:
    """An IVF whose quantizer (``IVF8(PQ2)``) needs more training points than its lists: FAISS trains it on the list
    centroids, not on the sample, so it failed after the corpus was encoded, advising fewer lists."""
    ivf = ivf_part(index)
    if ivf is None:
        return None
    ivf = faiss.downcast_index(ivf)  # a view: ``index`` owns it
    needed, what, _ = max(training_needs(ivf.quantizer), default=(0, "", ""))
    if needed > ivf.nlist:
        return (f"the IVF's quantizer ({what}) trains on its {ivf.nlist} list centroids and needs at least {needed}; "
                f"use at least {needed} lists or a quantizer of fewer bits or none (e.g. 'IVF1024,Flat')")
    return None


def _hnsw_graphs(index: faiss.Index) -> list:
    """The HNSW indexes in ``index``: its own (inside wrappers) and an IVF's quantizer (``IVF16_HNSW8``)."""
    graphs = [downcast_hnsw(index)]
    ivf = ivf_part(index)
    if ivf is not None:
        graphs.append(downcast_hnsw(faiss.downcast_index(ivf).quantizer))
    return [graph for graph in graphs if graph is not None]


def check_trainable(params: IndexParams, dim: int, count: int, source: str = "the corpus has") -> None:
    """Refuse, before the corpus is encoded (``build``) or read (``index``), an index whose training needs more
    vectors than ``count`` documents or --train-size give: FAISS refuses it only at training, after that pass."""
    if params.index_type in ("flat", "hnsw"):
        return
    if params.index_type in (ONDISK_TYPE, "ivfpq") and (params.nlist or 0) > min(count, params.train_size):
        needed, what, part = params.nlist, f"{params.nlist} IVF lists", LISTS  # not made: 2**31 lists were a bad_alloc
    else:  # a named type's factory string sizes its lists and codes to the count
        needs = empty_index_facts(factory_string(params, dim, count), dim).training_needs
        needed, what, part = max((need for need in needs if not (need[2] == SCALAR and count <= params.train_size)),
                                 default=(0, "", ""))  # a scalar range from every vector there is holds them all
    if min(count, params.train_size) < needed:
        short_corpus = count < needed  # then no --train-size gives enough
        given = f"{source} {counted(count, 'document')}" if short_corpus else f"--train-size is {params.train_size}"
        fixes = [] if short_corpus else [f"--train-size {needed} or more"]
        fixes += [fix for fix in [_smaller_need(part, params.index_type)] if fix] + ["a flat index"]
        raise RetrieverError(f"--index-type {params.index_type!r} trains on at least {needed} vectors, and {given} "
                             f"({what}): use {_one_of(fixes)}")


def training_failure(spec: str, dim: int, sampled: int, count: int, params: IndexParams, reason: str) -> str:
    """The line for FAISS refusing to train ``spec`` on ``sampled`` vectors of ``dim`` dimensions where
    ``check_trainable`` let it by (``reason`` is FAISS's): what to change, by the parts the index has. It said
    "fewer lists or codes of fewer bits" of any index, with neither the width nor why, so a whitened PCA over
    copies of one document (infinite vectors) was advised fewer lists."""
    reason = re.sub(r"^'.*' failed: ", "", reason)  # FAISS's assertion ('!(std::isfinite(x[i]))') before its words
    kinds = dict.fromkeys(kind for _, _, kind in empty_index_facts(spec, dim).training_needs)
    if WHITENED in kinds and "NaN" in reason:
        reason += (" (its whitened PCA divides each direction by the vectors' spread along it, and they vary in fewer "
                   "directions than it keeps: are many documents the same?)")
        fixes = [_SMALLER_PARTS[WHITENED], "more distinct documents"]
    else:
        fixes = [fix for fix in (_smaller_need(kind, params.index_type) for kind in kinds) if fix]
        fixes.append(f"--train-size above {params.train_size}" if count > params.train_size else "more documents")
    named = f" (--index-type {params.index_type!r})" if params.index_type != spec else ""
    return (f"FAISS could not train {spec!r}{named} on {counted(sampled, 'vector')} of {dim} dimensions: {reason}; "
            f"use {_one_of([*fixes, 'a flat index'])}")


def _one_of(fixes: list[str]) -> str:
    """``fixes`` as alternatives: "a or b", "a, b, or c"."""
    return " or ".join(fixes) if len(fixes) < 3 else f"{', '.join(fixes[:-1])}, or {fixes[-1]}"


def _smaller_need(part: str, index_type: str) -> str | None:
    """How ``index_type`` asks for a ``part`` (a ``training_needs`` kind) that trains on fewer vectors, or None when
    it cannot: ivfpq sizes its codes' bits to the corpus itself, and a residual quantizer needs its dimensions."""
    if part == LISTS:
        return fewer_lists(index_type)
    if part == SCALAR:
        return ("--ondisk-codes fp16 (which trains nothing)" if index_type == ONDISK_TYPE
                else "SQfp16 codes (which train nothing)")
    if part == PQ and index_type != "ivfpq":
        return "PQ codes of fewer bits (a smaller number after 'x' in --index-type; none is 8)"
    return _SMALLER_PARTS.get(part)


# The kinds of trained part ``training_needs`` tells apart, each made to train on fewer vectors its own way
LISTS, PQ, SCALAR, PCA, OPQ, RESIDUAL_BITS, WIDTH = "lists", "pq", "scalar", "pca", "opq", "residual bits", "width"
WHITENED = "whitened pca"
_SMALLER_PARTS = {
    PCA: "a PCA to fewer dimensions (a smaller number after 'PCA' or 'ITQ' in --index-type)",
    WHITENED: "a PCA without whitening ('PCA' or 'PCAR' for 'PCAW' or 'PCAWR' in --index-type)",
    OPQ: "no OPQ part (it trains codes of 256 centroids whatever the string's bits)",
    RESIDUAL_BITS: "residual codes of fewer bits (a smaller number after 'x' in --index-type)",
    WIDTH: "a PCA to fewer dimensions before the residual quantizer",
}


def training_needs(index: faiss.Index) -> list[tuple[int, str, str]]:
    """The fewest training vectors each trained part of ``index`` takes, with what it is and its kind (``LISTS``
    ...): FAISS refuses fewer points than an IVF's lists or a codebook's centroids, fewer than a PCA's output
    dimensions, and (residual quantizers) fewer than their dimensions."""
    part = faiss.downcast_index(index)  # a view: ``index`` owns the C++ object, so the name must stay bound
    if part.is_trained:
        return []
    if isinstance(part, faiss.IndexPreTransform):
        chain = [faiss.downcast_VectorTransform(part.chain.at(i)) for i in range(part.chain.size())]
        return [need for transform in chain for need in _transform_needs(transform)] + training_needs(part.index)
    if isinstance(part, faiss.IndexRefine):
        return training_needs(part.base_index) + training_needs(part.refine_index)
    if isinstance(part, faiss.IndexHNSW):
        return training_needs(part.storage)
    needs = [(part.nlist, f"{part.nlist} IVF lists", LISTS), *training_needs(part.quantizer)] \
        if isinstance(part, faiss.IndexIVF) else []
    for name in ("pq", "refine_pq"):  # PQ codes, and an IVFPQR's refinement codes
        codes = getattr(part, name, None)
        if codes is not None:
            needs.append((int(codes.ksub), f"{codes.nbits}-bit PQ codes of {codes.ksub} centroids", PQ))
    scalar = getattr(part, "sq", None)
    if scalar is not None and scalar.qtype in _RANGED_SCALAR_CODES:  # 'SQ8', 'IVF64,SQ8', ivf-ondisk's sq8
        needs.append((2, SCALAR_RANGE, SCALAR))
    quantizers = [part.rq] if hasattr(part, "rq") else []
    if hasattr(part, "prq"):
        quantizers = [part.prq.subquantizer(i) for i in range(part.prq.nsplits)]
    for quantizer in quantizers:
        centroids = 2 ** int(max(faiss.vector_to_array(quantizer.nbits), default=0))
        kind = RESIDUAL_BITS if centroids > quantizer.d else WIDTH
        needs.append((max(int(quantizer.d), centroids), f"a residual quantizer of {quantizer.d} dimensions and "
                                                        f"{centroids} centroids", kind))
    return needs


# Scalar codes scaled to each dimension's min and max in the training sample (fp16, bf16 and the direct codes train
# nothing): one vector's range is empty, so the others all get the same code, unless it is the only one
SCALAR_RANGE = "a scalar quantizer, which takes each dimension's range from them: one vector gives every vector the same code"
_RANGED_SCALAR_CODES = {getattr(faiss.ScalarQuantizer, name) for name in ("QT_8bit", "QT_4bit", "QT_6bit",
                                                                          "QT_8bit_uniform", "QT_4bit_uniform")}


def _transform_needs(transform: faiss.VectorTransform) -> list[tuple[int, str, str]]:
    if transform.is_trained:
        return []
    if isinstance(transform, faiss.PCAMatrix) and transform.eigen_power != 0:  # 'PCAW16': whitened
        # Whitening divides each direction by its spread; N vectors vary in at most N - 1 directions about their mean,
        # so N = d_out left one spread of about 0 and the vectors infinite or huge: FAISS refused them at an IVF's
        # training after the corpus was encoded, and a 'PCAW16,Flat' index stored them (on unit vectors, no hits)
        return [(int(transform.d_out) + 1, f"a whitened PCA to {transform.d_out} dimensions", WHITENED)]
    if isinstance(transform, (faiss.PCAMatrix, faiss.ITQTransform)):
        return [(int(transform.d_out), f"a PCA to {transform.d_out} dimensions", PCA)]
    if isinstance(transform, faiss.OPQMatrix):
        return [(256, "OPQ's 8-bit codes of 256 centroids", OPQ)]  # OPQMatrix::train always trains 8-bit codes
    return []
