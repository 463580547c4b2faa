"""Item 7 of issue #10: a damaged index folder is one clear error naming the file and the fix."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from retriever.cli import main
from retriever.encoder import Encoder, EncoderSettings
from retriever.encoder_settings import OVERRIDABLE
from retriever.indexing import encode_and_index


@pytest.fixture(scope="module")
def built(tmp_path_factory, tiny_model_dir) -> Path:
    from fixtures_corpora import TINY_DOCS, write_jsonl

    root = tmp_path_factory.mktemp("damage")
    corpus = write_jsonl(root / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(corpus, root / "idx", encoder, progress=False)
    return root / "idx"


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def _write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _drop_key(section: str):
    def damage(folder: Path) -> None:
        manifest = _manifest(folder)
        del manifest[section]
        _write_manifest(folder, manifest)
    return damage


def _rewrite_recorded(folder: Path, name: str) -> None:
    """Make the manifest agree with a replaced file's size and hash, as if the damage had been recorded."""
    manifest = _manifest(folder)
    path = folder / name
    manifest["integrity"]["files"][name] = {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    _write_manifest(folder, manifest)


def _reverse_ids(folder: Path) -> None:
    table = pq.read_table(folder / "ids.parquet")
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), folder / "ids.parquet")
    _rewrite_recorded(folder, "ids.parquet")


def _fewer_documents(folder: Path, rows: int = 5) -> None:
    table = pq.read_table(folder / "docstore.parquet")
    pq.write_table(table.slice(0, rows), folder / "docstore.parquet")
    _rewrite_recorded(folder, "docstore.parquet")


def _count_off_by_one(folder: Path) -> None:
    manifest = _manifest(folder)
    manifest["index"]["count"] += 1
    _write_manifest(folder, manifest)


def _garbage_same_size(name: str):
    def damage(folder: Path) -> None:
        path = folder / name
        path.write_bytes(b"\x00" * path.stat().st_size)
    return damage


def _flip_one_byte(folder: Path) -> None:
    path = folder / "docstore.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _flip_bm25_byte(folder: Path) -> None:
    path = folder / "bm25" / "data.csc.index.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _bm25_for_other_documents(folder: Path, rows: int = 5) -> None:
    """A BM25 part whose files match their records but that indexes fewer documents than the dense part."""
    from retriever.lexical import build_lexical

    table = pq.read_table(folder / "docstore.parquet").slice(0, rows)
    pq.write_table(table, folder / "five.parquet")
    shutil.rmtree(folder / "bm25")
    manifest = _manifest(folder)
    manifest["lexical"] = build_lexical(folder / "five.parquet", folder / "bm25", progress=False)
    del manifest["lexical"]["docstore"]  # recorded before that field: only the count tells (five.parquet told first)
    _write_manifest(folder, manifest)


# (case, damage, command ("search" opens the folder for dense search, "bm25"/"hybrid" for those modes; "verify" is
# `info --verify`), expected in the error line)
DAMAGE = [
    ("index-truncated", lambda f: _truncate(f / "index.faiss"), "search", "index.faiss: "),
    ("index-missing", lambda f: (f / "index.faiss").unlink(), "search", "index.faiss: missing"),
    ("ids-missing", lambda f: (f / "ids.parquet").unlink(), "search", "ids.parquet: missing"),
    ("ids-truncated", lambda f: _truncate(f / "ids.parquet"), "search", "ids.parquet: "),
    ("docstore-missing", lambda f: (f / "docstore.parquet").unlink(), "search", "docstore.parquet: missing"),
    ("docstore-truncated", lambda f: _truncate(f / "docstore.parquet"), "search", "docstore.parquet: "),
    ("manifest-without-encoder", _drop_key("encoder"), "search", "manifest.json: the manifest lacks encoder.model"),
    ("manifest-without-index", _drop_key("index"), "search", "manifest.json: the manifest lacks index.count"),
    ("manifest-truncated", lambda f: _truncate(f / "manifest.json"), "search", "manifest.json:"),
    ("manifest-not-object", lambda f: (f / "manifest.json").write_text("[]"), "search", "not a JSON object"),
    ("ids-reversed", _reverse_ids, "search", "ids.parquet: its rows differ from the ones the index was built"),
    ("docstore-fewer-rows", _fewer_documents, "search", "docstore.parquet: holds 5 entries where the manifest"),
    ("docstore-one-row", lambda f: _fewer_documents(f, 1), "search",  # it said "holds 1 entries"
     "docstore.parquet: holds 1 entry where the manifest records 12"),
    ("counts-disagree", _count_off_by_one, "search", "index.faiss: holds 12 entries where the manifest records 13"),
    ("index-garbage-same-size", _garbage_same_size("index.faiss"), "search", "index.faiss: cannot be read"),
    ("ids-garbage-same-size", _garbage_same_size("ids.parquet"), "search", "ids.parquet: cannot be read"),
    ("docstore-one-byte-flipped", _flip_one_byte, "verify", "docstore.parquet: its SHA-256 differs"),
    ("ids-reversed-verify", _reverse_ids, "verify", "ids.parquet: its rows differ"),
    ("bm25-truncated", lambda f: _truncate(f / "bm25" / "indices.csc.index.npy"), "hybrid",
     "bm25/indices.csc.index.npy: "),
    ("bm25-missing", lambda f: (f / "bm25" / "vocab.index.json").unlink(), "hybrid", "bm25/vocab.index.json: missing"),
    ("bm25-garbage-same-size", _garbage_same_size("bm25/indptr.csc.index.npy"), "bm25", "bm25: cannot be read"),
    ("bm25-one-byte-flipped", _flip_bm25_byte, "verify", "bm25/data.csc.index.npy: its SHA-256 differs"),
    ("bm25-other-documents", _bm25_for_other_documents, "hybrid", "idx/bm25: holds 5 documents where the manifest"),
    ("bm25-one-document", lambda f: _bm25_for_other_documents(f, 1), "hybrid",  # it said "holds 1 documents"
     "idx/bm25: holds 1 document where the manifest records 12"),
]


