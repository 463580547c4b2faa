"""Under torchrun (two gloo processes on the CPU), what one launch must refuse or lay out differently from one
process: processes started with other settings, a step the data cannot fill, a short last step (Accelerate filled
it with repeats of the epoch's first examples), and a resume whose steps another process count lays out otherwise.
Also that each process encodes a share of the dev documents. One launch runs every case (starting two processes costs
more than these tiny trainings)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixtures_corpora import TINY_DOCS, write_jsonl
from fixtures_models import make_tiny_bert
from retriever.training.dev import evaluate_dev, load_dev_set
from retriever.training.dual_encoder import DualEncoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")
ENVIRONMENT = {**os.environ, "OMP_NUM_THREADS": "1"}
# each process runs the cases in order, rank-specific settings applied, and writes what each one ended with
CASES_SCRIPT = """
import json, os, sys
from retriever.errors import RetrieverError
from retriever.pretraining import PretrainConfig, pretrain
from retriever.encoder import Encoder
from retriever.training import TrainConfig, train
rank, results, encoded = os.environ["RANK"], [], [0, 0]
encode_passages, encode_queries = Encoder.encode_passages, Encoder.encode_queries
def counted_passages(self, documents, *args, **kwargs):  # only a dev evaluation encodes with an Encoder
    encoded[0] += len(documents)
    return encode_passages(self, documents, *args, **kwargs)
def counted_queries(self, texts, *args, **kwargs):
    encoded[1] += len(texts)
    return encode_queries(self, texts, *args, **kwargs)
Encoder.encode_passages, Encoder.encode_queries = counted_passages, counted_queries
def unwritable(self, *args, **kwargs):
    raise RetrieverError("cannot write the model: no space left on device")
for kind, settings in json.loads(sys.argv[1]):
    settings.update(settings.pop("per_rank", {}).get(rank, {}))
    encoded[:] = [0, 0]
    if kind == "train-unwritable" and rank == "0":  # the only process that writes the model: the last case
        from retriever.training.dual_encoder import DualEncoder
        DualEncoder.save = unwritable
    try:
        run = pretrain(PretrainConfig(**settings)) if kind == "pretrain" else train(TrainConfig(**settings))
        results.append({"steps": run.steps, "history": getattr(run, "history", []), "dev_passages": encoded[0],
                        "dev_queries": encoded[1]})
    except RetrieverError as error:
        results.append({"error": str(error)})
