"""Corpora for tests: the 12-document tiny corpus, its BEIR folder (tiny_beir) and variations of it, JSON Lines files,
and the benchmark datasets beside the repo."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

SHARED_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

TINY_DOCS = [
    ("d1", "Cats", "the cat sat on the old mat by the fire"),
    ("d2", "Dogs", "a dog ran to the river with a ball"),
    ("d3", "Coffee", "coffee and tea are hot drinks from a plant leaf"),
    ("d4", "Volcano", "lava from the volcano is hot rock"),
    ("d5", "Glacier", "a glacier is a river of ice and snow"),
    ("d6", "Bees", "the bee makes honey from a flower"),
    ("d7", "Space", "a rocket flew to the moon and a planet"),
    ("d8", "Whales", "the whale and the octopus live in the ocean"),
    ("d9", "Trains", "the train crossed a bridge near the city"),
    ("d10", "Heart", "the heart moves blood to the brain"),
    ("d11", "Solar", "solar power turns sun light into energy"),
    ("d12", "Storms", "wind rain and cloud make a storm"),
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def tiny_beir(tmp_path) -> Path:
    """A BEIR folder of 12 documents and 4 judged queries."""
    return write_tiny_beir(tmp_path / "tiny-beir")


def write_tiny_beir(root: Path) -> Path:
    """tiny_beir's folder at ``root``, for a fixture shared by a module's tests."""
    (root / "qrels").mkdir(parents=True)
    write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(root / "queries.jsonl", [
        {"_id": "q1", "text": "where does honey come from", "metadata": {"answers": ["flower"]}},
        {"_id": "q2", "text": "hot lava rock", "metadata": {"answers": ["volcano"]}},
        {"_id": "q3", "text": "what does the heart do", "metadata": {"answers": ["blood"]}},
        {"_id": "q4", "text": "ice and snow", "metadata": {"answers": ["glacier"]}},
    ])
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td6\t1\nq2\td4\t1\nq3\td10\t1\nq4\td5\t1\n", encoding="utf-8")
    return root


def split_off_train(beir: Path) -> None:
    """Judge q1 and q2 in train and only q3 and q4 in test: a tuning split must not share test queries."""
    header = "query-id\tcorpus-id\tscore\n"
    (beir / "qrels" / "train.tsv").write_text(header + "q1\td6\t1\nq2\td4\t1\n", encoding="utf-8")
    (beir / "qrels" / "test.tsv").write_text(header + "q3\td10\t1\nq4\td5\t1\n", encoding="utf-8")


def with_another_corpus(dataset: Path, folder: Path) -> Path:
    """A copy of a BEIR folder whose corpus holds one passage more: judgments an index of ``dataset`` holds the ids
    of, but of another collection."""
    shutil.copytree(dataset, folder)
    with open(folder / "corpus.jsonl", "a", encoding="utf-8") as corpus:
        corpus.write('{"_id": "d13", "title": "", "text": "more"}\n')
    return folder


def shared_dataset(name: str) -> Path:
    """A dataset under ../shared/datasets, or skip the test saying why."""
    path = SHARED_DATASETS / name
    if not (path / "corpus.jsonl").is_file():
        pytest.skip(f"{path} is absent (benchmark data lives in ../shared/datasets beside the repo)")
    return path
