"""What FAISS would refuse only late (after the corpus is encoded, or at its second add), refused once the dimension
and the corpus's size are known: factory strings it cannot build or the build cannot fill, and indexes whose
training needs more vectors than the corpus or --train-size give."""
from __future__ import annotations

import re

import faiss

from retriever.choices import INDEX_TYPES, ONDISK_TYPE
from retriever.errors import RetrieverError
from retriever.index_type_settings import fewer_lists, untrained_refusal
from retriever.faiss_index import IndexParams, check_defaults_taken, factory_string, new_index, trains
from retriever.search_settings import downcast_hnsw, inner_index, ivf_part, taken_setting
from retriever.wording import counted


def check_buildable(params: IndexParams, dim: int) -> None:
    """Refuse, once the dimension is known and before any encoding, what FAISS would refuse only after it (a
    string it cannot parse, an L2-only type, sub-quantisers not dividing the dimension, a PCA wider than the
    vectors) or an index the build cannot fill: NSG builds its graph in one add of every vector, the build adds
    shard by shard and the --target-recall sample after its sweep (it failed at the second add)."""
    if params.index_type in INDEX_TYPES:
        if params.index_type == "ivfpq" and params.pq_m and dim % params.pq_m:
            raise RetrieverError(f"--pq-m {params.pq_m} must divide the embedding dimension {dim}")
        return
    trained = trains(params.index_type, dim)  # asked first: two empty indexes of an exotic string were held at once
    index = new_index(params.index_type, dim, params)
    check_defaults_taken(params.search_defaults, taken_setting(index), params.index_type)
    if not trained and params.train_size != IndexParams.train_size:  # was ignored ('HNSW32,Flat', 'SQfp16')
        raise RetrieverError(untrained_refusal(params.index_type))
    if downcast_hnsw(index) is None and params.ef_construction != IndexParams.ef_construction:
        raise RetrieverError(f"--ef-construction is used only by an index with an HNSW graph of its own, not by "
                             f"--index-type {params.index_type!r}, whose HNSW is its IVF's quantizer (FAISS builds it "
                             "with its own efConstruction); drop it")
    if isinstance(inner_index(index), faiss.IndexNSG):
        raise RetrieverError(f"--index-type {params.index_type!r}: NSG needs every vector in one add, and the "
                             "index is filled shard by shard; use HNSW instead, e.g. 'HNSW32,Flat'")
    if isinstance(inner_index(index), faiss.IndexRowwiseMinMaxBase):  # failed at the first add, after the encoding
        raise RetrieverError(f"--index-type {params.index_type!r}: FAISS's MinMax wrapper cannot add vectors (it is "
                             "filled from codes only); drop the MinMax part, e.g. "
                             f"{re.sub(r'MinMax(FP16)?,', '', params.index_type)!r}")
    _check_quantizer(params.index_type, index)
    direct = re.search(r"SQ8_direct(?:_signed)?(?![A-Za-z0-9_])", params.index_type)
    if direct:  # FAISS takes each value as a code (0 to 255, or -128 to 127), unscaled
        raise RetrieverError(f"--index-type {params.index_type!r}: {direct.group()} stores each value as the whole "
                             "number it rounds to, and embedding values are fractions, so nearly every vector is "
                             "stored as zeros and search finds nothing it should; use SQ8 (scaled to the values' "
                             "range) or SQfp16")
    for graph in _hnsw_graphs(index):
        links = graph.hnsw.cum_nneighbor_per_level  # 0, then 2M on the bottom layer: M=1 sets no layer at all
        if links.size() < 2 or links.at(1) < 4:
            raise RetrieverError(f"--index-type {params.index_type!r}: an HNSW graph needs at least 2 neighbours a "
                                 "node (FAISS crashes adding to one of fewer); use e.g. 'HNSW32,Flat'")
    outer = faiss.downcast_index(index)  # a view: ``index`` owns the C++ object and must outlive it
    for position in range(outer.chain.size() if isinstance(outer, faiss.IndexPreTransform) else 0):
        transform = faiss.downcast_VectorTransform(outer.chain.at(position))
        if isinstance(transform, faiss.PCAMatrix) and transform.d_out > transform.d_in:
            problem = f"a PCA cannot output {transform.d_out} dimensions from {transform.d_in}"
        elif isinstance(transform, faiss.OPQMatrix) and transform.d_out % transform.M:
            problem = f"OPQ's {transform.M} sub-quantisers do not divide its {transform.d_out} dimensions"
        else:
            continue
        raise RetrieverError(f"--index-type {params.index_type!r}: {problem} (the vectors have {dim})")


