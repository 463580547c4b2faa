"""Finding and loading Hugging Face checkpoints: local folders, hub ids and the ``minilm`` alias.

Loading from the hub is kept real (users elsewhere have one); a failure says how to pass a local folder instead.
torch and transformers are imported by the functions that load: reading a folder's settings files (`model_files`,
`read_retriever_config`, `json_value`) does not wait seconds for them, so an error in those files is said at once.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import pickle
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retriever.errors import RetrieverError
from retriever.files import read_json, read_json_object
from retriever.model_names import DOWNLOAD_ADVICE, error_reason, hub_json_files, located_model
from retriever.st_router import check_local_router, transformer_folder
from retriever.st_transformer import transformer_config_file
from retriever.weights_files import protocol_note_silenced, unreadable_weights_message

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

RETRIEVER_CONFIG = "retriever.json"
CONFIG_FILES = ("config.json", "tokenizer_config.json", "special_tokens_map.json")


def _load_error(name: str, path: str, what: str, error: Exception, advice: str = DOWNLOAD_ADVICE) -> RetrieverError:
    """A local folder that fails to load is damaged (say which part); anything else failed on the hub."""
    reason = error_reason(error)
    if "trust_remote_code" in str(error) or "contains custom code" in str(error):
        # transformers would ask on a terminal whether to run it; retriever never runs a model folder's code
        return RetrieverError(f"{path}: the model needs its own Python code (auto_map in its config), which retriever "
                              "never runs; use a model transformers supports as it is")
    if Path(path).is_dir():
        return RetrieverError(f"{path}: cannot load its {what} ({reason}); the model folder is damaged or "
                              "incomplete, so save or download it again")
    return RetrieverError(f"could not load model {name!r}: it is not a local folder and fetching it from the "
                          f"Hugging Face hub failed ({reason}). {advice}")


def check_config_files(path: str) -> None:
    """Refuse a local folder whose config files are JSON but not objects: transformers raises a bare TypeError
    or AttributeError on them (a traceback, not a message)."""
    for file_name in CONFIG_FILES:
        file = Path(path) / file_name
        try:
            value = read_json(file) if file.is_file() else {}
        except RetrieverError:
            continue  # not JSON at all: transformers says so itself
        if not isinstance(value, dict):
            raise RetrieverError(f"{file}: not a JSON object (it holds a {type(value).__name__}); the model folder "
                                 "is damaged or incomplete, so save or download it again")


def _check_lower_case(path: Path, tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse a folder whose sentence-transformers config lowercases texts (``do_lower_case``) for a tokenizer that
    keeps case: sentence-transformers lowercases before tokenizing and retriever does not, so the vectors differ."""
    if json_value(transformer_config_file(path), "do_lower_case") is not True:
        return
    probe = "THE QUICK BROWN FOX"
    if tokenizer(probe, add_special_tokens=False)["input_ids"] != tokenizer(probe.lower(),
                                                                             add_special_tokens=False)["input_ids"]:
        raise RetrieverError(f"{transformer_config_file(path)}: lowercases texts (do_lower_case) but its "
                             "tokenizer keeps case, and retriever hands texts over as they are; encode it with "
                             "sentence-transformers")


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The folder's tokenizer, refused when it has no vocabulary: without its files, transformers quietly
    builds one of the special tokens alone, and every word becomes [UNK]."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoTokenizer

    root = located_model(name)
    path = str(transformer_folder(root))  # a Router's document tower, whose query tower must tokenize alike
    files = Path(path) if Path(path).is_dir() else model_files(path)  # a hub id's: a snapshot of its JSON files
    check_local_router(path, files)
    check_config_files(path)
    try:
        with quiet_transformers():  # its fallbacks log paragraphs before the error they end in
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, StrictDataclassError) as error:
        raise _sentencepiece_missing(path) or _load_error(name, path, "tokenizer", error) from None
    _right_sides(files, tokenizer)
    if files is not None:
        _check_lower_case(files, tokenizer)
    if len(tokenizer.get_vocab()) <= len(set(tokenizer.all_special_tokens)):
        raise RetrieverError(f"{path}: the tokenizer has no vocabulary, only its special tokens; the folder lacks "
                             "its tokenizer files (tokenizer.json or vocab.txt): copy them from the model it "
                             "was trained from")
    if path != root:
        _check_query_tower_tokenizer(root, tokenizer)
    return tokenizer


