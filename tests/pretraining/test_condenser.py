"""The Condenser model: head wiring, both MLM losses, warm starts and the on-disk layout."""
from __future__ import annotations

import json
import random
import re

import pytest
import torch
from transformers import AutoModel, BertForMaskedLM

from retriever.errors import RetrieverError
from retriever.model_loading import load_tokenizer
from retriever.pretraining.condenser import (HEAD_WEIGHTS, CondenserForPretraining, load_condenser,
                                             span_contrastive_loss)
from retriever.pretraining.masking import WholeWordMasker, pad_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def make_batch(model_dir, texts=("the cat sat on the old mat by the fire", "a glacier is a river of ice",
                                 "the bee makes honey from a flower", "lava from the volcano is hot rock")):
    tokenizer = load_tokenizer(str(model_dir))
    masker, rng = WholeWordMasker(tokenizer, 0.3), random.Random(0)
    return pad_batch([[masker.mask(tokenizer(text)["input_ids"], rng)] for text in texts], tokenizer.pad_token_id)


def test_head_input_is_last_cls_then_skip_layer_tokens(tiny_model_dir):
    model, _ = load_condenser(str(tiny_model_dir), skip_from=1)
    model.eval()
    batch = make_batch(tiny_model_dir)
    seen = []
    model.c_head[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    with torch.no_grad():
        model(**batch)
        hidden = model.lm.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               output_hidden_states=True).hidden_states
    expected = torch.cat([hidden[-1][:, :1], hidden[1][:, 1:]], dim=1)
    assert len(hidden) == 5 and len(seen) == 1
    torch.testing.assert_close(seen[0], expected)


def test_skip_from_defaults_to_the_middle_layer(tiny_model_dir):
    model, notes = load_condenser(str(tiny_model_dir))
    assert model.skip_from == 2 and model.n_head_layers == 2 and len(model.c_head) == 2
    with pytest.raises(RetrieverError, match="outside 0..4"):
        load_condenser(str(tiny_model_dir), skip_from=5)


def test_missing_mlm_head_is_said_and_tied_and_head_uses_bert_init(tiny_model_dir):
    model, notes = load_condenser(str(tiny_model_dir))
    assert any("has no MLM head: the MLM prediction head is newly initialised (decoder tied to word embeddings)"
               in note for note in notes), notes
    assert model.lm.cls.predictions.decoder.weight is model.lm.bert.embeddings.word_embeddings.weight
    query = model.c_head[0].attention.self.query
    assert abs(query.weight.std().item() - model.lm.config.initializer_range) < 0.005
    assert torch.count_nonzero(query.bias) == 0


def test_both_mlm_losses_are_present_and_finite(tiny_model_dir):
    model, _ = load_condenser(str(tiny_model_dir))
    outputs = model(**make_batch(tiny_model_dir))
    assert torch.isfinite(outputs.head_mlm_loss) and torch.isfinite(outputs.backbone_mlm_loss)
    assert outputs.head_mlm_loss > 0 and outputs.backbone_mlm_loss > 0
    torch.testing.assert_close(outputs.loss, outputs.head_mlm_loss + outputs.backbone_mlm_loss)
    assert outputs.span_loss is None
    outputs.loss.backward()
    assert model.c_head[0].output.dense.weight.grad is not None


def test_cocondenser_span_loss_is_finite_and_added(tiny_model_dir):
    model, _ = load_condenser(str(tiny_model_dir))
    outputs = model(**make_batch(tiny_model_dir), span_temperature=1.0)
    assert outputs.span_loss is not None and torch.isfinite(outputs.span_loss)
    torch.testing.assert_close(outputs.loss, outputs.head_mlm_loss + outputs.backbone_mlm_loss + outputs.span_loss)


def test_span_loss_targets_the_sibling_not_itself():
    siblings = torch.tensor([[5.0, 0, 0], [5.0, 0, 0], [0, 5.0, 0], [0, 5.0, 0]])
    assert span_contrastive_loss(siblings, 1.0) < 1e-6
    swapped = siblings[[0, 2, 1, 3]]
    assert span_contrastive_loss(swapped, 1.0) > 10


