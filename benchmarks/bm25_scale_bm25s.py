"""Comparison child of benchmarks/bm25_scale.py (--bm25s-own): the BM25 part built by bm25s's own Tokenizer and
BM25.index, as `retriever bm25` built it before retriever/lexical_build.py, from the same doc store.

The files are those `retriever bm25` writes (tests/test_lexical_build.py checks they are byte-identical), so the
two builds differ only in the memory and time they take; this one is sampled by the parent.
"""
from __future__ import annotations

import argparse
import json
import sys
from array import array
from pathlib import Path

import bm25s
from bm25s.tokenization import Tokenized

from retriever.docstore_texts import document_count, document_texts
from retriever.index_folder import read_manifest
from retriever.index_opening import docstore_file
from retriever.lexical import LexicalParams, _tokenizer, unicode_normalised


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("index", type=Path)
    parser.add_argument("target", type=Path, help="folder to write the bm25s files to")
    args = parser.parse_args()
    docstore = docstore_file(args.index, read_manifest(args.index))
    params = LexicalParams()
    tokenizer = _tokenizer(params)
    texts = unicode_normalised(document_texts(docstore))
    token_ids = [array("i", ids) for ids in tokenizer.streaming_tokenize(texts)]
    model = bm25s.BM25(k1=params.k1, b=params.b, method=params.method)
    model.index(Tokenized(ids=token_ids, vocab=tokenizer.get_vocab_dict()), show_progress=False)
    tokens = sum(len(ids) for ids in token_ids)
    del token_ids
    model.save(str(args.target), show_progress=False)
    print(json.dumps({"documents": document_count(docstore), "vocabulary": len(model.vocab_dict), "tokens": tokens}))


if __name__ == "__main__":
    sys.exit(main())
