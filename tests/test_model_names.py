"""Telling a model's name apart (alias, local folder, hub id) before anything loads."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from fixtures_models import make_tiny_bert
from retriever.encoder_settings import EncoderSettings
from retriever.errors import RetrieverError
from retriever.model_names import hub_json_files, resolve_model_path

NOT_FOUND = "model 'models/typo' is neither a local folder nor reachable on the Hugging Face hub"


@pytest.fixture()
def offline_hub(tmp_path, monkeypatch):
    """A hub that cannot be reached and an empty cache, whatever the machine's network."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    hub_json_files.cache_clear()
    yield {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub-cache")}
    hub_json_files.cache_clear()


def test_a_missing_folder_shaped_like_a_hub_id_is_refused_as_it_is_resolved(offline_hub):
    """`models/typo` (no such folder here) was taken as a hub id in silence; its settings read as none, and only
    loading the model failed, after Ray had started under --ray."""
    with pytest.raises(RetrieverError, match=NOT_FOUND):
        EncoderSettings.for_model("models/typo")


@pytest.mark.parametrize("command", ["encode", "build"])
def test_ray_commands_refuse_it_before_ray_or_torch(command, offline_hub, tmp_path):
    """`encode/build --model models/typo --ray` imported torch, started Ray and its actors, and failed in them
    (26 s); the name is refused as the flags are read, in one line, with nothing written."""
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "hello"}\n', encoding="utf-8")
    code = ("import sys\nfrom retriever.cli import main\ntry:\n    main()\nfinally:\n"
            "    print(sorted(n for n in ('torch', 'transformers', 'ray') if n in sys.modules), file=sys.stderr)\n")
    result = subprocess.run([sys.executable, "-c", code, command, "corpus.jsonl", "-o", "out", "--model",
                             "models/typo", "--ray"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            env=offline_hub)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"error: {NOT_FOUND} (") and lines[1] == "[]", result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["my model", "models/my model", "org/name@main", "org--name"])
def test_a_name_no_hub_repo_can_have_is_refused_as_no_such_folder(name, offline_hub):
    """`--model "my model"` (a mistyped folder) was looked up on the hub after torch loaded, and under --ray after Ray
    started (21 s), then refused as a download that failed, with advice to download it."""
    with pytest.raises(RetrieverError, match=r": no such model folder, nor a Hugging Face hub id \(ORG/NAME"):
        EncoderSettings.for_model(name)


@pytest.mark.parametrize("name", ["", " "])
def test_an_empty_model_name_is_refused_not_read_as_the_current_folder(name, tmp_path, monkeypatch):
    """`--model "$UNSET"` encoded with the model in the current folder when run from one (Path("") is "."), and
    elsewhere said `.: not a Hugging Face model folder`, a name never typed."""
    monkeypatch.chdir(shutil.copytree(make_tiny_bert(tmp_path / "tiny", layers=1), tmp_path / "here"))
    with pytest.raises(RetrieverError, match=r"^the model name is empty: give a model folder, a Hugging Face hub id "
                                             r"\(ORG/NAME\) or minilm$"):
        EncoderSettings.for_model(name)


