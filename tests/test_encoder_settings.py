"""Encoder settings: every list of setting names comes from the one dataclass."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from fixtures_models import make_tiny_bert
from retriever.encoder import Encoder
from retriever.encoder_settings import OVERRIDABLE, SERVED_FIELDS, VECTOR_FIELDS, EncoderSettings
from retriever.errors import RetrieverError


def test_lists_are_derived_from_the_fields():
    names = [f.name for f in dataclasses.fields(EncoderSettings)]
    assert list(OVERRIDABLE) == [name for name in names if name != "model"]
    assert set(VECTOR_FIELDS) == {*OVERRIDABLE, "weights_sha256", "dim", "dtype"}  # weights, not paths, identify
    assert set(SERVED_FIELDS) <= {*names, "dim"} and "model" in SERVED_FIELDS


def test_an_encoders_record_holds_every_setting_and_reads_back(tiny_model_dir):
    settings = EncoderSettings.for_model(str(tiny_model_dir), pooling="cls", query_prefix="q: ")
    record = Encoder(settings, device="cpu", dtype="fp32").metadata()
    assert set(VECTOR_FIELDS) <= set(record)
    assert EncoderSettings.from_record(record, settings.model) == settings


def test_model_folder_settings_are_defaults(tmp_path):
    folder = make_tiny_bert(tmp_path / "trained")
    (folder / "retriever.json").write_text(json.dumps({"pooling": "cls", "normalize": False}))
    settings = EncoderSettings.for_model(str(folder))
    assert (settings.pooling, settings.normalize) == ("cls", False)
    assert EncoderSettings.for_model(str(folder), pooling="mean").pooling == "mean"
    (folder / "retriever.json").write_text(json.dumps(settings.recorded()))
    assert EncoderSettings.for_model(str(folder)) == settings


def test_missing_local_folder_is_clear():
    with pytest.raises(RetrieverError, match="no such model folder"):
        EncoderSettings.for_model("./does/not/exist")


def test_importing_the_settings_loads_no_torch():
    """Shard readers import them in spawned index workers, which must stay light."""
    code = "import sys, retriever.shards, retriever.encoder_settings; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"


@pytest.mark.parametrize("recorded, message", [
    ({"normalize": "false"}, "normalize must be true or false, not 'false'"),
    ({"passage_max_length": "abc"}, "passage_max_length must be a whole number, not 'abc'"),
    ({"passage_max_length": 20.9}, "passage_max_length must be a whole number, not 20.9"),
    ({"query_max_length": True}, "query_max_length must be a whole number, not True"),
    ({"query_prefix": 5}, "query_prefix must be a string, not 5"),
])
def test_a_retriever_json_value_of_the_wrong_type_is_refused_naming_the_file(tmp_path, recorded, message):
    folder = make_tiny_bert(tmp_path / "trained")
    (folder / "retriever.json").write_text(json.dumps(recorded))
    with pytest.raises(RetrieverError, match=f"retriever.json: {message}; fix the value"):
        EncoderSettings.for_model(str(folder))
    (folder / "retriever.json").write_text(json.dumps({"passage_max_length": None, "normalize": False}))
    assert EncoderSettings.for_model(str(folder)).normalize is False  # null still means the default


def test_a_retriever_json_value_of_no_known_kind_names_the_file(tmp_path):
    """`"pooling": "max"` was refused without saying which file held it."""
    folder = make_tiny_bert(tmp_path / "trained")
    (folder / "retriever.json").write_text(json.dumps({"pooling": "max"}))
    with pytest.raises(RetrieverError, match=r"trained/retriever.json: unknown pooling 'max'; choose one of "):
        EncoderSettings.for_model(str(folder))


def test_a_model_may_be_named_by_a_path_object(tmp_path):
    """`for_model(Path(...))` was refused: the model must be a string, though index folders take a Path."""
    folder = make_tiny_bert(tmp_path / "model")
    assert EncoderSettings.for_model(folder).model == str(folder)


def test_numpy_scalars_are_taken_as_the_python_values_they_hold(tiny_model_dir):
    """A notebook's np.int64 max length was refused as 'must be a whole number, not np.int64(64)' (and an
    np.bool_ as not true or false)."""
    import numpy as np

    settings = EncoderSettings.for_model(str(tiny_model_dir), passage_max_length=np.int64(64), normalize=np.bool_(False),
                                         pooling=np.str_("cls"))
    assert (settings.passage_max_length, settings.query_max_length, settings.normalize, settings.pooling) == \
        (64, 64, False, "cls")
    assert [type(v) for v in (settings.passage_max_length, settings.normalize, settings.pooling)] == [int, bool, str]
    assert EncoderSettings(str(tiny_model_dir), query_max_length=np.int32(16)).query_max_length.__class__ is int


def test_our_untied_towers_encoded_as_shared_are_refused(tmp_path, tiny_model_dir):
    """The passage tower at the folder's root was loaded for both, so queries were encoded by it, with exit 0."""
    from retriever.training.dual_encoder import DualEncoder

    folder = DualEncoder.from_pretrained(str(tiny_model_dir), towers="untied").save(tmp_path / "untied")
    with pytest.raises(RetrieverError, match=r"retriever.json: the model's query and passage towers are untied, and "
                                             r"towers='shared' would encode queries with the passage tower"):
        EncoderSettings.for_model(str(folder), towers="shared")
    assert EncoderSettings.for_model(str(folder)).towers == "untied"


