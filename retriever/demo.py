"""The built-in demo: index a small shipped collection, search it and score it.

It needs nothing outside the installed package, so it is the first thing to run on a new
machine, and it proves every stage (read, encode, index, search, evaluate) end to end.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from retriever.corpus import BeirDataset, read_queries
from retriever.encoder import Encoder, EncoderSettings
from retriever.evaluation import corpus_difference, evaluate_index
from retriever.evaluation_report import EvaluationReport
from retriever.errors import INDEX_PATH, RetrieverError, given_path
from retriever.folders import named_output, replaceable
from retriever.indexing import MANIFEST_FILE, IndexParams, encode_and_index
from retriever.searching import Hit, Searcher
from retriever.texts import check_k

DEMO_QUERIES = 3


def demo_dataset() -> BeirDataset:
    return BeirDataset.open(Path(str(resources.files("retriever") / "demo_data")))


@dataclass
class DemoResult:
    index: Path
    examples: list[tuple[str, list[Hit]]]
    report: EvaluationReport


def run_demo(output: str | Path = "indexes/demo", model: str = "minilm", device: str = "auto",
             dtype: str = "auto", k: int = 5, progress: bool = True) -> DemoResult:
    """Build ``output`` from the demo collection (replacing an old one), then search and evaluate it.

    The index is opened by its absolute path, taken before the build: building ``.`` swaps a new folder in at
    the working folder's path, after which ``.`` still names the old, deleted one. ``output`` and ``k`` are checked
    first: the search refused a bad k only after the whole build and evaluation."""
    output = given_path(output, "output", INDEX_PATH)
    k = check_k(k)
    dataset = demo_dataset()
    built = named_output(output).absolute()
    if (built.exists() or built.is_symlink()) and not replaceable(built, MANIFEST_FILE):  # before the model loads
        raise RetrieverError(f"{output}: exists and is not an index folder; the demo replaces only an index folder "
                             "(one it built before) or an empty one: remove it or choose another --output")
    _check_own_index(built, output, dataset.corpus_path)
    encoder = Encoder(EncoderSettings.for_model(model), device=device, dtype=dtype)
    encode_and_index(dataset.corpus_path, output, encoder, IndexParams("flat"), overwrite=True, progress=progress)
    searcher = Searcher(built, device=device, dtype=dtype)
    report, _ = evaluate_index(searcher, dataset, "test", k=1000, progress=progress, built_from_corpus=True)
    queries = read_queries(dataset.queries_path)[:DEMO_QUERIES]
    hits = searcher.search([q.text for q in queries], k=k)
    return DemoResult(index=Path(output), examples=[(q.text, h) for q, h in zip(queries, hits)], report=report)


def _check_own_index(built: Path, output: str | Path, corpus: Path) -> None:
    """Refuse an index of another corpus (``corpus_difference``): `demo -o indexes/scifact` replaced a user's index
    with the demo's. A folder whose manifest or corpus record cannot be read (empty, or damaged) is replaced as
    before."""
    try:
        recorded = json.loads((built / MANIFEST_FILE).read_text(encoding="utf-8"))["corpus"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    if corpus_difference(recorded, corpus) is not None:
        raise RetrieverError(f"{output}: an index of another corpus ({recorded.get('name')}), not the demo's; the demo "
                             "replaces only an index of the demo collection (one it built before) or an empty folder: "
                             "choose another --output, or remove it")