def test_a_models_config_file_given_for_its_folder_says_to_pass_the_folder(tmp_path):
    """`--model F/config.json` said `F/config.json: not a Hugging Face model folder (no config.json)` (probe round 9)."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RetrieverError, match=r"config.json: not a Hugging Face model folder \(a file: pass the folder"):
        resolve_model_path(str(tmp_path / "model" / "config.json"))
    with pytest.raises(RetrieverError, match=r"empty: not a Hugging Face model folder \(no config.json\)"):
        resolve_model_path(str(tmp_path / "empty"))


def test_the_shipped_models_hub_id_offline_points_to_the_alias(offline_hub):
    """A sentence-transformers user types the hub id of the default model; offline it was refused with the general
    advice (download it, or use minilm 'for the shipped weights'), not that minilm is that very model."""
    with pytest.raises(RetrieverError, match=r"'sentence-transformers/all-MiniLM-L6-v2' is neither .*\. --model minilm "
                                             r"is this model, shipped with retriever: use it$"):
        EncoderSettings.for_model("sentence-transformers/all-MiniLM-L6-v2")


def test_a_router_folder_is_not_called_the_old_layout(tmp_path):
    """Untied towers re-saved by sentence-transformers (a Router over document_0_Transformer and
    query_0_Transformer) were called 'the old layout' with advice to save them again with sentence-transformers,
    which is what made them. Such a folder is read now (tests/test_st_router.py); one whose routes name no model
    folders, or whose router_config.json is damaged, is refused saying so."""
    import json

    folder = tmp_path / "st"
    (folder / "document_0_Transformer").mkdir(parents=True)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.router.Router"},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "router_config.json").write_text("{}")
    with pytest.raises(RetrieverError, match=r"router_config.json: its structure, types or parameters are not JSON "
                                             r"objects"):
        resolve_model_path(str(folder))
    types = dict.fromkeys(["query_0_Transformer", "document_0_Transformer"], "sentence_transformers.models.Transformer")
    (folder / "router_config.json").write_text(json.dumps({"types": types, "structure": {
        "query": ["query_0_Transformer"], "document": ["document_0_Transformer"]}}))
    with pytest.raises(RetrieverError, match=r"^[^;]*st: not a Hugging Face model folder \(no config.json\); its "
                                             r"sentence-transformers Router's query and document routes do not start "
                                             r"with model folders$"):
        resolve_model_path(str(folder))


def test_a_sentence_transformers_folder_without_a_transformer_is_not_called_the_old_layout(tmp_path):
    """A StaticEmbedding (model2vec-style) folder has no transformer at all: it was called the old layout, with
    advice to save it again with sentence-transformers, which writes it the same way."""
    import json

    folder = tmp_path / "static"
    (folder / "0_StaticEmbedding").mkdir(parents=True)
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "0_StaticEmbedding", "type":
                                                      "sentence_transformers.models.StaticEmbedding"}]))
    with pytest.raises(RetrieverError, match=r"static: not a Hugging Face model folder \(no config.json\); its "
                                             r"sentence-transformers modules are StaticEmbedding, with no transformer "
                                             r"model for retriever to encode with; encode it with "
                                             r"sentence-transformers$"):
        resolve_model_path(str(folder))


@pytest.mark.parametrize("content", ['{"a": 1}', '[{"type": "sentence_transformers.models.StaticEmbedding"}, 3]'])
def test_a_modules_json_that_is_not_a_list_of_records_is_named_not_read_as_no_modules(tmp_path, content):
    """A folder without config.json whose modules.json is damaged was said to have modules 'none' (or to lack a
    transformer, its bad records skipped), where loading the same file refuses it as not a list of module records:
    both now read it through one reader."""
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "modules.json").write_text(content)
    with pytest.raises(RetrieverError) as refused:
        resolve_model_path(str(folder))
    assert str(refused.value) == (f"{folder / 'modules.json'}: not a list of module records; fix it, or encode the "
                                  "model with sentence-transformers")


def test_a_checkpoint_or_an_unfinished_run_says_to_rerun_its_command(tmp_path):
    """`--model OUT/checkpoints/checkpoint-N` or an unfinished run's OUT said only 'not a Hugging Face model folder
    (no config.json)': neither said it is a run to finish by rerunning its command, nor where its model will be."""
    checkpoint = tmp_path / "out" / "checkpoints" / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text("{}", encoding="utf-8")
    out = str(tmp_path / "out")
    for given in (checkpoint, checkpoint.parent):
        with pytest.raises(RetrieverError, match=rf"^{re.escape(str(given))}: a checkpoint of an unfinished train or "
                                                 rf"pretrain run, not a model: rerun the command that wrote "
                                                 rf"{re.escape(out)} to finish it.*then pass --model {re.escape(out)}$"):
            resolve_model_path(str(given))
    with pytest.raises(RetrieverError, match=rf"^{re.escape(out)}: an unfinished train or pretrain run \(no model "
                                             rf"written yet\): rerun its command to finish it.*then pass it again$"):
        resolve_model_path(out)
    shutil.rmtree(checkpoint)
    (checkpoint.parent / "finished.json").write_text("{}", encoding="utf-8")  # finished, then its model files removed
    with pytest.raises(RetrieverError, match=rf"^{re.escape(out)}: a finished train or pretrain run whose model files "
                                             r"are gone \(no config.json\): rerun its command with a new --output"):
        resolve_model_path(out)
