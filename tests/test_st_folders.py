"""Folders made by sentence-transformers: encoded as sentence-transformers encodes them, or refused by name.

A folder without retriever.json used to be encoded with retriever's defaults (mean pooling, normalised, no
prefix) whatever its modules said: a CLS or un-normalised model, or one with query/document prompts, gave other
vectors than ``SentenceTransformer(folder)`` with exit 0, and a Dense layer or max pooling was skipped.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from fixtures_models import make_tiny_bert, sentence_transformers_modules
from retriever.corpus import Document
from retriever.encoder import Encoder, EncoderSettings
from retriever.errors import RetrieverError

sentence_transformers = pytest.importorskip("sentence_transformers")  # in the `test` extra
pytestmark = pytest.mark.usefixtures("one_torch_thread")

TEXTS = ["where does honey come from", "a cat", "hot lava rock and fire by the old river city " * 12]
PROMPTS = {"query": "query: ", "document": "passage: "}


def saved_by_sentence_transformers(tmp_path, tiny_model_dir, pooling: str, normalize: bool, prompts: dict):
    """A folder as sentence-transformers itself saves one (its current Pooling config format)."""
    models = sentence_transformers_modules()
    modules = [models.Transformer(str(tiny_model_dir), max_seq_length=24), models.Pooling(32, pooling_mode=pooling)]
    model = sentence_transformers.SentenceTransformer(modules=modules + ([models.Normalize()] if normalize else []),
                                                      prompts=prompts, device="cpu")
    model.save(str(tmp_path / "st"))
    return tmp_path / "st"


def hand_written(tmp_path, pooling_config: dict, kinds=("Transformer", "Pooling"), prompts: dict | None = None):
    """A folder in the legacy format older sentence-transformers wrote (``pooling_mode_*`` flags)."""
    folder = make_tiny_bert(tmp_path / "st")
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Dense": "2_Dense", "Normalize": "3_Normalize"}
    (folder / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": paths[kind], "type": f"sentence_transformers.models.{kind}"}
        for i, kind in enumerate(kinds)]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32, **pooling_config}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    if prompts is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts}))
    return folder


def assert_same_vectors(folder, texts: list[str] = TEXTS) -> None:
    ours = Encoder(EncoderSettings.for_model(str(folder)), device="cpu", dtype="fp32")
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    assert ours.settings.passage_max_length == theirs.max_seq_length
    np.testing.assert_allclose(ours.encode_queries(texts), theirs.encode_query(texts), atol=1e-5)
    np.testing.assert_allclose(ours.encode_passages([Document(str(i), t) for i, t in enumerate(texts)]),
                               theirs.encode_document(texts), atol=1e-5)


@pytest.mark.parametrize("pooling, normalize", [("cls", True), ("cls", False), ("mean", False), ("mean", True)])
def test_a_folder_sentence_transformers_saved_gives_its_vectors(tmp_path, tiny_model_dir, pooling, normalize):
    assert_same_vectors(saved_by_sentence_transformers(tmp_path, tiny_model_dir, pooling, normalize, PROMPTS))


@pytest.mark.parametrize("pooling_config, kinds", [
    ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, ("Transformer", "Pooling", "Normalize")),
    ({"pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False}, ("Transformer", "Pooling")),  # mean
])
def test_a_legacy_folder_gives_its_vectors(tmp_path, pooling_config, kinds):
    assert_same_vectors(hand_written(tmp_path, pooling_config, kinds, prompts={"query": "q: "}))


@pytest.mark.parametrize("prompts", [{"query": None, "document": None, "passage": "p: "},
                                     {"document": "", "passage": "p: ", "query": "q: "}])
def test_a_named_prompt_that_is_null_or_empty_means_no_prompt(tmp_path, prompts):
    """sentence-transformers takes the first of document/passage/corpus that is a key, even with a null value;
    we skipped a null one and prepended the passage prompt."""
    assert_same_vectors(hand_written(tmp_path, {"pooling_mode": "mean"}, prompts=prompts))


def test_flags_still_override_what_the_folder_says(tmp_path, tiny_model_dir):
    folder = saved_by_sentence_transformers(tmp_path, tiny_model_dir, "cls", True, PROMPTS)
    settings = EncoderSettings.for_model(str(folder), pooling="mean", normalize=False, query_prefix="")
    assert (settings.pooling, settings.normalize, settings.query_prefix, settings.passage_prefix) == \
        ("mean", False, "", "passage: ")


@pytest.mark.parametrize("pooling_config, kinds, prompts, message", [
    ({"pooling_mode": "max"}, ("Transformer", "Pooling"), None, "pooling max is not one retriever has"),
    ({"pooling_mode_lasttoken": True}, ("Transformer", "Pooling"), None, "pooling lasttoken is not"),
    ({"pooling_mode_weightedmean_tokens": True}, ("Transformer", "Pooling"), None, "pooling weightedmean is not"),
    ({"pooling_mode": ["cls", "mean"]}, ("Transformer", "Pooling"), None, "pooling cls [+] mean is not"),
    ({"pooling_mode": "mean"}, ("Transformer", "Pooling", "Dense", "Normalize"), None,
     "modules are Transformer → Pooling → Dense → Normalize"),
    ({"pooling_mode": "mean", "include_prompt": False}, ("Transformer", "Pooling"), PROMPTS, "include_prompt false"),
])
def test_modules_retriever_does_not_apply_are_refused(tmp_path, pooling_config, kinds, prompts, message):
    folder = hand_written(tmp_path, pooling_config, kinds, prompts)
    with pytest.raises(RetrieverError, match=message):
        EncoderSettings.for_model(str(folder))


@pytest.mark.parametrize("damage, message", [
    (lambda folder: (folder / "1_Pooling" / "config.json").unlink(), "1_Pooling/config.json: file not found"),
    (lambda folder: (folder / "modules.json").write_text('{"a": 1}'), "modules.json: not a list of module records"),
    (lambda folder: (folder / "modules.json").write_text("[{"), "modules.json:1: malformed JSON"),
    (lambda folder: (folder / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "", "type": "sentence_transformers.models.Pooling"}])), "its Pooling module names no folder"),
    (lambda folder: (folder / "config_sentence_transformers.json").write_text('{"prompts": ["q"]}'),
     "prompts are not an object of strings"),
])
def test_damaged_sentence_transformers_files_are_one_line(tmp_path, damage, message):
    folder = hand_written(tmp_path, {"pooling_mode": "cls"})
    damage(folder)
    with pytest.raises(RetrieverError, match=message):
        EncoderSettings.for_model(str(folder))


def test_the_old_layout_with_the_transformer_in_a_subfolder_says_how_to_convert(tmp_path):
    folder = hand_written(tmp_path, {"pooling_mode": "cls"})
    (folder / "0_Transformer").mkdir()
    for path in list(folder.iterdir()):
        if path.is_file() and path.name not in ("modules.json", "config_sentence_transformers.json"):
            shutil.move(str(path), str(folder / "0_Transformer" / path.name))
    with pytest.raises(RetrieverError, match=r"old layout.*SentenceTransformer\(OLD\)\.save\(NEW\)"):
        EncoderSettings.for_model(str(folder))


def test_lowercasing_a_cased_tokenizer_does_not_do_is_refused(tmp_path):
    from transformers import BertTokenizerFast

    folder = hand_written(tmp_path, {"pooling_mode": "mean"})
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    for path in folder.glob("tokenizer*"):
        path.unlink()
    BertTokenizerFast(vocab=vocab, do_lower_case=False).save_pretrained(folder)
    Encoder(EncoderSettings.for_model(str(folder)), device="cpu")  # do_lower_case false: texts as they are
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 20, "do_lower_case": True}))
    with pytest.raises(RetrieverError, match="lowercases texts .* but its tokenizer keeps case"):
        Encoder(EncoderSettings.for_model(str(folder)), device="cpu")


def test_a_hub_id_is_read_from_its_snapshot_like_a_folder(tmp_path, hub_snapshot):
    """A hub id's settings files were never read (only a local folder's were): `--model ORG/NAME` of a CLS model
    with max_seq_length 20 encoded with mean pooling at 512 tokens. Here the hub is a cache, offline."""
    hub_snapshot(hand_written(tmp_path, {"pooling_mode": "cls"}, ("Transformer", "Pooling", "Normalize"), PROMPTS),
                 "some-org/st-model")
    settings = EncoderSettings.for_model("some-org/st-model")
    assert (settings.pooling, settings.normalize, settings.passage_max_length, settings.query_prefix) == \
        ("cls", True, 20, "query: ")


def test_a_folders_max_seq_length_past_the_positions_names_the_file(tmp_path):
    """The length came from the folder, not a flag: the error named only --passage-max-length, untyped."""
    folder = hand_written(tmp_path, {"pooling_mode": "mean"})
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 1024}))
    with pytest.raises(RetrieverError, match=r"sentence_bert_config.json: max_seq_length 1024 is more than the 512 "
                                             r"positions the model can take; set it to at most 512 there, or pass "
                                             r"--passage-max-length 512$"):
        Encoder(EncoderSettings.for_model(str(folder)))
    assert Encoder(EncoderSettings.for_model(str(folder), passage_max_length=512)).settings.query_max_length == 512


def test_a_truncate_dim_is_refused_not_encoded_at_full_width(tmp_path, tiny_model_dir):
    """sentence-transformers keeps the first truncate_dim dimensions of a folder that records one (Matryoshka);
    retriever encoded all 32, exit 0."""
    from sentence_transformers import models
    modules = [models.Transformer(str(tiny_model_dir), max_seq_length=24), models.Pooling(32, pooling_mode="cls")]
    sentence_transformers.SentenceTransformer(modules=modules, device="cpu", truncate_dim=16).save(str(tmp_path / "st"))
    assert sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(TEXTS).shape == (3, 16)
    with pytest.raises(RetrieverError, match=r"config_sentence_transformers.json: truncate_dim 16: sentence-transformers keeps only the first dimensions"):
        EncoderSettings.for_model(str(tmp_path / "st"))


@pytest.mark.parametrize("prompts, default, flags", [
    ({"query": "q: ", "passage": "p: "}, None, ["passage_prefix"]),  # 5 takes 'passage' for documents, 6 'document'
    ({"query": "q: ", "corpus": "c: "}, None, ["passage_prefix"]),
    ({"query": "q: "}, "query", ["passage_prefix"]),  # 5 falls back to the default prompt for documents, 6 does not
    ({"classification": "c: "}, "classification", ["query_prefix", "passage_prefix"]),
])
def test_prompts_sentence_transformers_versions_apply_otherwise_need_a_flag(tmp_path, prompts, default, flags):
    """sentence-transformers 6 always has 'query' and 'document' prompts (empty unless saved), so it never reaches
    the 'passage'/'corpus' prompts or the default prompt that 5 applies: retriever followed 5, and its vectors
    differed from the installed sentence-transformers' with exit 0."""
    folder = hand_written(tmp_path, {"pooling_mode": "mean"}, prompts=prompts)
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**config, "default_prompt_name": default}))
    with pytest.raises(RetrieverError, match=rf"sentence-transformers 5 .* 6 .* pass --{flags[0].replace('_', '-')}"):
        EncoderSettings.for_model(str(folder))
    settings = EncoderSettings.for_model(str(folder), **dict.fromkeys(flags, ""))  # flags settle it: here as 6 does
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    ours = Encoder(settings, device="cpu", dtype="fp32")
    np.testing.assert_allclose(ours.encode_queries(TEXTS), theirs.encode_query(TEXTS), atol=1e-5)
    np.testing.assert_allclose(ours.encode_passages([Document(str(i), t) for i, t in enumerate(TEXTS)]),
                               theirs.encode_document(TEXTS), atol=1e-5)


