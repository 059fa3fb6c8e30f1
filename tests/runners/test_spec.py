"""Specs: TOML loading, presets, typed --set overrides, refusals of bad keys, TOML round trip."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logstat.runners.presets import GPT2_PRESETS, gpt2_preset
from logstat.runners.spec import (
    SPECS_DIR,
    SpecError,
    load_spec,
    spec_from_dict,
    spec_to_toml,
)

SHIPPED = sorted(p.stem for p in SPECS_DIR.glob("*.toml"))


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


MINIMAL = """
name = "m"
stack = "ddp-powersgd"
steps = 3
[model]
hidden_size = 64
num_layers = 2
num_heads = 2
[batch]
micro = 2
gas = 4
[cluster]
nodes = 1
gpus_per_node = 2
"""


def test_shipped_specs_are_the_three_stacks_at_52b_and_tiny():
    assert SHIPPED == [
        "gpt2-52b-ddp-powersgd",
        "gpt2-52b-hf-zero3",
        "gpt2-52b-megatron-ds",
        "gpt2-tiny-ddp-powersgd",
        "gpt2-tiny-hf-zero3",
        "gpt2-tiny-megatron-ds",
    ]


def test_52b_megatron_spec_is_the_seed_benchmark():
    spec = load_spec("gpt2-52b-megatron-ds")
    # DESIGN.md: 52 -> hidden 8192, layers 64; 16 nodes x 4 GPUs, TP 4, PP 16, DP 1, mbs 4, 256 chunks, gbs 1024.
    assert (spec.model.hidden_size, spec.model.num_layers, spec.model.num_heads) == (8192, 64, 32)
    assert (spec.model.seq_len, spec.model.vocab_size) == (1024, 50257)
    assert (spec.cluster.nodes, spec.cluster.gpus_per_node, spec.world_size) == (16, 4, 64)
    assert (spec.parallel.tp, spec.parallel.pp, spec.dp) == (4, 16, 1)
    assert (spec.batch.micro, spec.batch.gas, spec.batch.global_batch) == (4, 256, 1024)
    assert spec.train.precision == "fp16" and spec.train.activation_checkpointing


def test_presets_are_the_design_table():
    assert len(GPT2_PRESETS) == 15
    assert (gpt2_preset(7).hidden_size, gpt2_preset(7).num_layers) == (4096, 36)
    assert (gpt2_preset(206).hidden_size, gpt2_preset(206).num_layers) == (16384, 64)
    with pytest.raises(KeyError, match="no GPT-2 preset of size 53B"):
        gpt2_preset(53)


def test_explicit_shape_and_derived_global_batch(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.name == "m"
    assert (spec.model.hidden_size, spec.model.num_layers) == (64, 2)
    assert spec.dp == 2
    assert spec.batch.global_batch == 2 * 4 * 2  # micro * gas * DP
    assert spec.cluster.job_name == "m"


def test_name_defaults_to_file_stem(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL.replace('name = "m"\n', ""), "my-exp.toml"))
    assert spec.name == "my-exp"


def test_preset_contradicting_shape_is_refused(tmp_path):
    text = MINIMAL.replace("hidden_size = 64", "preset = 52\nhidden_size = 64")
    with pytest.raises(
        SpecError, match=r"model.hidden_size=64 contradicts model.preset=52 \(hidden_size=8192\)"
    ):
        load_spec(write(tmp_path, text))


def test_unknown_preset_is_refused(tmp_path):
    text = MINIMAL.replace("hidden_size = 64\nnum_layers = 2", "preset = 53")
    with pytest.raises(SpecError, match="model.preset=53 is not a GPT-2 preset"):
        load_spec(write(tmp_path, text))


def test_missing_shape_is_refused(tmp_path):
    with pytest.raises(SpecError, match="give model.preset or both"):
        load_spec(write(tmp_path, MINIMAL.replace("num_layers = 2\n", "")))


def test_unknown_key_is_refused_with_the_valid_ones(tmp_path):
    with pytest.raises(SpecError, match=r"unknown key batch.mirco \(fields: gas, global_batch, micro\)"):
        load_spec(write(tmp_path, MINIMAL.replace("micro = 2", "mirco = 2")))


def test_every_unknown_key_is_reported_at_once(tmp_path):
    text = MINIMAL.replace("micro = 2", "mirco = 2\nglobal = 8").replace(
        'name = "m"', 'stepz = 3\nname = "m"'
    )
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    message = str(info.value)
    assert "unknown keys batch.global, batch.mirco (fields: gas, global_batch, micro)" in message
    assert "batch.micro is required" in message
    assert "unknown key 'stepz' (keys: " in message


def test_every_bad_override_is_reported_at_once():
    with pytest.raises(SpecError) as info:
        load_spec("gpt2-52b-megatron-ds", ["parallel.dp=2", "paralel.pp=2", "batch.micro=two"])
    message = str(info.value)
    assert "unknown field 'dp'" in message and "unknown section 'paralel'" in message
    assert "batch.micro must be an integer" in message


def test_bad_overrides_and_the_files_own_problems_are_reported_together(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, MINIMAL.replace("micro = 2", "mirco = 2")), ["parallel.tq=2"])
    message = str(info.value)
    assert "--set parallel.tq: unknown field 'tq'" in message
    assert "unknown key batch.mirco (fields: gas, global_batch, micro)" in message


def test_wrong_type_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"batch.micro='2' must be an integer"):
        load_spec(write(tmp_path, MINIMAL.replace("micro = 2", 'micro = "2"')))
    with pytest.raises(SpecError, match=r"batch.micro=True must be an integer"):
        load_spec(write(tmp_path, MINIMAL.replace("micro = 2", "micro = true")))


def test_invalid_toml_is_refused_not_crashed(tmp_path):
    with pytest.raises(SpecError, match="is not valid TOML"):
        load_spec(write(tmp_path, "name = [unclosed"))


def test_missing_spec_names_the_shipped_ones():
    with pytest.raises(SpecError, match="neither a file nor a shipped spec.*gpt2-tiny-hf-zero3"):
        load_spec("no-such-spec")


def test_overrides_are_typed_by_the_field():
    spec = load_spec(
        "gpt2-52b-megatron-ds",
        [
            "parallel.pp=8",
            "batch.micro=2",
            "batch.global_batch=none",
            "train.lr=3e-4",
            "train.activation_checkpointing=false",
            "cluster.partition=gpu_p13",
            "steps=7",
        ],
    )
    assert spec.parallel.pp == 8 and spec.batch.micro == 2
    assert spec.batch.global_batch == 2 * 256 * 2  # re-derived: DP = 64 / (4*8) = 2
    assert spec.train.lr == 3e-4 and isinstance(spec.train.lr, float)
    assert spec.train.activation_checkpointing is False
    assert spec.cluster.partition == "gpu_p13" and spec.steps == 7


def test_overrides_are_named_in_the_description_they_would_contradict():
    spec = load_spec("gpt2-52b-megatron-ds", ["parallel.pp=8", " batch.micro = 2"])
    assert spec.description == (
        "GPT-2 52B, Megatron-DeepSpeed 3D: TP 4, PP 16, DP 1 on 16 nodes x 4 V100-32GB"
        " (then --set parallel.pp=8, batch.micro = 2)"
    )
    assert load_spec("gpt2-52b-megatron-ds", ["description=mine"]).description == "mine"
    assert load_spec("gpt2-52b-megatron-ds").description.endswith("4 V100-32GB")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("parallel.pp=eight", r"--set parallel.pp='eight': parallel.pp must be an integer"),
        ("train.activation_checkpointing=maybe", r"must be true or false"),
        ("parallel.dp=2", r"unknown field 'dp' \(fields: pp, tp\)"),
        ("paralel.pp=2", r"unknown section 'paralel'"),
        ("parallel.pp", r"must look like section.field=value"),
    ],
)
def test_bad_overrides_are_refused(override, message):
    with pytest.raises(SpecError, match=message):
        load_spec("gpt2-52b-megatron-ds", [override])


HOSTILE = "a \"quoted\" 'x' $(touch pwned) `id` \\ back\nnew\tline \x7f é 😀"


@pytest.mark.parametrize("name", SHIPPED)
def test_toml_round_trip_of_shipped_specs(name):
    spec = load_spec(name)
    again = spec_from_dict(tomllib.loads(spec_to_toml(spec)))
    assert again == spec


def test_toml_round_trip_of_hostile_strings():
    spec = load_spec("gpt2-tiny-hf-zero3")
    spec = dataclasses.replace(
        spec,
        description=HOSTILE,
        cluster=dataclasses.replace(spec.cluster, job_name=HOSTILE),
        megatron=dataclasses.replace(spec.megatron, data_path=HOSTILE),
    )
    again = spec_from_dict(tomllib.loads(spec_to_toml(spec)))
    assert again.cluster.job_name == HOSTILE and again.megatron.data_path == HOSTILE
    assert again == spec


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_any_string_survives_the_toml_round_trip(text):
    spec = load_spec("gpt2-tiny-hf-zero3")
    spec = dataclasses.replace(
        spec, description=text, megatron=dataclasses.replace(spec.megatron, data_path=text)
    )
    assert spec_from_dict(tomllib.loads(spec_to_toml(spec))) == spec
