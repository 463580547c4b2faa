"""Why a PyTorch weights file (``.bin``, ``.pt``) is refused by torch's safe loader, in words a user can act on.

Weights are only ever read with ``torch.load(weights_only=True)``, which unpickles plain tensors and never
runs code. That loader reads pickle protocols 2 and 3 only: a plain state dict saved with ``pickle_protocol=4``
or 5 is refused with an "unsupported operand" message, which read as "damaged or holds code".
"""
from __future__ import annotations

import pickle
import warnings
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SAFE_LOADER_PROTOCOLS = (2, 3)
PROTOCOL_WARNING = "Detected pickle protocol"  # torch's UserWarning before it tries a protocol other than 2


@contextmanager
def protocol_note_silenced() -> Iterator[None]:
    """Around torch's safe loading: its two-line note on a pickle protocol other than 2 is noise where it loads (3),
    and where it does not (4, 5) the caller's one-line error says what matters."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PROTOCOL_WARNING)
        yield


def pickle_protocol(path: Path) -> int | None:
    """The pickle protocol a torch file was saved with (zip archive or legacy format); None if unreadable."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
                if name is None:
                    return None
                with archive.open(name) as member:
                    head = member.read(2)
        else:
            with open(path, "rb") as file:
                head = file.read(2)
    except (OSError, zipfile.BadZipFile):
        return None
    return head[1] if len(head) == 2 and head[0] == pickle.PROTO[0] else None


def unreadable_weights_message(folder: str | Path, error: BaseException) -> str:
    """What is wrong with a model folder whose weights the safe loader refused, and what to do."""
    folder = Path(folder)
    for path in sorted(folder.glob("*.bin")) if folder.is_dir() else [folder]:
        protocol = pickle_protocol(path)
        if protocol is not None and protocol not in SAFE_LOADER_PROTOCOLS:
            return (f"{path}: saved with pickle protocol {protocol}, which torch's safe loader (weights_only) does "
                    "not read, and retriever unpickles nothing else (it could run code); if you trust the file, save "
                    "the model again as safetensors (model.save_pretrained(folder)) or with torch.save(state_dict, "
                    "file, pickle_protocol=2)")
    return (f"{folder}: the weights file cannot be loaded as plain tensors ({_refusal(error)}); it is damaged or "
            "holds code, so replace it (safetensors preferred)")


def refused_file_reason(path: Path, error: BaseException) -> str:
    """Why the safe loader refused the torch file ``path``, in one line without torch's advice to load it unsafely
    (its message is paragraphs, in terminal bold, suggesting ``weights_only=False``, which runs the file's code)."""
    protocol = pickle_protocol(path)
    if protocol is not None and protocol not in SAFE_LOADER_PROTOCOLS:
        return unreadable_weights_message(path, error).removeprefix(f"{path}: ")
    return f"not plain tensors ({type(error).__name__}: {_refusal(error)}): damaged, or holding code retriever never runs"


def _refusal(error: BaseException) -> str:
    """torch's reason in its own words, one line: the unpickler's error where it gives one, not the first line of its
    message (a half sentence in terminal bold: "you have two options, do those steps only if you trust ...")."""
    text = str(error)
    detail = text.split("WeightsUnpickler error:", 1)[1] if "WeightsUnpickler error:" in text else text
    detail = (detail.strip().splitlines() or [""])[0].split(". ")[0] or type(error).__name__
    return ("Weights only load failed: " if "Weights only load failed" in text else "") + detail
