"""The tiny random BERT every model test loads in seconds, its vocabulary, and the model folders around it: a local hub
cache, sentence-transformers' module classes, one torch thread."""
from __future__ import annotations

import shutil
import string
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

WORDS = ("the a of and to in is was on for with by as at from that it this are be or an which have has "
         "cat dog bird fish tree river mountain city music game ball team coffee tea bread water fire "
         "sun moon star planet space rocket train car road bridge book paper ink press bee honey flower "
         "volcano lava ice glacier snow ocean tide wave whale octopus heart blood brain cell plant leaf "
         "light energy solar power wind rain cloud storm earth quake rock stone king queen castle war "
         "what where when how why who does do can many much large small hot cold old new first last").split()


def build_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = list(string.ascii_lowercase) + list(string.digits) + list(string.punctuation)
    continuations = ["##" + c for c in string.ascii_lowercase + string.digits]
    return specials + sorted(set(WORDS) - set(pieces)) + pieces + continuations


def make_tiny_bert(folder: Path, layers: int = 4, seed: int = 0, with_pooler: bool = True) -> Path:
    """Save a random BERT with a WordPiece tokenizer that covers any ASCII text."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = build_vocab()
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config, add_pooling_layer=with_pooler).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def texts_of_many_lengths(count: int) -> list[str]:
    """Texts of 1 to 13 words, so batches of them mix token counts."""
    words = ("cat dog river ball city tea honey bee flower lava rock moon planet whale ocean train bridge heart blood "
             "brain solar power sun light energy wind rain cloud storm").split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(1 + i % 13)) for i in range(count)]


def sentence_transformers_modules():
    """sentence-transformers' module classes (Transformer, Pooling, Router, ...): 6.x moved them and warns on the old
    path, which 5.x (the test extra's floor) alone has."""
    try:
        from sentence_transformers.sentence_transformer import modules
    except ImportError:
        from sentence_transformers import models as modules
    return modules


@pytest.fixture
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a shared CPU two spinning threads run 5-20x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture()
def hub_snapshot(tmp_path, monkeypatch):
    """Places a folder in a local hub cache as ORG/NAME's snapshot: how a hub id is read here, offline."""
    from huggingface_hub import constants

    from retriever.model_names import hub_json_files

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    hub_json_files.cache_clear()

    def place(folder: Path, hub_id: str) -> None:
        repo = tmp_path / "cache" / ("models--" + hub_id.replace("/", "--"))
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        shutil.copytree(folder, repo / "snapshots" / ("0" * 40))

    yield place
    hub_json_files.cache_clear()
