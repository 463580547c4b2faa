"""Issue #10's bad-input table: every case is one CLI run that must end in one `error: FILE:LINE: ...` line
and exit code 1, never a traceback. The next case is one more row."""
from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixtures_corpora import TINY_DOCS, write_jsonl
from retriever.cli import main

GOOD_CORPUS = b'{"_id": "a", "text": "the cat sat"}\n'
QRELS = b"q1\td1\t1\n"

# (case, {file name: bytes}, command with {dir}/{model}/{index}/{beir}/{pickled_model}, expected in the error line)
CASES = [
    ("3-corpus-lone-surrogate", {"c.jsonl": GOOD_CORPUS + b'{"_id": "b", "text": "x \\ud800"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:2: text has a lone surrogate U+D800"),
    ("3-title-lone-surrogate", {"c.jsonl": b'{"_id": "b", "title": "\\udfff", "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: the title has a lone surrogate U+DFFF"),
    ("3-queries-lone-surrogate", {"q.jsonl": b'{"_id": "q1", "text": "ok"}\n{"_id": "q2", "text": "\\udc00"}\n'},
     "search {index} --queries {dir}/q.jsonl", "q.jsonl:2: text has a lone surrogate U+DC00"),
    ("3-train-jsonl-lone-surrogate", {"t.jsonl": b'{"query": "\\ud800", "positives": ["a"]}\n'},
     "train --train-jsonl {dir}/t.jsonl --model {model} -o {dir}/m", "t.jsonl:1: the query has a lone surrogate"),
    ("6-passage-max-length", {"c.jsonl": GOOD_CORPUS},
     "build {dir}/c.jsonl -o {dir}/out --model {model} --passage-max-length 1000",
     "--passage-max-length 1000 is more than the 512 positions"),
    ("6-query-max-length", {"c.jsonl": GOOD_CORPUS},
     "build {dir}/c.jsonl -o {dir}/out --model {model} --query-max-length 5000",
     "--query-max-length 5000 is more than the 512 positions"),
    ("8-train-jsonl-bad-utf8", {"t.jsonl": b'{"query": "a", "positives": ["b"]}\n{"query": "\xff"}\n'},
     "train --train-jsonl {dir}/t.jsonl --model {model} -o {dir}/m", "t.jsonl:2: invalid UTF-8"),
    ("8-negatives-bad-utf8", {"n.jsonl": b'{"query_id": "q1", "negatives": ["d\xfe"]}\n'},
     "train --dataset {beir} --split test --negatives {dir}/n.jsonl --model {model} -o {dir}/m",
     "n.jsonl:1: invalid UTF-8"),
    ("9-id-with-space", {"c.jsonl": b'{"_id": "a b", "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: bad document id: id 'a b' holds whitespace"),
    ("9-id-with-newline", {"c.jsonl": GOOD_CORPUS + b'{"_id": "b\\nc", "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:2: bad document id"),
    ("9-id-with-nul", {"c.jsonl": GOOD_CORPUS + b'{"_id": "a\\u0000b", "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:2: bad document id: id 'a\\x00b' holds a control "
                                                          "character"),
    # a byte-order mark mid-file (files joined with cat): it became part of the next line's id, silently
    ("9-tsv-bom-mid-file", {"c.tsv": b"a\tthe cat\n\xef\xbb\xbfb\tthe dog\n"},
     "build {dir}/c.tsv -o {dir}/out --model {model}", "c.tsv:2: bad document id: id '\\ufeffb' holds U+FEFF, a "
                                                       "byte-order mark"),
    ("9-tsv-query-bom-mid-file", {"q.tsv": b"q1\tcat\n\xef\xbb\xbfq2\tdog\n"},
     "search {index} --queries {dir}/q.tsv", "q.tsv:2: bad query id: id '\\ufeffq2' holds U+FEFF"),
    ("9-qrels-bom-mid-file", {"r.trec": b"q1 Q0 d1 1 1.0 t\n", "q.txt": QRELS + b"\xef\xbb\xbfq2\td1\t1\n"},
     "evaluate --run {dir}/r.trec --qrels {dir}/q.txt", "q.txt:2: bad query or document id: id '\\ufeffq2' holds U+"),
    ("9-run-bom-mid-file", {"r.trec": b"q1 Q0 d1 1 1.0 t\n\xef\xbb\xbfq2 Q0 d1 1 1.0 t\n",
                            "q.txt": b"q1 0 d1 1\nq2 0 d1 1\n"},
     "evaluate --run {dir}/r.trec --qrels {dir}/q.txt", "r.trec:2: bad query id: id '\\ufeffq2' holds U+FEFF"),
    ("9-tsv-id-with-space", {"c.tsv": b"a b\tsome text\n"},
     "build {dir}/c.tsv -o {dir}/out --model {model}", "c.tsv:1: bad document id"),
    ("9-query-id-with-tab", {"q.jsonl": b'{"_id": "q\\t1", "text": "cat"}\n'},
     "search {index} --queries {dir}/q.jsonl", "q.jsonl:1: bad query id"),
    ("9-qrels-id-with-space", {"r.trec": b"q1 Q0 d1 1 1.0 t\n", "qrels.tsv": b"q1\td 1\t1\n"},
     "evaluate --run {dir}/r.trec --qrels {dir}/qrels.tsv", "qrels.tsv:1: bad query or document id"),
    ("12-id-nan", {"c.jsonl": b'{"_id": NaN, "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: id field '_id' must be a string or an integer, got nan"),
    ("12-id-infinity", {"c.jsonl": b'{"_id": Infinity, "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: id field '_id' must be a string or an integer, got inf"),
    ("12-id-list", {"c.jsonl": b'{"_id": ["a"], "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: id field '_id' must be a string or an integer, got list"),
    ("12-id-float", {"c.jsonl": b'{"_id": 3.0, "text": "x"}\n'},
     "build {dir}/c.jsonl -o {dir}/out --model {model}", "c.jsonl:1: id field '_id' must be a string or an integer, got 3.0"),
    # two files joined with their headers: the second header was read as a passage 'id' or a query 'id', silently
    ("13-tsv-header-repeated", {"c.tsv": b"id\ttext\na\tthe cat\nid\ttext\nb\tthe dog\n"},
     "build {dir}/c.tsv -o {dir}/out --model {model}", "c.tsv:3: the line repeats the header of line 1"),
    ("13-tsv-query-header-repeated", {"q.tsv": b"qid\tquery\nq1\tcat\nqid\tquery\nq2\tdog\n"},
     "search {index} --queries {dir}/q.tsv", "q.tsv:3: the line repeats the header of line 1"),
    ("13-tsv-header-unknown-column", {"c.tsv": b"id\tbody\ttitle\na\tx\tT\n"},
     "build {dir}/c.tsv -o {dir}/out --model {model}", "c.tsv:1: header column 2 'body' is not a column"),
    ("13-tsv-cr-line-endings", {"c.tsv": b"a\tthe cat\rb\tthe dog\rc\tthe cow\r"},
     "build {dir}/c.tsv -o {dir}/out --model {model}", "c.tsv:1: the line holds a carriage return (CR)"),
    ("12-run-hit-id-list", {"r.jsonl": b'{"qid": "q1", "hits": [{"id": ["d1"], "score": 1}]}\n', "qrels.tsv": QRELS},
     "evaluate --run {dir}/r.jsonl --qrels {dir}/qrels.tsv", 'r.jsonl:1: hit 1 id ["d1"] is not a string'),
    ("12-run-hit-id-nan", {"r.jsonl": b'{"qid": "q1", "hits": [{"id": NaN, "score": 1}]}\n', "qrels.tsv": QRELS},
     "evaluate --run {dir}/r.jsonl --qrels {dir}/qrels.tsv", "r.jsonl:1: hit 1 id NaN is not a string"),
    ("11-qrels-first-line-bad-grade", {"r.trec": b"q1 Q0 d1 1 1.0 t\n", "qrels.tsv": b"q1\td1\tx\nq1\td2\t1\n"},
     "evaluate --run {dir}/r.trec --qrels {dir}/qrels.tsv", "qrels.tsv:1: relevance 'x' is not an integer"),
    ("13-run-score-underscore", {"r.trec": b"q1 Q0 d1 1 1_0 t\n", "qrels.tsv": QRELS},
     "evaluate --run {dir}/r.trec --qrels {dir}/qrels.tsv", "r.trec:1: score '1_0' is not a number"),
    # a NUL in a TREC run's id: trec_eval reads the id up to it ("d1"), the run was scored with "d1\x00x" (0 for 1)
    ("13-run-id-with-nul", {"r.trec": b"q1 Q0 d1\x00x 1 1.0 t\n", "qrels.tsv": QRELS},
     "evaluate --run {dir}/r.trec --qrels {dir}/qrels.tsv", "r.trec:1: bad document id: id 'd1\\x00x' holds a control"),
    ("13-qrels-huge-grade", {"r.trec": b"q1 Q0 d1 1 1.0 t\n", "qrels.tsv": b"q1\td1\t1" + b"0" * 400 + b"\n"},
     "evaluate --run {dir}/r.trec --qrels {dir}/qrels.tsv", "qrels.tsv:1: relevance '1000"),
    # --metrics , and --metrics ndcg@10,prec@5: usage errors since probe round 9 (tests/cli/test_searching_cli.py)
    ("12-no-queries-typo", {"q.jsonl": b"\n"}, "search {index} --queries {dir}/q.jsonl",
     "q.jsonl: the file holds no queries"),
    ("12-unpicklable-bin-weights", {"c.jsonl": GOOD_CORPUS}, "build {dir}/c.jsonl -o {dir}/out --model {pickled_model}",
     "the weights file cannot be loaded as plain tensors"),
]


@pytest.fixture(scope="module")
def places(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    beir = root / "beir"
    (beir / "qrels").mkdir(parents=True)
    write_jsonl(beir / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(beir / "queries.jsonl", [{"_id": "q1", "text": "honey"}])
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td6\t1\n")
    index = root / "index"
    result = CliRunner().invoke(main, ["build", str(beir), "-o", str(index), "--model", str(tiny_model_dir),
                                       "--device", "cpu", "--dtype", "fp32"])
    assert result.exit_code == 0, result.output
    pickled = root / "pickled-model"
    shutil.copytree(tiny_model_dir, pickled)
    (pickled / "model.safetensors").unlink()
    (pickled / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(root / "PWNED"), protocol=2))  # 4: see
    # tests/test_model_loading.py::test_weights_saved_with_a_pickle_protocol_the_safe_loader_cannot_read_say_so
    return {"model": tiny_model_dir, "index": index, "beir": beir, "pickled_model": pickled, "root": root}


class _Payload:
    """Unpickling this runs code that leaves a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("case, files, command, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_error(places, tmp_path, monkeypatch, one_torch_thread, case, files, command,
                                     expected):
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    monkeypatch.setattr("retriever.searching.Searcher.run", _no_search)
    argv = [part.format(dir=tmp_path, **places) for part in command.split(" ")]
    if argv[0] in ("build", "search", "train") or "--index" in argv:
        argv += ["--device", "cpu", "--dtype", "fp32"]
    result = CliRunner().invoke(main, argv)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1 and expected in errors[0], (result.output, result.exception)
    assert not (tmp_path / "out").exists() and not (tmp_path / "m").exists()
    assert not (places["root"] / "PWNED").exists()


def _no_search(*args, **kwargs):
    raise AssertionError("bad input must be refused before any search runs")
