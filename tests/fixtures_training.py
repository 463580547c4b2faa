"""For the training and pre-training tests: checkpoints whose pickled files run code when loaded (plant_pickles), and
the trainer's loss of a collated batch."""
from __future__ import annotations

from pathlib import Path

import torch


class _WritesMarker:
    """Unpickling this object writes a file: a stand-in for code hidden in a checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def plant_pickles(folder: Path, marker: Path) -> Path:
    """Replace every pickled state file a checkpoint may hold with one that writes ``marker`` when loaded."""
    live = folder.parent / "live-payload.pt"
    torch.save(_WritesMarker(marker), live)
    torch.load(live, weights_only=False)  # the payload works: an unsafe load would run it
    assert marker.exists()
    marker.unlink()
    live.unlink()
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_0.pth", "rng_state_1.pth",
                 "training_args.bin", "state.pt", "trainer_state.pt", "model.pt"):
        torch.save(_WritesMarker(marker), folder / name)
    return marker


def contrastive_batch_loss(queries, passages, batch: dict):
    """The training loss of a collated batch's embeddings (τ 0.05, judged positives masked), as the trainer
    takes it."""
    from retriever.training.loss import contrastive_loss, judged_positive_mask

    mask = judged_positive_mask(batch["judged_keys"], batch["passage_keys"], batch["targets"])
    return contrastive_loss(queries, passages, batch["targets"], 0.05, mask)
