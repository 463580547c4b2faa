from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from retriever.encoder import Encoder, EncoderSettings
from retriever.indexing import MANIFEST_FILE, IndexParams, encode_and_index
from retriever.lexical import LexicalParams
from retriever.lexical_part import add_lexical
from retriever.searching import Searcher


@pytest.fixture()
def index(tiny_beir, tiny_model_dir, tmp_path):
    encoder = Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu", dtype="fp32")
    encode_and_index(tiny_beir, tmp_path / "idx", encoder, IndexParams("flat"), progress=False)
    return tmp_path / "idx"


def bm25_hits(index) -> list[tuple[str, float]]:
    return [(hit.id, round(hit.score, 5)) for hit in Searcher(index, device="cpu").search(["honey bee flower"], k=5,
                                                                                         mode="bm25")[0]]


@pytest.mark.parametrize("killed_at", ["before the manifest", "after the manifest"])
def test_a_kill_during_bm25_overwrite_leaves_one_matching_pair(index, killed_at):
    """`bm25/` was replaced in place and the manifest written after: a kill in between left the new files under
    the old record (same sizes when only k1 changes), searched silently with the old settings."""
    before = bm25_hits(index)
    patched = "replace_manifest" if killed_at == "before the manifest" else "shutil.rmtree"
    code = textwrap.dedent(f"""
        import os, shutil, sys
        import retriever.index_folder as folder, retriever.lexical_part as part
        from retriever.lexical import LexicalParams
        if {patched!r} == "replace_manifest":
            folder.replace_manifest = lambda *args, **kwargs: os._exit(9)
        else:
            part.shutil = type("S", (), {{"rmtree": staticmethod(lambda *args, **kwargs: os._exit(9))}})
        part.add_lexical(sys.argv[1], LexicalParams(k1=3.0, b=0.9), overwrite=True, progress=False)
    """)
    assert subprocess.run([sys.executable, "-c", code, str(index)]).returncode == 9
    k1 = json.loads((index / MANIFEST_FILE).read_text())["lexical"]["k1"]
    assert k1 == (0.9 if killed_at == "before the manifest" else 3.0)
    after = bm25_hits(index)
    assert (after == before) == (killed_at == "before the manifest")
    record = add_lexical(index, LexicalParams(k1=3.0, b=0.9), overwrite=True, progress=False)  # the rerun tidies up
    parts = sorted(path.name for path in index.iterdir() if path.name.startswith(("bm25", ".bm25")))
    assert parts == [record["directory"]] and bm25_hits(index) != before