open(sys.argv[2] + rank, "w").write(json.dumps(results))
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A BEIR folder whose splits hold 8, 7 and 3 judged queries, and a one-layer BERT."""
    root = tmp_path_factory.mktemp("torchrun-layout")
    (root / "beir" / "qrels").mkdir(parents=True)
    write_jsonl(root / "beir" / "corpus.jsonl", [{"_id": i, "title": t, "text": x} for i, t, x in TINY_DOCS])
    write_jsonl(root / "beir" / "queries.jsonl", [{"_id": f"q{i}", "text": f"{t.lower()} {x.split()[-1]}"}
                                                  for i, (_, t, x) in enumerate(TINY_DOCS)])
    for split, count in ("eight", 8), ("seven", 7), ("three", 3):
        lines = "".join(f"q{i}\td{i + 1}\t1\n" for i in range(count))
        (root / "beir" / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    make_tiny_bert(root / "bert", layers=1)
    return root


def train_settings(work: Path, output: str, **extra) -> dict:
    return dict(dataset=str(work / "beir"), model=str(work / "bert"), output=str(work / "runs" / output),
                learning_rate=1e-3, device="cpu", dtype="fp32", progress=False,
                encoder={"passage_max_length": 32, "query_max_length": 16}, **extra)


def stopped_after_its_first_checkpoint(settings: dict) -> None:
    """A one-process run of ``settings``, run here, left as a kill after its first complete checkpoint leaves it: no
    model, no record of the finished run, no later checkpoint (a process of its own, killed, cost seconds of imports
    and a wait for the checkpoint)."""
    from retriever.training import TrainConfig, stack, train

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(stack.StackTrainer, "finish", lambda self, write_model, result: None)
            train(TrainConfig(**settings))
    finally:
        torch.set_num_threads(threads)
    checkpoints = sorted((Path(settings["output"]) / "checkpoints").glob("checkpoint-*"),
                         key=lambda folder: int(folder.name.split("-")[1]))
    assert (checkpoints[0] / "run.json").is_file() and len(checkpoints) > 1, checkpoints
    for later in checkpoints[1:]:
        shutil.rmtree(later)


@pytest.fixture(scope="module")
def results(work: Path) -> tuple[list[dict], list[dict]]:
    resumed = train_settings(work, "resumed", split="seven", epochs=3, batch_size=4, save_steps=1)
    stopped_after_its_first_checkpoint(resumed)  # one process: 2 steps an epoch (4 + 3 queries), 6 in all
    cases = [("train", train_settings(work, "other-rate", split="eight", max_steps=2, batch_size=4,
                                      per_rank={"1": {"learning_rate": 1e-2}})),
             ("train", train_settings(work, "other-data", split="eight", max_steps=2, batch_size=4,
                                      per_rank={"1": {"split": "seven"}})),
             ("train", train_settings(work, "too-few", split="three", epochs=1, batch_size=8)),
             ("train", train_settings(work, "short-last", split="seven", epochs=2, batch_size=4)),
             ("train", resumed),
             ("pretrain", dict(corpus=str(work / "beir"), model=str(work / "bert"), output=str(work / "runs" / "pre"),
                               max_length=16, batch_size=8, epochs=1, device="cpu", dtype="fp32", progress=False)),
             ("train", train_settings(work, "other-save-steps", split="eight", max_steps=2, batch_size=4, save_steps=1,
                                      per_rank={"1": {"save_steps": 2}})),
             ("train", {**train_settings(work, "other-dtype", split="eight", max_steps=2, batch_size=4),
                        "per_rank": {"1": {"dtype": "bf16"}}}),
             ("train", train_settings(work, "dev", split="eight", max_steps=2, batch_size=4, dev_split="three")),
             ("train-unwritable", train_settings(work, "unwritable", split="eight", max_steps=2, batch_size=4))]
    script = work / "cases.py"
    script.write_text(CASES_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
               json.dumps(cases), str(work / "result-")]
    finished = subprocess.run(command, capture_output=True, text=True, env=ENVIRONMENT, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    return tuple(json.loads((work / f"result-{rank}").read_text()) for rank in (0, 1))


def test_a_process_started_with_another_setting_or_data_is_refused_by_every_process(results):
    for rank_results in results:  # both stop, with the same line (neither trains on)
        other_rate, other_data = rank_results[0], rank_results[1]
        assert other_rate["error"].startswith("process 1 of the launch runs another training than process 0 "
                                              "(learning_rate 0.001 in process 0, 0.01 in 1)"), other_rate
        assert "fingerprint of the data files and start model" in other_data["error"], other_data
    assert results[0][:2] == results[1][:2]


def test_processes_started_with_another_checkpoint_interval_or_precision_are_refused(results):
    """Checkpoints are saved by every process together (a barrier), so another --save-steps in one process made the
    launch wait for ever; another --dtype (or an auto one resolved otherwise on another node) trained on, averaging
    a bf16 replica's gradients into the fp32 model."""
    for rank_results in results:
        other_interval, other_precision = rank_results[6], rank_results[7]
        assert other_interval["error"].startswith("process 1 of the launch runs another training than process 0 "
                                                  "(save_steps 1 in process 0, 2 in 1)"), other_interval
        assert "(dtype 'fp32' in process 0, 'bf16' in 1)" in other_precision["error"], other_precision


def test_too_few_queries_for_a_step_are_refused_and_a_short_last_step_is_left_out(results):
    for rank_results in results:
        assert rank_results[2]["error"].startswith("3 training queries do not fill one step of 8 over 2 processes")
        assert rank_results[3]["steps"] == 2  # 7 queries in steps of 4: one full step an epoch, not a padded one
        assert rank_results[5]["steps"] == 1  # 12 blocks in steps of 8: the same in pre-training


def test_a_resume_laid_out_in_other_steps_by_another_process_count_is_refused(results):
    for rank_results in results:
        assert "the run was laid out in 6 steps and this one, over 2 processes, in 3" in rank_results[4]["error"]


def test_every_process_encodes_a_share_of_the_dev_documents_for_the_scores_of_one(work, results):
    """The first process encoded every dev document while the others waited at the next collective, so an evaluation
    longer than --ddp-timeout failed the run as if a process had hung; then it still encoded and searched every dev
    query alone. The scores must stay one process's."""
    dev = load_dev_set(work / "beir", "three")
    model = DualEncoder.from_pretrained(str(work / "bert"), passage_max_length=32, query_max_length=16)
    alone = evaluate_dev(model, dev, torch.device("cpu"), "fp32", progress=False)
    evaluations = len(results[0][8]["history"])  # before training and at the end of the epoch
    passages = [rank_results[8]["dev_passages"] for rank_results in results]
    queries = [rank_results[8]["dev_queries"] for rank_results in results]
    assert evaluations == 2 and passages == [len(dev.documents) // 2 * evaluations] * 2, passages
    assert queries == [1 * evaluations, 2 * evaluations], queries  # 3 dev queries: 1 and 2
    for rank_results in results:
        before = rank_results[8]["history"][0]
        assert before["step"] == 0 and {key: before[key] for key in alone} == pytest.approx(alone, abs=1e-6)
        assert rank_results[8]["history"] == results[0][8]["history"]


def test_an_error_of_the_first_process_alone_is_the_line_every_process_stops_with(results):
    """Only the first process writes the model; stopped there (a full disk), it left the others to find it gone, and
    they said 'another training process died …; rerun the same command to resume': two error lines, one misleading."""
    assert [rank_results[9] for rank_results in results] == [
        {"error": "cannot write the model: no space left on device"}] * 2