def test_a_module_of_code_outside_sentence_transformers_is_refused(tmp_path):
    """A module of the model's own code (`custom_st.Transformer`, which sentence-transformers runs only with
    trust_remote_code) was taken for sentence-transformers' own by its class name, and encoded as a plain one."""
    folder = hand_written(tmp_path, {"pooling_mode": "mean"})
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["type"] = "custom_st.Transformer"
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(RetrieverError, match=r"module 0 is custom_st.Transformer, code of the model's own"):
        EncoderSettings.for_model(str(folder))


def test_flags_that_drop_the_prompts_of_a_model_pooling_without_them_are_taken(tmp_path):
    """With include_prompt false and prompts in the folder, --query-prefix '' --passage-prefix '' (no prompt, so
    every token is pooled, as sentence-transformers pools a text given no prompt) was still refused."""
    folder = hand_written(tmp_path, {"pooling_mode": "mean", "include_prompt": False}, prompts=PROMPTS)
    settings = EncoderSettings.for_model(str(folder), query_prefix="", passage_prefix="")
    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu")
    np.testing.assert_allclose(Encoder(settings, device="cpu", dtype="fp32").encode_queries(TEXTS),
                               theirs.encode(TEXTS, prompt=""), atol=1e-5)
    with pytest.raises(RetrieverError, match="include_prompt false"):  # a prefix of a flag is pooled all the same
        EncoderSettings.for_model(str(folder), query_prefix="", passage_prefix="p: ")


