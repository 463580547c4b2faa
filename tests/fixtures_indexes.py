"""Flat indexes of the tiny corpus built with the tiny BERT: session builds to copy (tiny_flat_build, tiny_dense_build),
indexes shared read-only (tiny_index, which is tiny_flat_build, and small_index: the serving tests' and
test_shared_encoders'), and helpers to read or change an index's BM25 part and to watch its searches."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures_corpora import write_tiny_beir

SMALL_INDEX_DOCS = 6  # the documents of small_index: the first of the tiny corpus
_BUILT_ONCE: dict[str, Path] = {}


def build_flat_index(corpus: Path, output: Path, model_dir: Path, with_bm25: bool = True, **settings: object) -> Path:
    """``corpus`` encoded with the model of ``model_dir`` (fp32, on the CPU, ``settings`` its encoder's) into a flat
    index at ``output``, with a BM25 part unless ``with_bm25`` is False."""
    from retriever.encoder import Encoder, EncoderSettings
    from retriever.indexing import IndexParams, encode_and_index
    from retriever.lexical import LexicalParams

    encoder = Encoder(EncoderSettings(model=str(model_dir), **settings), device="cpu", dtype="fp32")
    encode_and_index(corpus, output, encoder, IndexParams("flat"), progress=False,
                     lexical=LexicalParams() if with_bm25 else None)
    return output


@pytest.fixture(scope="session")
def tiny_flat_build(tiny_model_dir, tmp_path_factory) -> Path:
    """tiny_beir indexed once (flat, with BM25) for tests that each take a copy (shutil.copytree into their tmp_path):
    a build per test cost seconds a file, and a copy keeps a test that edits its index from touching another's."""
    root = tmp_path_factory.mktemp("tiny-flat-build")
    return build_flat_index(write_tiny_beir(root / "tiny-beir"), root / "idx", tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_dense_build(tiny_model_dir, tmp_path_factory) -> Path:
    """tiny_flat_build without its BM25 part, to copy the same way."""
    root = tmp_path_factory.mktemp("tiny-dense-build")
    return build_flat_index(write_tiny_beir(root / "tiny-beir"), root / "idx", tiny_model_dir, with_bm25=False)


@pytest.fixture()
def index(tiny_flat_build, tmp_path):
    """A copy of tiny_flat_build (flat, with BM25) to change: the BM25 part's tests (adding it, opening it)."""
    return shutil.copytree(tiny_flat_build, tmp_path / "idx")


@pytest.fixture()
def tiny_index(tiny_flat_build) -> Path:
    """The 12-document tiny BEIR corpus indexed with the tiny BERT (fp32, flat, with BM25), shared read-only, not to be
    changed: tiny_flat_build itself, which was built a second time alike for it."""
    return tiny_flat_build


@pytest.fixture()
def small_index(tiny_beir, tiny_model_dir, tmp_path_factory) -> Path:
    """Only the first ``SMALL_INDEX_DOCS`` documents of the tiny corpus, so results show which index answered."""
    if "small_index" not in _BUILT_ONCE:
        root = tmp_path_factory.mktemp("serving-small")
        lines = (tiny_beir / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        (root / "corpus.jsonl").write_text("".join(lines[:SMALL_INDEX_DOCS]), encoding="utf-8")
        _BUILT_ONCE["small_index"] = build_flat_index(root / "corpus.jsonl", root / "small", tiny_model_dir)
    return _BUILT_ONCE["small_index"]


def bm25_hits(index) -> list[tuple[str, float]]:
    from retriever.searching import Searcher

    return [(hit.id, round(hit.score, 5)) for hit in Searcher(index, device="cpu").search(["honey bee flower"], k=5,
                                                                                         mode="bm25")[0]]


def with_lexical_record(index, **changes) -> None:
    """The index's manifest with ``changes`` made to its BM25 record."""
    from retriever.index_folder import MANIFEST_FILE

    manifest = json.loads((index / MANIFEST_FILE).read_text())
    manifest["lexical"].update(changes)
    (index / MANIFEST_FILE).write_text(json.dumps(manifest))


@pytest.fixture()
def batches_searched(monkeypatch) -> list:
    """Searcher.run_batches in batches of one query, failing the search if a batch before the one just handed on is
    still held anywhere: what searches of a whole split (evaluate, mine) must not do. Yields the list of batches
    searched (weak references to their hit lists); ``Searcher.run_batches.__wrapped__`` is the search unwatched."""
    import weakref

    from retriever.searching import Searcher

    class Hits(dict):
        pass

    searched, earlier = Searcher.run_batches, []

    def run_batches(self, *args, **kwargs):
        for number, part in enumerate(searched(self, *args, **kwargs)):
            assert all(ref() is None for batch in earlier[:number - 1] for ref in batch), "an earlier batch is held"
            part = {qid: Hits(hits) for qid, hits in part.items()}
            earlier.append([weakref.ref(hits) for hits in part.values()])
            yield part
    run_batches.__wrapped__ = searched  # the search as it is, for a test to put back
    monkeypatch.setattr(Searcher, "run_batches", run_batches)
    monkeypatch.setattr(Searcher, "queries_per_batch", lambda self, depth, batch_size=256: 1)
    return earlier
