"""fairseq's progress records, on the fixtures in its shapes (fixtures/fairseq/); expected numbers are read
off the logs' own text here."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import FIXTURES
from tests.parsers.feeding import first_run as read

JSON_LOG = FIXTURES / "fairseq" / "wt103_lm_json-9201.out"
SIMPLE_LOG = FIXTURES / "fairseq" / "cc100_simple-9202.out"


def json_records(text: str) -> list[dict]:
    return [json.loads(body) for body in re.findall(r"\| train_inner \| (\{.*\})$", text, re.MULTILINE)]


def simple_records(text: str) -> list[dict]:
    bodies = re.findall(r"\| train_inner \| epoch \d+: +\d+ / \d+ (.*)$", text, re.MULTILINE)
    return [dict(field.split("=") for field in body.split(", ")) for body in bodies]


@pytest.mark.parametrize(("path", "records"), [(JSON_LOG, json_records), (SIMPLE_LOG, simple_records)])
def test_each_train_inner_record_is_its_updates_row(path, records):
    expected = [
        (
            int(record["num_updates"]),
            float(record["loss"]),
            float(record["lr"]),
            float(record["gnorm"]),
            float(record["loss_scale"]),
            1000 / float(record["ups"]),
            float(record["wps"]),
        )
        for record in records(path.read_text(encoding="utf-8"))
    ]
    row, iterations = read(path)
    columns = ("iteration", "loss", "lr", "grad_norm", "loss_scale", "elapsed_ms", "tokens_per_sec")
    assert iterations.select(columns).rows() == expected
    assert row["family"] == "fairseq" and set(iterations["family"]) == {"fairseq"}


def test_the_config_the_world_and_the_end():
    text = JSON_LOG.read_text(encoding="utf-8")
    row, _ = read(JSON_LOG)
    assert row["train_iters"] == int(re.search(r"'max_update': (\d+)", text)[1])
    assert row["gpus"] == int(re.search(r"training on (\d+) devices", text)[1])
    assert row["seq_len"] == int(re.search(r"'tokens_per_sample': (\d+)", text)[1])
    # "done training in 561.3 seconds": the run ended (no HF Trainer dicts in its JSON)
    assert row["status"] == "ok" and row["reason"].endswith(
        re.search(r"done training in .* seconds", text)[0]
    )
    assert row["families"] == ["fairseq"]


def test_metaseqs_model_parallel_size_is_the_tensor_parallelism(tmp_path):
    # metaseq's common config (OPT's logbook): Megatron's tensor parallelism under its own name
    config = (
        "2022-01-06 19:44:05 | INFO | metaseq_cli.train | {'_name': None, 'common': {'_name': None, "
        "'model_parallel_size': 8, 'log_format': 'json'}, 'distributed_training': {'_name': None, "
        "'distributed_world_size': 992}, 'optimization': {'max_update': 150000}}"
    )
    log = tmp_path / "train.4011822.log"
    log.write_text(config + "\n", encoding="utf-8")
    row, _ = read(log)
    assert (row["tp"], row["gpus"], row["train_iters"]) == (8, 992, 150000)
    assert row["provenance"]["tp"] == "fairseq:1"


def test_a_recovered_oom_is_a_warning_and_the_time_limit_ended_the_run():
    text = SIMPLE_LOG.read_text(encoding="utf-8")
    row, _ = read(SIMPLE_LOG)
    assert row["status"] == "timeout" and "TIME LIMIT" in row["reason"]
    assert not any("out of memory" in line for line in row["consequences"])
    assert (row["gpus"], row["train_iters"]) == (16, int(re.search(r"--max-update (\d+)", text)[1]))