def test_save_and_load_give_identical_outputs(tiny_model_dir, tmp_path):
    model, _ = load_condenser(str(tiny_model_dir), n_head_layers=3, skip_from=1)
    model.eval()
    batch = make_batch(tiny_model_dir)
    with torch.no_grad():
        before = model(**batch, span_temperature=1.0)
    model.save_pretrained(tmp_path / "saved", load_tokenizer(str(tiny_model_dir)))
    loaded, notes = load_condenser(str(tmp_path / "saved"))
    loaded.eval()
    assert (loaded.n_head_layers, loaded.skip_from) == (3, 1)
    assert not any("no MLM head" in note for note in notes) and any("loaded the 3-layer" in note for note in notes)
    with torch.no_grad():
        after = loaded(**batch, span_temperature=1.0)
    for name in ("loss", "head_mlm_loss", "backbone_mlm_loss", "span_loss", "head_logits", "backbone_logits", "cls"):
        torch.testing.assert_close(getattr(after, name), getattr(before, name), rtol=0, atol=1e-6)
    head = torch.load(tmp_path / "saved" / HEAD_WEIGHTS, weights_only=True)
    assert head and all(key.startswith("c_head.") for key in head) and "c_head.2.output.dense.weight" in head
    assert json.loads((tmp_path / "saved" / "condenser.json").read_text())["skip_from"] == 1
    assert type(AutoModel.from_pretrained(tmp_path / "saved")).__name__ == "BertModel"


def test_published_condenser_folder_warm_starts_backbone_and_head(tiny_model_dir, tmp_path):
    """Luyu/condenser layout: an HF BertForMaskedLM folder plus model.pt, no condenser.json."""
    published, _ = load_condenser(str(tiny_model_dir))
    folder = tmp_path / "condenser"
    published.lm.save_pretrained(folder)
    load_tokenizer(str(tiny_model_dir)).save_pretrained(folder)
    torch.save(published.head_state_dict(), folder / HEAD_WEIGHTS)
    model, notes = load_condenser(str(folder))
    assert any("loaded the 2-layer Condenser head" in note for note in notes), notes
    for key, value in published.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0)
    with pytest.raises(RetrieverError, match="2-layer Condenser head but --n-head-layers is 4"):
        load_condenser(str(folder), n_head_layers=4)


def test_non_bert_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(RetrieverError, match="needs a BERT"):
        load_condenser(str(tmp_path))