def _right_sides(path: Path | None, tokenizer: PreTrainedTokenizerBase) -> None:
    """Pad and cut on the right: left padding moves BERT's positions and CLS (vectors then depend on the batch), and
    cutting on the left the head of a text `texts.tokenize_bounded` hands over encoded its middle. A
    sentence-transformers folder (or a Router's tower) whose tokenizer says left is refused: sentence-transformers
    pads or cuts there as it says, so its vectors would differ."""
    for side, does in (("padding_side", "pads"), ("truncation_side", "cuts")):
        if getattr(tokenizer, side, "right") != "right" and path is not None and (
                (path / "modules.json").is_file() or (path.parent / "router_config.json").is_file()):
            raise RetrieverError(f"{path / 'tokenizer_config.json'}: {side} {getattr(tokenizer, side)!r}: "
                                 f"sentence-transformers {does} texts on that side, and retriever only on the right, "
                                 f"so its vectors would differ; set {side} to \"right\" there, or encode the model "
                                 "with sentence-transformers")
        setattr(tokenizer, side, "right")


def _check_query_tower_tokenizer(root: str, tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse a Router folder whose query tower tokenizes otherwise than its document tower: retriever tokenizes
    queries and passages with one tokenizer, so queries would not get the token ids the query tower was saved with."""
    from retriever.st_router import router_towers

    query = str((router_towers(root) or (root,))[0])
    theirs = load_tokenizer(query)
    if (tokenizer_fingerprint(theirs), tokenizer_behaviour(theirs)) != \
            (tokenizer_fingerprint(tokenizer), tokenizer_behaviour(tokenizer)):
        raise RetrieverError(f"{query}: the query tower's tokenizer differs from the document tower's (vocabulary or "
                             "normalisation), and retriever tokenizes queries and passages alike; encode the model "
                             "with sentence-transformers")


def _sentencepiece_missing(path: str) -> RetrieverError | None:
    """A folder whose tokenizer is only a SentencePiece model needs the sentencepiece package, which retriever does
    not install: transformers then failed asking for tiktoken, and the folder was called damaged."""
    folder = Path(path)
    models = sorted(folder.glob("*.model")) if folder.is_dir() and not (folder / "tokenizer.json").is_file() else []
    if not models or importlib.util.find_spec("sentencepiece") is not None:
        return None
    return RetrieverError(f"{models[0]}: a SentencePiece tokenizer (no tokenizer.json) needs the sentencepiece "
                          "package: pip install sentencepiece, or add the model's tokenizer.json to the folder")


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of the vocabulary, so a tokenizer swapped or lost under an index is noticed like changed weights."""
    digest = hashlib.sha256(type(tokenizer).__name__.removesuffix("Fast").encode())
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        digest.update(f"{token_id}\t{token}\n".encode())
    return digest.hexdigest()[:32]


# Text a tokenizer's normalisation options change: case, accents, compatibility forms, CJK splitting, spaces.
TOKENIZER_PROBE = "Ünïcödé CAFÉ naïve İstanbul Straße ﬁne ½ 東京タワー x\u00a0y can't—won't"


def tokenizer_behaviour(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of how the tokenizer splits a probe text: a vocabulary kept while lowercasing, accent stripping
    or another normaliser setting changed (tokenizer_config.json, tokenizer.json) gives other ids, and other
    vectors, which the vocabulary's fingerprint alone does not notice. (verbose=False: a model_max_length below
    the probe's 42 tokens warned of "indexing errors" on every load.)"""
    ids = tokenizer(TOKENIZER_PROBE, add_special_tokens=True, verbose=False)["input_ids"]
    return hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest()[:32]


def load_model(name: str, model_class: Any = None, *, refuse_random: bool = False, advice: str = DOWNLOAD_ADVICE,
               **kwargs: Any) -> tuple[PreTrainedModel, dict]:
    """Load a checkpoint in fp32 and return it with its loading info (missing keys etc.). fp32 is asked for:
    transformers ≥ 5 otherwise keeps the stored dtype, and a checkpoint stored in fp16 then trained in fp16.
    Weights it lacks are drawn at random: training learns them, an encoder refuses them (``refuse_random``).
    ``model_class`` is transformers' AutoModel unless given; ``advice`` ends a refusal to fetch it (`located_model`)."""
    import torch
    from huggingface_hub.errors import StrictDataclassError
    from safetensors import SafetensorError
    from transformers import AutoModel

    model_class = AutoModel if model_class is None else model_class
    path = located_model(name, advice)
    options = {"dtype": torch.float32, "trust_remote_code": False, **kwargs}  # never run a model folder's code
    try:
        with quiet_transformers():
            model, info = model_class.from_pretrained(path, output_loading_info=True, **options)
    except (pickle.UnpicklingError, EOFError, SafetensorError) as error:
        # transformers loads .bin files with torch.load(weights_only=True): a file that needs more is refused.
        raise RetrieverError(unreadable_weights_message(path, error)) from None
    except (OSError, ValueError, StrictDataclassError) as error:
        raise _load_error(name, path, "config or weights", error, advice) from None
    except RuntimeError as error:  # transformers' loading report: weights of another shape than config.json says
        if "mismatched_sizes" not in str(error):
            raise
        raise RetrieverError(f"{path}: its weights have other shapes than its config.json says (a config.json of "
                             "another model?); the model folder is damaged, so save or download it again") from None
    if getattr(model.config, "is_encoder_decoder", False):  # its forward wants decoder inputs: a traceback at encode
        raise RetrieverError(f"{path}: a {model.config.model_type} encoder-decoder model; retriever encodes with "
                             "encoder-only models (BERT, RoBERTa, ...), so pass one of those")
    _say_missing_weights(path, info, refuse_random)
    _say_unbuilt_layers(path, model, info)
    return model, info


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' load report is a table of every key it did not use (an MLM head's, on each search of a
    pre-trained folder), in terminal bold even into a log; what matters is said in one line instead. Its
    progress bars are turned off here, where every load goes through."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with protocol_note_silenced():  # unreadable_weights_message says what matters
            yield
    finally:
        hf_logging.set_verbosity(level)


def _say_missing_weights(path: str, info: dict, refuse: bool) -> None:
    """Say (or refuse) weights the checkpoint lacks, drawn at random; a pooler and an MLM head are judged elsewhere."""
    missing = sorted(key for key in info.get("missing_keys", ())
                     if not key.removeprefix("bert.").startswith(("pooler.", "cls.")))
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    if missing and refuse:  # other vectors on each load: an index of them was built, exit 0, then never searchable
        raise RetrieverError(f"{path}: its weights file lacks {len(missing)} of the model's weights ({shown}), drawn "
                             "at random on every load, so its vectors would be noise; pass a complete checkpoint")
    if missing:
        print(f"warning: {path} lacks {len(missing)} weights, initialised at random: {shown}", file=sys.stderr)


def _say_unbuilt_layers(path: str, model: PreTrainedModel, info: dict) -> None:
    """Say the checkpoint's layers past those config.json builds (num_hidden_layers lowered, or another model's
    config.json): transformers and sentence-transformers leave them unused without a word, so a 12-layer model ran
    as its first 6. Only weights named as the model's own (but for the layer number) count: an MLM or classifier
    head the checkpoint also holds is no layer of it."""
    unexpected = info.get("unexpected_keys") or ()
    if not unexpected:  # the common case: no key of every weight's name to build
        return
    numbered = re.compile(r"\.(\d+)\.")
    built = {numbered.sub(".N.", key) for key in model.state_dict()}
    unbuilt = sorted(key for key in unexpected if numbered.sub(".N.", key) in built)
    if not unbuilt:
        return
    saved = max(int(numbered.search(key).group(1)) for key in unbuilt) + 1
    layers = getattr(model.config, "num_hidden_layers", None)
    print(f"warning: {path}: its weights hold {saved} layers and config.json builds {layers} (num_hidden_layers), so "
          f"{len(unbuilt)} weights ({unbuilt[0]}, ...) go unused, as in transformers and sentence-transformers; if "
          f"the model is meant whole, set num_hidden_layers to {saved} in its config.json", file=sys.stderr)


def model_files(name: str) -> Path | None:
    """The folder holding a model's settings files: a local folder itself, or for a hub id a snapshot of its JSON
    files (fetched, or from the cache when offline). A hub id neither has is refused (`located_model`); None for
    another lookup failure (loading the model then says why). Hub ids used to be read from no folder at all: their
    pooling and max length were never seen."""
    path = Path(located_model(name))
    if path.is_dir():
        return path
    found = hub_json_files(str(path))
    return found if isinstance(found, Path) else None


def check_vocabulary(tokenizer: PreTrainedTokenizerBase, model: torch.nn.Module, path: str) -> None:
    """Refuse a tokenizer whose token ids run past the model's embedding table (tokenizer files of another model):
    the first text holding such a token raised an IndexError traceback in the middle of encoding."""
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    largest = max(tokenizer.get_vocab().values(), default=-1)
    if rows is not None and largest >= rows:
        raise RetrieverError(f"{path}: its tokenizer has token ids up to {largest} but the model embeds only {rows} "
                             "tokens; the tokenizer files belong to another model, so copy the right ones")


def read_retriever_config(name: str) -> dict:
    """The encoder settings a trained model folder records (pooling, normalisation, lengths, towers)."""
    path = model_files(name)
    if path is None or not (path / RETRIEVER_CONFIG).is_file():
        return {}
    return read_json_object(path / RETRIEVER_CONFIG)


def weights_fingerprint(*models: torch.nn.Module) -> str:
    """A content hash of the weights, independent of file layout, so a changed model is noticed."""
    import torch

    digest = hashlib.sha256()
    for model in models:
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


def json_value(path: Path, key: str) -> object:
    """``key`` of the JSON object in ``path``; None when the file is absent, unreadable or holds no object."""
    try:
        value = read_json(path) if path.is_file() else None
    except RetrieverError:
        return None
    return value.get(key) if isinstance(value, dict) else None