def test_a_cross_encoder_is_refused_as_a_reranker_not_an_embedding_model(tmp_path, tiny_model_dir):
    """It was refused for its modules, with advice to encode it with sentence-transformers, which cannot either."""
    sentence_transformers.CrossEncoder(str(tiny_model_dir), num_labels=1, device="cpu").save(str(tmp_path / "ce"))
    with pytest.raises(RetrieverError, match=r"is a sentence-transformers CrossEncoder: a reranker \(cross-encoder\) "
                                             r"that scores query-passage pairs, not an embedding model, so it cannot "
                                             r"encode passages for an index; use an embedding model"):
        EncoderSettings.for_model(str(tmp_path / "ce"))


def old_cross_encoder(tmp_path, tiny_model_dir, config_entry: dict):
    """A CrossEncoder folder as sentence-transformers < 5 saved it: a BertForSequenceClassification, no
    modules.json, the activation in config.json."""
    from transformers import BertForSequenceClassification
    folder = tmp_path / "old-ce"
    BertForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_model_dir / name).is_file():
            shutil.copy(tiny_model_dir / name, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **config_entry}))
    return folder


@pytest.mark.parametrize("entry", [{"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"},
                                   {"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.Sigmoid"}}])
def test_an_old_cross_encoder_is_refused_as_a_reranker(tmp_path, tiny_model_dir, entry):
    """Without modules.json it loaded as a plain BERT and was mean-pooled, without a word."""
    folder = old_cross_encoder(tmp_path, tiny_model_dir, entry)
    with pytest.raises(RetrieverError, match=r"is a sentence-transformers CrossEncoder: a reranker \(cross-encoder\)"):
        EncoderSettings.for_model(str(folder))