def test_a_hub_id_is_refused_as_non_bert_or_unfetched_with_pretrains_advice(tmp_path, monkeypatch):
    """Its config.json was read from local folders only, so a hub id of a RoBERTa loaded into a BertForMaskedLM (a
    warning that every backbone weight is missing, then pre-training a random BERT): read from its JSON snapshot."""
    from huggingface_hub import constants

    from retriever.model_names import hub_json_files

    for name, kind in (("roberta-tiny", "roberta"), ("bert-tiny", "bert")):  # offline, only the JSON files cached
        snapshot = tmp_path / "hub" / f"models--acme--{name}" / "snapshots" / ("a" * 40)
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text(json.dumps({"model_type": kind}))
        (snapshot.parent.parent / "refs").mkdir()
        (snapshot.parent.parent / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_json_files.cache_clear()
    try:
        with pytest.raises(RetrieverError, match="^acme/roberta-tiny is a 'roberta' checkpoint; Condenser pre-training "
                                                 "here needs a BERT one$"):
            load_condenser("acme/roberta-tiny")
        # its weights not fetched: the download advice pretrain gives, without minilm (the help advises against it)
        with pytest.raises(RetrieverError, match=r"^could not load model 'acme/bert-tiny': .* e\.g\. --model DIR$"):
            load_condenser("acme/bert-tiny")
    finally:
        hub_json_files.cache_clear()


def test_condenser_wraps_any_bert_for_masked_lm(tiny_model_dir):
    lm = BertForMaskedLM.from_pretrained(tiny_model_dir)
    assert CondenserForPretraining(lm, n_head_layers=1, skip_from=0).skip_from == 0


def test_a_batch_without_masked_tokens_gives_zero_not_nan(tiny_model_dir):
    model, _ = load_condenser(str(tiny_model_dir))
    batch = make_batch(tiny_model_dir)
    batch["labels"].fill_(-100)
    outputs = model(**batch)
    assert outputs.loss.item() == 0.0


def test_warm_start_pooler_survives_pretraining_save(tiny_model_dir, tmp_path):
    """BertForMaskedLM drops the pooler; the saved backbone must still serve `--pooling pooler`."""
    model, notes = load_condenser(str(tiny_model_dir))
    assert any("pooler weights" in note for note in notes)
    model.save_pretrained(tmp_path / "saved")
    original = AutoModel.from_pretrained(tiny_model_dir)
    saved, info = AutoModel.from_pretrained(tmp_path / "saved", output_loading_info=True)
    assert not any(key.startswith("pooler.") for key in info["missing_keys"])
    torch.testing.assert_close(saved.pooler.dense.weight, original.pooler.dense.weight, rtol=0, atol=0)
    again, _ = load_condenser(str(tmp_path / "saved"))
    torch.testing.assert_close(again.carried_pooler["bert.pooler.dense.bias"], original.pooler.dense.bias,
                               rtol=0, atol=0)


@pytest.mark.parametrize("wiring, wrong", [({"n_head_layers": "2"}, "n_head_layers is '2'"),
                                           ({"n_head_layers": -1}, "n_head_layers is -1"),
                                           ({"n_head_layers": 100000}, "n_head_layers is 100000"),
                                           ({"skip_from": "1"}, "skip_from is '1'"),
                                           ({"skip_from": 1.5}, "skip_from is 1.5"),
                                           ({"skip_from": True}, "skip_from is True")])
def test_a_warm_starts_condenser_json_is_checked(tiny_model_dir, tmp_path, wiring, wrong):
    """Strings and floats died of TypeError tracebacks (the float at the first batch), -1 blamed --n-head-layers,
    which was not given, and 100000 layers were built (minutes, or out of memory): the flag's bound of 12 did not
    hold for the file."""
    folder = tmp_path / "warm"
    folder.mkdir()
    for item in tiny_model_dir.iterdir():
        (folder / item.name).symlink_to(item)
    (folder / "condenser.json").write_text(json.dumps(wiring))
    with pytest.raises(RetrieverError, match=rf"condenser.json: {re.escape(wrong)}, not a whole number from 0"):
        load_condenser(str(folder))


def test_an_untied_folder_says_its_document_tower_is_the_one_pre_trained(tiny_model_dir, tmp_path):
    """`pretrain --model` a `train --towers untied` output (the document tower at its root, the query tower in
    query/) continued the root's tower and said nothing of the query tower, which the output leaves behind."""
    import shutil

    folder = tmp_path / "untied"
    shutil.copytree(tiny_model_dir, folder)
    shutil.copytree(tiny_model_dir, folder / "query")
    _, notes = load_condenser(str(folder))
    said = [note for note in notes if "untied towers" in note]
    assert said == [f"note: {folder} holds untied towers: pre-training continues its document tower (the folder's "
                    f"own), not its query tower; pass --model {folder / 'query'} to pre-train that one instead"]
    assert not [note for note in load_condenser(str(tiny_model_dir))[1] if "untied towers" in note]


@pytest.mark.parametrize("dropped, said", [(1, "1 backbone weight is missing"), (2, "2 backbone weights are missing")])
def test_missing_backbone_weights_are_counted_in_agreement(tiny_model_dir, tmp_path, dropped, said):
    """One missing weight was said as "1 backbone weights are missing"."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "partial"
    shutil.copytree(tiny_model_dir, folder)
    weights = load_file(folder / "model.safetensors")
    for key in [key for key in sorted(weights) if "encoder.layer.0.output" in key][:dropped]:
        del weights[key]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    _, notes = load_condenser(str(folder))
    assert any(note.startswith(f"warning: {said} from {folder} and newly initialised") for note in notes), notes


def test_a_head_saved_from_a_model_of_another_size_names_the_weight_and_shapes(tiny_model_dir, tmp_path):
    """A head of hidden size 32 beside a hidden-48 BERT said only `does not fit this model: Error(s) in loading
    state_dict for ModuleList:` (torch's first line, which names nothing)."""
    from transformers import BertConfig, BertModel

    small, _ = load_condenser(str(tiny_model_dir))
    folder = tmp_path / "wider"
    load_tokenizer(str(tiny_model_dir)).save_pretrained(folder)
    BertModel(BertConfig(vocab_size=small.lm.config.vocab_size, hidden_size=48, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=96)).save_pretrained(folder)
    torch.save(small.head_state_dict(), folder / HEAD_WEIGHTS)
    with pytest.raises(RetrieverError) as caught:
        load_condenser(str(folder))
    assert str(caught.value) == (
        f"{folder / HEAD_WEIGHTS}: does not fit this model: c_head.0.attention.self.query.weight is 32x32 where the "
        "model's is 48x48 (32 of 32 head weights differ): a head saved beside a model of another size; remove or "
        "rename it to start from this folder's backbone with a new head")


def test_a_warm_starts_skip_from_beyond_its_layers_names_the_file(tiny_model_dir, tmp_path):
    """condenser.json's skip_from 6 on a 4-layer BERT blamed `--skip-from 6`, a flag that was not given."""
    folder = tmp_path / "warm"
    folder.mkdir()
    for item in tiny_model_dir.iterdir():
        (folder / item.name).symlink_to(item)
    (folder / "condenser.json").write_text(json.dumps({"n_head_layers": 2, "skip_from": 6}))
    with pytest.raises(RetrieverError, match=r"condenser.json: skip_from is 6, not a whole number from 0 to 4; fix"):
        load_condenser(str(folder))
    assert load_condenser(str(folder), skip_from=1)[0].skip_from == 1  # the flag's value is used, not the file's
