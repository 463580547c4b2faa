"""Batch search at scale: what a search holds in memory does not grow with the number of queries."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fixtures_corpora import TINY_DOCS
from retriever.cli import main
from retriever.runs import read_run
from retriever.searching import Searcher


@pytest.mark.parametrize("run_format", ["trec", "jsonl"])
def test_a_batch_search_writes_each_batch_of_queries_before_searching_the_next(tiny_index, tmp_path, monkeypatch,
                                                                               run_format, one_torch_thread):
    """The whole run was held until every query was searched (about 60 bytes a hit: 10k queries × 1000 hits
    took 1.2 GB, 100k would take 6 GB); now each batch of 256 queries goes to the file's partial run at once."""
    words = [x for _, _, x in TINY_DOCS]
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": words[i % len(words)]}) + "\n"
                               for i in range(600)))
    output = tmp_path / "run.out"
    written_before_each_batch = []
    rank = Searcher.rank

    def rank_noting_what_is_written(self, *args, **kwargs):
        written_before_each_batch.append(sum(f.stat().st_size for f in tmp_path.glob(".run.out.partial")))
        return rank(self, *args, **kwargs)

    monkeypatch.setattr(Searcher, "rank", rank_noting_what_is_written)
    result = CliRunner().invoke(main, ["search", str(tiny_index), "--queries", str(queries), "-o", str(output),
                                       "-k", "3", "--run-format", run_format, "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    assert len(written_before_each_batch) == 3  # batches of 256, 256 and 88 queries
    assert written_before_each_batch[0] == 0 < written_before_each_batch[1] < written_before_each_batch[2]
    run = read_run(output)
    assert list(run) == [f"q{i}" for i in range(600)] and {len(hits) for hits in run.values()} == {3}
    assert not list(tmp_path.glob(".run.out*"))  # neither the partial run nor its record is left
    assert "wrote 600 queries × top 3" in result.output


def test_a_batch_search_to_standard_output_prints_the_same_run(tiny_index, tmp_path, one_torch_thread):
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": x}) + "\n" for i, (_, _, x) in enumerate(TINY_DOCS)))
    common = ["search", str(tiny_index), "--queries", str(queries), "-k", "4", "--device", "cpu", "--dtype", "fp32"]
    to_file = CliRunner().invoke(main, [*common, "-o", str(tmp_path / "run.trec")])
    printed = CliRunner().invoke(main, common)
    assert to_file.exit_code == printed.exit_code == 0
    assert printed.stdout == (tmp_path / "run.trec").read_text()


def batch_sizes(monkeypatch, batch_hits: int) -> list[int]:
    """The query count of every batch ``Searcher.rank`` is given from now on, with ``BATCH_HITS`` set."""
    import retriever.search_runs as search_runs

    monkeypatch.setattr(search_runs, "BATCH_HITS", batch_hits)
    sizes: list[int] = []
    rank = Searcher.rank
    monkeypatch.setattr(Searcher, "rank", lambda self, texts, *a, **kw: sizes.append(len(texts)) or rank(
        self, texts, *a, **kw))
    return sizes


def test_deep_batch_searches_take_fewer_queries_at_once(tiny_index, monkeypatch, one_torch_thread):
    """256 queries × 100,000 hits were searched and held as one batch (2.8 GB); a batch now holds at most
    ``BATCH_HITS`` hits, counting only the hits the index can return."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32")
    sizes = batch_sizes(monkeypatch, 10)
    texts = [x for _, _, x in TINY_DOCS]
    run = searcher.run([f"q{i}" for i in range(12)], texts, k=5)
    assert sizes == [2] * 6 and {len(hits) for hits in run.values()} == {5}
    sizes.clear()
    searcher.run([f"q{i}" for i in range(12)], texts, k=10**9)  # as deep as the 12 passages: one query a batch
    assert sizes == [1] * 12


def test_a_hybrid_batch_is_sized_by_the_fusion_depth(tiny_index, monkeypatch, one_torch_thread):
    """Hybrid holds each engine's top --fusion-depth for every query of a batch: at --fusion-depth 10**9, 256
    queries of k=10 held 3 GB on 200k passages."""
    searcher = Searcher(tiny_index, device="cpu", dtype="fp32", mode="hybrid", fusion_overrides={"depth": 10**9})
    sizes = batch_sizes(monkeypatch, 24)
    texts = [x for _, _, x in TINY_DOCS]
    run = searcher.run([f"q{i}" for i in range(12)], texts, k=2)
    assert sizes == [2] * 6 and {len(hits) for hits in run.values()} == {2}