def test_training_from_a_cross_encoder_says_its_head_is_dropped(tmp_path, tiny_model_dir, capsys):
    """Starting a bi-encoder from a reranker's weights is allowed (unusual, not wrong): one line on stderr."""
    from retriever.training.dual_encoder import DualEncoder
    folder = old_cross_encoder(tmp_path, tiny_model_dir, {"sbert_ce_default_activation_function": "x.Identity"})
    DualEncoder.from_pretrained(str(folder), query_max_length=16, passage_max_length=16)
    sentence_transformers.CrossEncoder(str(tiny_model_dir), num_labels=1, device="cpu").save(str(tmp_path / "ce"))
    DualEncoder.from_pretrained(str(tmp_path / "ce"), query_max_length=16, passage_max_length=16)
    lines = [line for line in capsys.readouterr().err.splitlines() if "CrossEncoder" in line]
    assert len(lines) == 2 and all("head is dropped" in line and "reranker" in line for line in lines), lines


@pytest.mark.parametrize("st_config, kinds", [
    ({"model_type": "SparseEncoder"}, ["Transformer", "Pooling"]),
    ({}, ["sparse_encoder.models.MLMTransformer", "sparse_encoder.models.SpladePooling"])])
def test_a_sparse_encoder_is_refused_as_sparse(tmp_path, tiny_model_dir, st_config, kinds):
    """It was refused for its modules, as if another pooling could make its vectors dense."""
    folder = tmp_path / "splade"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": "" if i == 0 else f"{i}_M", "type": f"sentence_transformers.{kind}"}
        for i, kind in enumerate(kinds)]))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(st_config))
    with pytest.raises(RetrieverError, match=r"is a sentence-transformers SparseEncoder \(SPLADE-style\): its "
                                             r"vectors are vocabulary-sized term weights"):
        EncoderSettings.for_model(str(folder))


