"""Opening an index folder while a build (`build --overwrite`, `bm25 --overwrite`) swaps a new version in."""
from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest

from fixtures_corpora import TINY_DOCS, write_jsonl
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import IndexDamaged, RetrieverError
from retriever.folders import replace_folder
from retriever.indexing import IndexParams, encode_and_index


def _old_and_new(tiny_beir: Path, tiny_model_dir: Path, tmp_path: Path, kind: str = "flat") -> tuple[Path, Path]:
    """``idx`` (every tiny document) and ``new``, a build of fewer documents waiting to replace it: other file
    sizes and counts, so pairing one's manifest with the other's files is seen as damage."""
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    write_jsonl(fewer / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS[:-3]])
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    for name, corpus in (("idx", tiny_beir), ("new", fewer)):
        encode_and_index(corpus, tmp_path / name, encoder, IndexParams(kind), progress=False)
    return tmp_path / "idx", tmp_path / "new"


def _swap_before(monkeypatch, target: str, versions: list[Path], index_dir: Path, times: int = 1) -> list:
    """Make the ``times`` first calls of ``target`` first swap a copy of the next of ``versions`` in at
    ``index_dir``, as ``build --overwrite`` does (``replace_folder``: the old version is deleted); the swaps, listed."""
    module, name = target.rsplit(".", 1)
    real, swaps = getattr(importlib.import_module(module), name), []

    def swapped_first(*args, **kwargs):
        if len(swaps) < times:
            building = index_dir.parent / f".building-{len(swaps)}"
            shutil.copytree(versions[len(swaps) % len(versions)], building)
            replace_folder(building, index_dir)
            swaps.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(target, swapped_first)
    return swaps


def _documents(index_dir: Path) -> int:
    return json.loads((index_dir / "manifest.json").read_text())["corpus"]["documents"]


def test_serve_checks_a_folder_swapped_during_its_checks_again_not_calling_it_damaged(tiny_beir, tiny_model_dir,
                                                                                      tmp_path, monkeypatch):
    """`serve` checks every folder before loading a model: a swap after it read the manifest and before it measured
    the files made the new index.faiss's size 'damage', and advised rebuilding a healthy index."""
    from retriever.cli.serving import load_searchers

    index_dir, new = _old_and_new(tiny_beir, tiny_model_dir, tmp_path)
    swaps = _swap_before(monkeypatch, "retriever.index_opening.check_folder", [new], index_dir)
    searchers = load_searchers({"docs": index_dir}, device="cpu", dtype="fp32", mode="hybrid")
    assert swaps and len(searchers["docs"].documents) == _documents(index_dir) == len(TINY_DOCS) - 3
    assert searchers["docs"].lexical_problem is None


def test_info_of_a_folder_swapped_while_it_is_read_reads_the_new_one(tiny_beir, tiny_model_dir, tmp_path,
                                                                     monkeypatch):
    from retriever.info import index_summary, verify_index

    index_dir, new = _old_and_new(tiny_beir, tiny_model_dir, tmp_path)
    shutil.copytree(index_dir, tmp_path / "old")
    swaps = _swap_before(monkeypatch, "retriever.index_opening.check_folder", [new], index_dir)
    assert index_summary(index_dir)["documents"] == len(TINY_DOCS) - 3 and swaps
    swaps = _swap_before(monkeypatch, "retriever.info.verify_files", [tmp_path / "old"], index_dir)  # mid-verify
    assert verify_index(index_dir, progress=False) > 0 and swaps
    assert _documents(index_dir) == len(TINY_DOCS)


def test_a_folder_replaced_on_every_open_is_one_line_saying_to_retry(tiny_beir, tiny_model_dir, tmp_path,
                                                                     monkeypatch):
    from retriever.cli.serving import load_searchers

    index_dir, new = _old_and_new(tiny_beir, tiny_model_dir, tmp_path)
    shutil.copytree(index_dir, tmp_path / "old")
    swaps = _swap_before(monkeypatch, "retriever.index_opening.check_folder", [new, tmp_path / "old"], index_dir, 9)
    with pytest.raises(RetrieverError, match=f"^{index_dir}: the index kept being replaced while it was opened; "
                                             "try again once its build has finished$") as raised:
        load_searchers({"docs": index_dir}, device="cpu", dtype="fp32")
    assert not isinstance(raised.value, IndexDamaged) and len(swaps) > 1


@pytest.mark.parametrize("kind", ["flat", "ivf-ondisk"])
def test_a_searcher_open_keeps_searching_its_version_after_a_swap(tiny_beir, tiny_model_dir, tmp_path, kind):
    """`serve` keeps its indexes open: a build replacing a folder (the old version deleted) leaves it searching the
    version it opened, in every mode, until it is restarted."""
    from retriever.searching import Searcher

    index_dir, new = _old_and_new(tiny_beir, tiny_model_dir, tmp_path, kind)
    searcher = Searcher(index_dir, device="cpu", dtype="fp32")
    replace_folder(new, index_dir)
    assert not new.exists() and _documents(index_dir) == len(TINY_DOCS) - 3
    doc_id, title, text = TINY_DOCS[-1]  # in the version opened only
    for mode in ("dense", "bm25", "hybrid"):
        [hits] = searcher.search([f"{title} {text}"], k=len(TINY_DOCS), mode=mode)
        assert hits[0].id == doc_id and hits[0].text == text


def test_serve_checks_a_bm25_part_rebuilt_during_its_checks_again(tiny_beir, tiny_model_dir, tmp_path, monkeypatch):
    """`bm25 --overwrite` writes its new part beside the old, names it in the manifest, then deletes the old: a
    check that read the manifest before found the old part's files gone and called the part damaged."""
    from retriever.cli.serving import load_searchers
    from retriever.lexical import LexicalParams
    from retriever.lexical_opening import check_lexical_files
    from retriever.lexical_part import add_lexical

    index_dir, _ = _old_and_new(tiny_beir, tiny_model_dir, tmp_path)
    rebuilt = []

    def rebuilt_first(folder, manifest):
        if not rebuilt:
            rebuilt.append(add_lexical(folder, LexicalParams(k1=2.0), overwrite=True, progress=False))
        return check_lexical_files(folder, manifest)

    monkeypatch.setattr("retriever.lexical_opening.check_lexical_files", rebuilt_first)
    searchers = load_searchers({"docs": index_dir}, device="cpu", dtype="fp32", mode="hybrid")
    assert rebuilt and searchers["docs"].lexical_problem is None
    assert searchers["docs"].manifest["lexical"]["k1"] == 2.0


def test_an_index_is_opened_without_pyarrow_dataset(tiny_flat_build):
    """``pq.read_table`` went through ``pyarrow.dataset``, whose import was about a third of a second of CPU at the
    start of every search, evaluation, mining run and server, for two files it reads whole."""
    import subprocess
    import sys

    script = ("import sys\nfrom pathlib import Path\nfrom retriever.index_opening import checked_manifest, open_index\n"
              "folder = Path(sys.argv[1])\n_, documents = open_index(folder, checked_manifest(folder))\n"
              "print(len(documents), 'pyarrow.dataset' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script, str(tiny_flat_build)], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["12", "False"], done.stderr[-2000:]