def test_a_bad_setting_in_the_model_folder_is_said_before_torch_is_imported(tmp_path, tiny_beir):
    """Reading a folder's settings imported torch and transformers (through model_loading), so the error waited
    seconds for imports the command never reached."""
    from fixtures_processes import commands_in_one_process

    folder = make_tiny_bert(tmp_path / "trained")
    (folder / "retriever.json").write_text(json.dumps({"pooling": "bogus"}))
    build = ["build", str(tiny_beir), "-o", str(tmp_path / "idx"), "--model", str(folder)]
    [(code, said, imported)] = commands_in_one_process([(tmp_path, build)])
    assert code == 1 and said[-1] == (f"error: {folder}/retriever.json: unknown pooling 'bogus'; choose one of cls, "
                                      "pooler, mean")
    assert "torch" not in imported and "transformers" not in imported


@pytest.mark.parametrize("model", [None, 5, b"minilm", ["minilm"]])
def test_a_model_that_is_no_name_or_path_is_named_in_one_line(model):
    """`EncoderSettings(model=None)` or `EncoderSettings.for_model(5)` (the library's way to an Encoder) raised an
    AttributeError, `'NoneType' object has no attribute 'strip'`, naming no argument."""
    for make in (lambda: EncoderSettings(model=model), lambda: EncoderSettings.for_model(model)):
        with pytest.raises(RetrieverError, match=rf"^model must be a model folder's path \(str or Path\), a Hugging "
                                                 rf"Face hub id \(ORG/NAME\) or minilm, not {type(model).__name__}"):
            make()


# Every key an encoder record has held since the first build (git history of Encoder.metadata and EncoderSettings):
# indexes built by any earlier version must still open.
EVERY_RECORDED_KEY = ("model", "pooling", "normalize", "query_max_length", "passage_max_length", "query_prefix",
                      "passage_prefix", "towers", "model_path", "weights_sha256", "tokenizer_sha256",
                      "tokenizer_behaviour_sha256", "dim", "dtype")


def test_a_record_of_every_key_earlier_versions_wrote_reads(tiny_model_dir):
    recorded = {**Encoder(EncoderSettings(model=str(tiny_model_dir)), device="cpu").metadata()}
    assert set(recorded) <= set(EVERY_RECORDED_KEY)
    assert EncoderSettings.from_record(dict.fromkeys(EVERY_RECORDED_KEY) | {"pooling": "cls", "normalize": False,
                                                                            "query_max_length": 8,
                                                                            "passage_max_length": 8,
                                                                            "query_prefix": "", "passage_prefix": "",
                                                                            "towers": "shared"},
                                       str(tiny_model_dir)).pooling == "cls"


def test_an_encoder_setting_this_version_does_not_know_is_refused_naming_it_and_the_writer(tiny_flat_build, tmp_path):
    """A newer retriever's setting in the manifest was ignored: queries were encoded without it, silently."""
    import shutil

    from retriever import __version__
    from retriever.searching import Searcher

    index = shutil.copytree(tiny_flat_build, tmp_path / "index")
    manifest = json.loads((index / "manifest.json").read_text())
    manifest["encoder"]["query_instruction"] = "Represent the query: "
    manifest["versions"]["retriever"] = "9.1.0"
    (index / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(RetrieverError, match=rf"^{index}: the encoder record holds 'query_instruction', a setting "
                                             rf"retriever {__version__} does not know \(written by retriever 9\.1\.0\)"):
        Searcher(index, device="cpu", dtype="fp32")
    assert Searcher(index, device="cpu", dtype="fp32", mode="bm25").search(["honey bee"], k=1)  # it needs no encoder


@pytest.mark.parametrize("key, value, said", [
    ("normalize", "false", "normalize must be true or false, not 'false'"),
    ("query_max_length", 0, r"query_max_length \(--query-max-length\): 0 is less than 1"),
    ("pooling", "CLS", "unknown pooling 'CLS'")])
def test_a_bad_value_in_an_encoder_record_names_the_folder_holding_it(tiny_model_dir, tmp_path, key, value, said):
    """A hand-edited manifest's bad value said 'encoder settings: ... fix the value', or named a flag never given,
    with no word of which file holds it."""
    recorded = {**EncoderSettings(model=str(tiny_model_dir)).recorded(), key: value}
    with pytest.raises(RetrieverError, match=rf"^{tmp_path}: the encoder record: {said}"):
        EncoderSettings.from_record(recorded, str(tiny_model_dir), tmp_path)
