"""A BEIR collection's folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``, and the outputs that
must stay out of its qrels/ (``retriever.corpus`` reads the files themselves)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from shlex import quote

from retriever.errors import RetrieverError
from retriever.file_kinds import compressed_copy
from retriever.output_paths import through_link

BEIR_FILES = ("corpus.jsonl", "queries.jsonl")  # what makes a folder a BEIR collection, besides qrels/


@dataclass(frozen=True)
class BeirDataset:
    """A BEIR folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``."""

    root: Path

    @classmethod
    def open(cls, root: str | Path) -> "BeirDataset":
        root = Path(root)
        if not root.is_dir():
            raise RetrieverError(f"{root}: not a folder; a BEIR dataset is a folder with corpus.jsonl, "
                                 "queries.jsonl and qrels/<split>.tsv")
        for name in BEIR_FILES:
            if not (root / name).is_file():
                raise compressed_copy(root, name) or RetrieverError(f"{root}: missing {name}; not a BEIR folder")
        return cls(root)

    @property
    def corpus_path(self) -> Path:
        return self.root / "corpus.jsonl"

    @property
    def queries_path(self) -> Path:
        return self.root / "queries.jsonl"

    def splits(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "qrels").glob("*.tsv"))

    def qrels_path(self, split: str) -> Path:
        """``qrels/<split>.tsv``; a split is a file name there, so a path (``./test``) cannot alias another."""
        if any(part in split for part in ("/", "\\", "..")):
            raise RetrieverError(f"split {split!r}: a split is the name of a file in qrels/ (like train), not a path")
        path = self.root / "qrels" / f"{split}.tsv"
        if not path.is_file():
            available = ", ".join(self.splits()) or "none"
            raise RetrieverError(f"{self.root}: no qrels for split {split!r} (available: {available})"
                                 f"{self._split_kept_otherwise(split)}")
        return path

    def _split_kept_otherwise(self, split: str) -> str:
        """What to do when the split's qrels are there in another place or form: the hub shares a collection's qrels
        apart (NAME-qrels/test.tsv, put beside corpus.jsonl), and MTEB's copies keep them as qrels/test.jsonl."""
        beside, as_json = self.root / f"{split}.tsv", self.root / "qrels" / f"{split}.jsonl"
        tsv = quote(str(self.root / "qrels" / f"{split}.tsv"))
        if beside.is_file():
            return (f"; its {beside.name} is beside corpus.jsonl, and a BEIR collection keeps it in qrels/: move it "
                    f"there (mkdir -p {quote(f'{self.root}/qrels')} && mv {quote(str(beside))} "
                    f"{quote(f'{self.root}/qrels/')})")
        if as_json.is_file():
            return (f"; its qrels/{split}.jsonl holds the split as JSON judgments, as MTEB's copies keep it, and a "
                    f"split is read from qrels/{split}.tsv: convert it (python3 -c \"import json, sys; "
                    "[print(r['query-id'], r['corpus-id'], r['score'], sep=chr(9)) for r in map(json.loads, "
                    f"open(sys.argv[1]))]\" {quote(str(as_json))} > {tsv}), or score a run with --qrels "
                    f"{quote(str(as_json))}")
        return ""


def check_output_outside_qrels(output: Path, what: str) -> None:
    """Refuse an output in a BEIR collection's qrels/ folder: every .tsv there is read as a split, so
    `-o BEIR/qrels/negs.tsv` gave the collection a bogus split "negs" that no command could read."""
    folder = through_link(output).absolute().parent.resolve()  # as written: through links, by its real folder
    collection = folder.parent
    if folder.name == "qrels" and any((collection / name).is_file() for name in BEIR_FILES):
        raise RetrieverError(f"{output}: {what} would sit in the qrels folder of the collection {collection}, "
                             f"where every .tsv is read as a split; write it elsewhere")