def _check_quantizer(spec: str, index: faiss.Index) -> None:
    """Refuse an IVF whose quantizer (``IVF8(PQ2)``) needs more training points than its lists: FAISS trains it on
    the list centroids, not on the sample, so it failed after the corpus was encoded, advising fewer lists."""
    ivf = ivf_part(index)
    if ivf is None:
        return
    ivf = faiss.downcast_index(ivf)  # a view: ``index`` owns it
    needed, what = max(training_needs(ivf.quantizer), default=(0, ""))
    if needed > ivf.nlist:
        raise RetrieverError(f"--index-type {spec!r}: the IVF's quantizer ({what}) trains on its {ivf.nlist} list "
                             f"centroids and needs at least {needed}; use at least {needed} lists or a quantizer of "
                             "fewer bits or none (e.g. 'IVF1024,Flat')")


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
        needed, what = params.nlist, f"{params.nlist} IVF lists"  # not made: 2**31 lists were a bad_alloc
    else:
        index = new_index(factory_string(params, dim, count), dim, params)  # named types size lists and codes to it
        needed, what = max(training_needs(index), default=(0, ""))
    if min(count, params.train_size) < needed:
        given = (f"{source} {counted(count, 'document')}" if count <= params.train_size
                 else f"--train-size is {params.train_size}")
        lists = fewer_lists(params.index_type)
        raise RetrieverError(f"--index-type {params.index_type!r} trains on at least {needed} vectors, and {given} "
                             f"({what}): use {lists + ', ' if lists else ''}codes of fewer bits or a smaller PCA, a "
                             "larger --train-size, or a flat index")


def training_needs(index: faiss.Index) -> list[tuple[int, str]]:
    """The fewest training vectors each trained part of ``index`` takes, with what it is: FAISS refuses fewer
    points than an IVF's lists or a codebook's centroids, fewer than a PCA's output dimensions, and (residual
    quantizers) fewer than their dimensions."""
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
    needs = [(part.nlist, f"{part.nlist} IVF lists"), *training_needs(part.quantizer)] \
        if isinstance(part, faiss.IndexIVF) else []
    for name in ("pq", "refine_pq"):  # PQ codes, and an IVFPQR's refinement codes
        codes = getattr(part, name, None)
        if codes is not None:
            needs.append((int(codes.ksub), f"{codes.nbits}-bit PQ codes of {codes.ksub} centroids"))
    quantizers = [part.rq] if hasattr(part, "rq") else []
    if hasattr(part, "prq"):
        quantizers = [part.prq.subquantizer(i) for i in range(part.prq.nsplits)]
    for quantizer in quantizers:
        centroids = 2 ** int(max(faiss.vector_to_array(quantizer.nbits), default=0))
        needs.append((max(int(quantizer.d), centroids), f"a residual quantizer of {quantizer.d} dimensions and "
                                                        f"{centroids} centroids"))
    return needs


def _transform_needs(transform: faiss.VectorTransform) -> list[tuple[int, str]]:
    if transform.is_trained:
        return []
    if isinstance(transform, (faiss.PCAMatrix, faiss.ITQTransform)):
        return [(int(transform.d_out), f"a PCA to {transform.d_out} dimensions")]
    if isinstance(transform, faiss.OPQMatrix):
        return [(256, "OPQ's 8-bit codes of 256 centroids")]  # OPQMatrix::train always trains 8-bit PQ codes
    return []