def test_a_multi_vector_encoder_is_refused_as_multi_vector(tmp_path, tiny_model_dir):
    """It was refused for its modules (Transformer → Dense → MultiVectorMask → Normalize), with advice to encode it
    with sentence-transformers, whose vectors (one per token) this engine cannot index either."""
    sentence_transformers.MultiVectorEncoder(str(tiny_model_dir), device="cpu").save(str(tmp_path / "colbert"))
    with pytest.raises(RetrieverError, match=r"is a sentence-transformers MultiVectorEncoder \(ColBERT-style\): one "
                                             r"vector per token"):
        EncoderSettings.for_model(str(tmp_path / "colbert"))


@pytest.mark.parametrize("similarity, normalize", [("euclidean", False), ("manhattan", False), ("manhattan", True)])
def test_a_distance_similarity_retriever_cannot_rank_by_is_refused(tmp_path, tiny_model_dir, similarity, normalize):
    folder = saved_by_sentence_transformers(tmp_path, tiny_model_dir, "mean", normalize, {})
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**config, "similarity_fn_name": similarity}))
    assert sentence_transformers.SentenceTransformer(str(folder), device="cpu").similarity_fn_name == similarity
    with pytest.raises(RetrieverError, match=rf"config_sentence_transformers.json: similarity_fn_name '{similarity}'"):
        EncoderSettings.for_model(str(folder))


@pytest.mark.parametrize("similarity, normalize", [("euclidean", True), ("dot", False), ("cosine", True)])
def test_a_similarity_inner_product_ranks_alike_is_taken(tmp_path, tiny_model_dir, similarity, normalize):
    folder = saved_by_sentence_transformers(tmp_path, tiny_model_dir, "mean", normalize, {})
    config = json.loads((folder / "config_sentence_transformers.json").read_text())
    (folder / "config_sentence_transformers.json").write_text(json.dumps({**config, "similarity_fn_name": similarity}))
    assert EncoderSettings.for_model(str(folder)).normalize is normalize


@pytest.mark.parametrize("config, message", [({"module_input_name": "token_embeddings"}, "normalises token_embeddings"),
                                             ({"module_output_name": "other"}, "into other")])
def test_a_normalize_that_leaves_the_sentence_embedding_as_it_is_is_refused(tmp_path, config, message):
    """sentence-transformers' Normalize may read or write another feature than the sentence embedding: its vectors
    stay unnormalised, and retriever normalised them (up to 1.38 max abs difference, exit 0)."""
    folder = hand_written(tmp_path, {"pooling_mode": "mean"}, ("Transformer", "Pooling", "Normalize"))
    (folder / "3_Normalize").mkdir()
    (folder / "3_Normalize" / "config.json").write_text(json.dumps(config))
    with pytest.raises(RetrieverError, match=f"3_Normalize/config.json: .*{message}"):
        EncoderSettings.for_model(str(folder))
