"""GradCache: chunked embeddings whose backward recomputes each chunk give the gradients of the whole batch in
one graph, with dropout's masks replayed."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from fixtures_training import contrastive_batch_loss
from retriever.training.data import Collator, epoch_groups, load_beir_examples
from retriever.training.dual_encoder import DualEncoder
from retriever.training.gradcache import cached_embeddings

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gradients(model: DualEncoder) -> dict[str, torch.Tensor]:
    return {f"{i}.{name}": p.grad.clone() for i, tower in enumerate(model.towers())
            for name, p in tower.named_parameters() if p.grad is not None}


def hard_negative_batch(model: DualEncoder, train_beir: Path):
    examples = load_beir_examples(train_beir, "train")
    others = tuple(e.positives[0] for e in load_beir_examples(train_beir, "test"))
    with_negatives = [dataclasses.replace(e, negatives=others) for e in examples]
    return Collator(model.tokenizer, model.settings)(epoch_groups(with_negatives, 0, seed=1, group_size=3))


def plain_backward(model: DualEncoder, batch: dict) -> float:
    """The whole batch in one graph: the reference GradCache must match."""
    loss = contrastive_batch_loss(*model(query=batch["query"], passage=batch["passage"]), batch)
    loss.backward()
    return loss.item()


def grad_cache_backward(model: DualEncoder, batch: dict, chunk_size: int) -> float:
    queries = cached_embeddings(lambda chunk: model(query=chunk)[0], batch["query"], chunk_size)
    passages = cached_embeddings(lambda chunk: model(passage=chunk)[1], batch["passage"], chunk_size)
    loss = contrastive_batch_loss(queries, passages, batch)
    loss.backward()
    return loss.item()


@pytest.mark.parametrize("towers", ["shared", "untied"])
def test_grad_cache_gives_the_plain_gradients(tiny_model_dir, train_beir, towers):
    model = DualEncoder.from_pretrained(str(tiny_model_dir), towers=towers, passage_max_length=32)
    batch = hard_negative_batch(model, train_beir)  # 8 queries x 3 passages
    model.eval()  # dropout off: chunks of 3 cannot draw the masks of one full batch
    plain_loss = plain_backward(model, batch)
    plain = gradients(model)
    model.zero_grad()
    cached_loss = grad_cache_backward(model, batch, chunk_size=3)
    assert cached_loss == pytest.approx(plain_loss, rel=1e-5)
    cached = gradients(model)
    assert plain.keys() == cached.keys() and len(plain) > 10
    for name in plain:
        torch.testing.assert_close(cached[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)


def test_grad_cache_replays_dropout(tiny_model_dir, train_beir):
    """With dropout on, the second pass must reuse the first pass's masks (else gradients are wrong)."""
    model = DualEncoder.from_pretrained(str(tiny_model_dir), passage_max_length=32)
    batch = hard_negative_batch(model, train_beir)
    model.train()
    torch.manual_seed(3)
    plain_backward(model, batch)
    plain, plain_rng = gradients(model), torch.get_rng_state()
    model.zero_grad()
    torch.manual_seed(3)
    grad_cache_backward(model, batch, chunk_size=64)
    assert torch.equal(torch.get_rng_state(), plain_rng)
    for name, gradient in gradients(model).items():
        torch.testing.assert_close(gradient, plain[name], rtol=1e-4, atol=1e-6, msg=name)