@pytest.mark.parametrize("case, damage, command, expected", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_folder_is_one_clear_error(built, tmp_path, case, damage, command, expected):
    folder = tmp_path / "idx"
    shutil.copytree(built, folder)
    damage(folder)
    argv = (["info", str(folder), "--verify"] if command == "verify"
            else ["search", str(folder), "cat", "--device", "cpu", "--dtype", "fp32", "--mode",
                  "dense" if command == "search" else command])
    result = CliRunner().invoke(main, argv)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1, (result.output, result.exception)
    assert expected in errors[0] and str(folder) in errors[0], errors[0]
    if "manifest.json:" not in expected or case == "manifest-truncated":
        assert "rebuild" in errors[0]
    if case.startswith("bm25-"):
        assert f"retriever bm25 {folder} --overwrite" in errors[0]


@pytest.mark.parametrize("case, damage", [(case, damage) for case, damage, command, _ in DAMAGE
                                          if case.startswith("bm25-") and command != "verify"])
def test_dense_search_works_on_a_folder_whose_bm25_part_is_damaged(built, tmp_path, case, damage):
    """Searcher opened the BM25 part in every mode, so damage there refused dense search too."""
    folder = tmp_path / "idx"
    shutil.copytree(built, folder)
    damage(folder)
    result = CliRunner().invoke(main, ["search", str(folder), "cat", "--device", "cpu", "--dtype", "fp32", "--json"])
    assert result.exit_code == 0 and len(json.loads(result.stdout)["hits"]) == 10, result.output


def test_info_summarises_and_verifies_an_intact_folder(built):
    result = CliRunner().invoke(main, ["info", str(built), "--verify"])
    assert result.exit_code == 0, result.output
    assert "12 vectors, 12 passages" in result.output and "flat (Flat)" in result.output
    assert "verified: 9 files match their SHA-256; counts agree" in result.output  # 3 dense + 6 in bm25/
    summary = json.loads(CliRunner().invoke(main, ["info", str(built), "--json"]).output)
    assert summary["vectors"] == 12 and summary["bytes_on_disk"] > 0 and summary["encoder"]["dim"] == 32
    assert set(OVERRIDABLE) <= set(summary["encoder"])  # every encoder setting, a new one too


@pytest.mark.parametrize("case, damage", [(case, damage) for case, damage, command, _ in DAMAGE
                                          if case in ("bm25-truncated", "bm25-missing")])
def test_info_summarises_a_folder_whose_bm25_part_is_damaged_and_says_how_to_rebuild_it(built, tmp_path, case,
                                                                                        damage):
    """Dense search of the folder works, so its summary is printed (it was an error); --verify still fails."""
    folder = tmp_path / "idx"
    shutil.copytree(built, folder)
    damage(folder)
    result = CliRunner().invoke(main, ["info", str(folder)])
    assert result.exit_code == 0, result.output
    bm25 = [line for line in result.stdout.splitlines() if line.startswith("bm25:")]
    assert "12 vectors, 12 passages" in result.stdout and len(bm25) == 2, result.stdout
    assert bm25[1].startswith("bm25:     DAMAGED (--mode bm25/hybrid cannot run): ") and str(folder) in bm25[1]
    assert bm25[1].endswith(f"rebuild it with `retriever bm25 {folder} --overwrite` (no re-encoding)")
    summary = json.loads(CliRunner().invoke(main, ["info", str(folder), "--json"]).stdout)
    assert bm25[1].endswith(f"cannot run): {summary['bm25']['damage']}")
    verified = CliRunner().invoke(main, ["info", str(folder), "--verify"])
    assert verified.exit_code == 1 and f"retriever bm25 {folder} --overwrite" in verified.stderr
