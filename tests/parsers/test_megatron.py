"""The Megatron family on real lines (fixtures/bigscience, fixtures/megatron)."""

import json

import polars as pl
import pytest
from logstat.parsers import megatron
from logstat.parsers.base import RunBuilder

from logstat.api import load_runs
from tests.parsers.feeding import feed_each, feed_lines

# meg_gpt2_perf_n16.out line 341 and 342
ITERATION_1 = (
    " iteration        1/    1000 | consumed samples:         1024 | elapsed time per iteration (ms): 155483.8 |"
    " learning rate: 0.000E+00 | global batch size:  1024 | loss scale: 4294967296.0 |"
    " number of skipped iterations:   1 | number of nan iterations:   0 |"
)
TIMERS_1 = (
    "time (ms) | forward-compute: 32054.16 | forward-recv: 19581.85 | backward-compute: 87380.53 | backward-send: 2.90"
    " | backward-send-forward-recv: 11878.08 | backward-params-all-reduce: 26.06 | backward-embedding-all-reduce: 4181.82"
    " | optimizer-copy-to-main-grad: 8.18 | optimizer-unscale-and-check-inf: 333.72 | optimizer: 342.01 | batch-generator: 182.63"
)
# meg_ds_3d_gpt2_perf_n16-ds-on.out line 901 (lm-loss, grad norm, num zeros)
DS_ITERATION = (
    " iteration        1/    1000 | consumed samples:         1024 | elapsed time per iteration (ms): 159778.9 |"
    " learning rate: 1.875E-05 | global batch size:  1024 | lm-loss: 1.244238E+01 | loss scale: -1.0 |"
    " grad norm: 0.000 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


def feed(*lines: str) -> RunBuilder:
    return feed_lines(megatron.FAMILY, lines)


def test_a_sequence_length_curriculum_is_a_metric_of_each_step():
    # Megatron-DeepSpeed's training_log: " curriculum seqlen: {:5d} |" (curriculum learning), then
    # " actual seqlen: {:5d} |"; BigScience's fork prints the first only
    run = feed(
        " iteration       10/  300000 | consumed samples:         5120 | elapsed time per iteration (ms): 1144.0 |"
        " global batch size:   512 | lm loss: 9.500000E+00 | curriculum seqlen:    72 | actual seqlen:    72 |"
        " number of skipped iterations:   0 | number of nan iterations:   0 |",
        " iteration       20/  300000 | consumed samples:        10240 | elapsed time per iteration (ms): 760.0 |"
        " global batch size:   512 | lm loss: 9.400000E+00 | curriculum seqlen:    80 |",
    )
    assert run.iteration_frame.select("iteration", "seq_len").rows() == [(10, 72), (20, 80)]


@pytest.mark.parametrize(
    "field",
    # Megatron-DeepSpeed's training_log (BigScience's fork and Microsoft's); upstream Megatron-LM prints none
    [
        "consumed tokens:    4194304 |",
        "curriculum seqlen:    72 |",
        "tokens per gpu per second (tgs): 3201.5 |",
    ],
)
def test_megatron_deepspeeds_own_iteration_fields_are_a_run_on_deepspeed(tmp_path, field):
    line = (
        " iteration       10/  300000 | consumed samples:         5120 | elapsed time per iteration (ms): 1144.0 |"
        " global batch size:   512 | lm loss: 9.500000E+00 |"
    )
    (tmp_path / "ds.log").write_text(f"{line} {field}\n")
    (tmp_path / "lm.log").write_text(f"{line} number of skipped iterations:   0 |\n")
    rows = load_runs([tmp_path]).runs.sort("path").select("family", "families").rows()
    assert rows == [("megatron-deepspeed", ["deepspeed", "megatron"]), ("megatron", ["megatron"])]


def test_iteration_line():
    run = feed(ITERATION_1)
    assert run.iterations[1] == {
        "iteration": 1,
        "launch": 0,
        "family": "megatron",
        "line": 1,
        "elapsed_ms": 155483.8,
        "lr": 0.0,
        "loss_scale": 4294967296.0,
        "skipped": 1,
        "nan": 0,
        "global_batch_size": 1024,
    }
    assert run.facts["global_batch_size"] == 1024 and run.facts["train_iters"] == 1000


def test_lm_dash_loss_and_grad_norm():
    row = feed(DS_ITERATION).iterations[1]
    assert row["loss"] == 12.44238 and row["grad_norm"] == 0.0 and row["lr"] == 1.875e-05


# BigScience's Megatron-DeepSpeed (BLOOM, tr11) training_log: "elapsed time per iteration (s): {:.2f}",
# "samples per second: {:.3f}", "TFLOPs: {:.2f}"
BLOOM_ITERATION = (
    " iteration     2000/  115311 | consumed samples:      2252800 | consumed tokens:   4613734400 |"
    " elapsed time per iteration (s): 105.22 | learning rate: 6.000E-05 | global batch size:  2048 |"
    " lm loss: 3.073468E+00 | grad norm: 0.423 | num zeros: 0.0 | number of skipped iterations:   0 |"
    " number of nan iterations:   0 | samples per second: 19.465 | TFLOPs: 149.57 |"
)


def test_an_iteration_time_in_seconds_is_read_in_ms():
    # the layout way too: five records teach a layout, the fifth is read through it
    run = feed(*(BLOOM_ITERATION.replace("2000/", f"{2000 + n}/") for n in range(5)))
    for step in range(2000, 2005):
        row = run.iterations[step]
        assert row["elapsed_ms"] == 105.22 * 1000.0 and "elapsed_s" not in row
        assert row["samples_per_sec"] == 19.465 and row["logged_tflops_per_gpu"] == 149.57


def test_timers_belong_to_the_step_logged_before():
    run = feed(ITERATION_1, TIMERS_1)
    timers = {t["timer"]: (t["iteration"], t["ms"]) for t in run.timers}
    assert timers["forward-compute"] == (1, 32054.16)
    assert timers["batch-generator"] == (1, 182.63)
    assert len(timers) == 11


def test_megatron_core_timer_blocks_give_the_slowest_ranks_time_of_the_step_before():
    # megatron/core/timers.py: (name + " ").ljust(48, "."), then "(min, max)" or the one time of the option
    minmax = ["(min, max) time across ranks (ms):"]
    minmax += [f"    {(name + ' ').ljust(48, '.')}: ({low:.2f}, {high:.2f})" for name, low, high in (
        ("forward-backward", 8900.0, 8920.0), ("optimizer", 110.5, 112.7))]  # fmt: skip
    only_max = ["max time across ranks (ms):", f"    {'forward-backward '.ljust(48, '.')}: 59000.00"]
    second = ITERATION_1.replace("1/", "2/", 1)
    run = feed(
        ITERATION_1, *minmax, "[Rank 0] (after 1 iterations) memory (MB) | allocated: 1.0", second, *only_max
    )
    got = sorted((t["iteration"], t["timer"], t["ms"], t["line"]) for t in run.timers)
    assert got == [
        (1, "forward-backward", 8920.0, 3),
        (1, "optimizer", 112.7, 4),
        (2, "forward-backward", 59000.0, 8),
    ]
    # a timer line with no block's heading before it is no timer
    assert feed(ITERATION_1, minmax[1]).timers == []


def test_timing_log_option_all_gives_the_slowest_rank_of_each_timer():
    # megatron/core/timers.py _get_all_ranks_time_string: "times across ranks (ms):", then per timer
    # "\n  {name}:" and a "\n     rank {:2d}: {:.2f}" line per rank that timed it
    block = ["times across ranks (ms):"]
    for name, times in (("forward-backward", (460.0, 471.25)), ("optimizer", (12.5, 11.0))):
        block += [f"  {name}:", *(f"     rank {rank:2d}: {ms:.2f}" for rank, ms in enumerate(times))]
    second = ITERATION_1.replace("1/", "2/", 1)
    run = feed(ITERATION_1, *block, second, *block[:4])
    got = sorted((t["iteration"], t["timer"], t["ms"], t["line"]) for t in run.timers)
    assert got == [
        (1, "forward-backward", 471.25, 3),
        (1, "optimizer", 12.5, 6),
        (2, "forward-backward", 471.25, 11),
    ]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("time (ms)", []),  # the bare heading: no field, no call
        ("time (ms) | note: none", []),
        ("time (ms) | forward: 1 | backward: 2.5 | optimizer: nan", [("forward", 1.0), ("backward", 2.5)]),
        # an integer too long for a float is dropped alone, as _real drops it; the others are kept
        (
            "time (ms) | forward: 1 | huge: " + "9" * 400 + " | backward: 2",
            [("forward", 1.0), ("backward", 2.0)],
        ),
    ],
)
def test_timer_lines_convert_each_field_as_real(line, expected):
    run = feed(ITERATION_1, line)
    got = [(t["timer"], t["ms"]) for t in run.timers]
    assert [(name, ms) for name, ms in got if ms == ms] == expected  # nan != nan: compared apart
    assert all(isinstance(ms, float) for _, ms in got)
    assert sum(ms != ms for _, ms in got) == ("nan" in line)


def test_glued_iterations_in_one_line():
    glued = ITERATION_1 + ITERATION_1.replace("1/    1000", "2/    1000").replace("155483.8", "129028.8")
    run = feed(glued)
    assert sorted(run.iterations) == [1, 2]
    assert run.iterations[2]["elapsed_ms"] == 129028.8


def test_memory_keeps_the_largest_rank():
    # meg_ds_3d_gpt2_perf_n16-ds-on.out lines 884 and 885
    run = feed(
        "[Rank 1] (after 1 iterations) memory (MB) | allocated: 12337.45654296875 | max allocated: 19961.072265625"
        " | reserved: 23288.0 | max reserved: 23288.0",
        "[Rank 61] (after 1 iterations) memory (MB) | allocated: 12923.83251953125 | max allocated: 18175.37841796875"
        " | reserved: 19286.0 | max reserved: 19286.0",
        # old format, meg_ds_zero_gpt2_perf_n16_nbs48_ms48.out
        "after 2 iterations memory (MB) | allocated: 10857.5625 | max allocated: 26118.2294921875 | reserved: 28234.0",
    )
    assert run.iterations[1]["mem_allocated_mb"] == 12923.83251953125
    assert run.iterations[1]["mem_max_allocated_mb"] == 19961.072265625
    assert run.iterations[2]["mem_max_allocated_mb"] == 26118.2294921875


def test_a_memory_record_glued_to_an_iteration_line_is_read():
    # two ranks writing at once: rank 8's memory record after the iteration line's last "|", or before it
    memory = "[Rank 8] (after 1 iterations) memory (MB) | allocated: 10000.0 | max allocated: 22000.0 |"
    run = feed(ITERATION_1 + memory)
    assert (run.iterations[1]["elapsed_ms"], run.iterations[1]["mem_max_allocated_mb"]) == (155483.8, 22000.0)
    run = feed(memory + ITERATION_1.replace("iteration        1/", "iteration        2/"))
    assert sorted(run.iterations) == [1, 2] and run.iterations[1]["mem_allocated_mb"] == 10000.0
    assert run.iterations[2]["elapsed_ms"] == 155483.8 and "mem_allocated_mb" not in run.iterations[2]


def test_too_long_steps_are_noted_in_a_frame_of_several_chunks():
    """The engine hands a kind frames of several chunks: polars 2.1's ``pl.format`` panicked on such a
    frame filtered to its too-long steps (a hostile log read with others); concatenation does not."""
    line = " iteration {}/ 5 | elapsed time per iteration (ms): 1.0 |"
    texts = [line.format(step) for step in range(1, 6)] + [line.format("1" * 40)] * 2
    frame = pl.DataFrame({"order": [n << 8 for n in range(7)], "text": texts})
    for cut in range(1, 7):
        notes = pl.concat(megatron.read_iterations(frame[:cut].vstack(frame[cut:]).lazy()).notes)
        assert (
            notes["message"].to_list()
            == [f"iteration={'1' * 40} does not fit a 64-bit integer; not recorded"] * 2
        )


@pytest.mark.parametrize("count", ["9007199254740993", "9223372036854775807"])
def test_counts_are_read_as_exact_integers(count):
    """Through a float, 2**53 + 1 lost its last digit and int64's largest made the whole read fail."""
    run = feed(
        f" iteration 1/ 5 | elapsed time per iteration (ms): 1.0 | global batch size: {count} |"
        f" number of skipped iterations: {count} |"
    )
    assert run.iterations[1]["skipped"] == int(count) and run.facts["global_batch_size"] == int(count)


def test_world_lines_new_and_old():
    run = feed(
        "using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel size: 16 "
    )
    assert {k: run.facts[k] for k in ("gpus", "dp", "tp", "pp")} == {"gpus": 64, "dp": 1, "tp": 4, "pp": 16}
    old = feed("using world size: 64 and model-parallel size: 4")
    assert {k: old.facts[k] for k in ("gpus", "dp", "tp", "pp")} == {"gpus": 64, "dp": 16, "tp": 4, "pp": 1}


def test_arguments_dump_matches_names_whole():
    run = feed(
        "------------------------ arguments ------------------------",
        "  checkpoint_activations .......................... True",
        "  checkpoint_num_layers ........................... 1",
        "  ffn_hidden_size ................................. 32768",
        "  fp16 ............................................ True",
        "  bf16 ............................................ False",
        "  hidden_size ..................................... 8192",
        "  num_layers ...................................... 64",
        "  num_layers_per_virtual_pipeline_stage ........... None",
        "  apply_residual_connection_post_layernorm  False",
        "-------------------- end of arguments ---------------------",
    )
    assert run.facts["hidden_size"] == 8192 and run.facts["ffn_hidden_size"] == 32768
    assert run.facts["num_layers"] == 64
    assert run.facts["activation_checkpointing"] is True and run.facts["precision"] == "fp16"
    assert run.provenance["num_layers"] == "megatron:8"


def test_a_dump_states_every_kept_argument_and_nothing_else():
    """Each ``ARG_FACTS`` argument of a dump is stated (the names that map to one fact: the one listed
    last wins), and an argument that is not kept states nothing, even one a kept name ends."""
    dump = [
        f"  {name} {'.' * (48 - len(name))} {7 + number}" for number, name in enumerate(megatron.ARG_FACTS)
    ]
    run = feed(
        "------------------------ arguments ------------------------",
        *dump,
        "  encoder_num_layers .............................. 99",
        "  checkpoint_num_layers ........................... 98",
        "-------------------- end of arguments ---------------------",
    )
    names = list(megatron.ARG_FACTS)
    expected = {
        fact: 7 + max(n for n, name in enumerate(names) if megatron.ARG_FACTS[name] == fact)
        for fact in set(megatron.ARG_FACTS.values())
    }
    assert {fact: run.facts[fact] for fact in expected} == expected
    assert 99 not in run.facts.values() and 98 not in run.facts.values()


def test_megatron_lms_2019_dump_opens_at_arguments_and_ends_before_the_vocabulary():
    # print_args then: "arguments:" alone, no end line; a run that failed before its first iteration
    run = feed(
        "using world size: 8 and model-parallel size: 4 ",
        "arguments:",
        "  batch_size ................... 16",
        "  seq_length ................... 1024",
        "  model_parallel_size .......... 4",
        "  train_iters .................. 500000",
        "> padded vocab (size: 50257) with 943 dummy tokens (new size: 51200)",
        "building GPT2 model ...",
    )
    facts = ("micro_batch_size", "seq_len", "tp", "train_iters")
    assert tuple(run.facts[fact] for fact in facts) == (16, 1024, 4, 500000)
    # the word in any other line opens nothing
    assert "seq_len" not in feed("Invalid arguments:", "  seq_length ..... 1024", "> padded vocab").facts


def test_a_dump_ended_by_an_iteration_line_states_its_arguments_after_that_line():
    """A dump that lost its end line states its facts as the iteration line ending it is read, after the
    line's own (as the Python code did), in every run read together: at one order, polars' unstable sort
    picked either."""
    log = [
        "---- arguments ----",
        "  train_iters ........ 2",
        "  global_batch_size ..... 3",
        " iteration 2/ 5 | elapsed time per iteration (ms): 1.0 | global batch size: 7 |",
    ]
    runs = feed_each(megatron.FAMILY, [log] * 100)
    assert {(run.facts["train_iters"], run.facts["global_batch_size"]) for run in runs} == {(2, 3)}
    assert {run.provenance["train_iters"] for run in runs} == {"megatron:2"}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["  recompute_granularity ........................... full"], True),
        (["  recompute_granularity ........................... selective"], False),
        (["  checkpoint_activations .......................... False"], False),
        (["  hidden_size ..................................... 8"], None),
    ],
)
def test_activation_checkpointing_from_args(lines, expected):
    run = feed("---- arguments ----", *lines, "---- end of arguments ----")
    assert run.facts.get("activation_checkpointing") is expected


def _dump(**arguments: object) -> RunBuilder:
    """A Megatron-LM arguments dump (``_print_args``: 48 columns of name and dots, sorted) of ``arguments``."""
    lines = sorted(f"  {name} {'.' * (48 - len(name))} {value}" for name, value in arguments.items())
    return feed(
        "------------------------ arguments ------------------------",
        *lines,
        "-------------------- end of arguments ---------------------",
    )


SHAPE_FACTS = ("num_query_groups", "kv_channels", "swiglu", "moe_topk", "moe_experts")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # Llama-3-8B: GQA with 8 groups of 128, SwiGLU, dense (num_experts None: its topk default is unused)
        (
            dict(
                group_query_attention=True,
                num_query_groups=8,
                kv_channels=128,
                swiglu=True,
                num_experts=None,
                moe_router_topk=2,
            ),
            dict(num_query_groups=8, kv_channels=128, swiglu=True, moe_topk=None, moe_experts=None),
        ),
        # Mixtral-like MoE: 8 experts, each token routed to 2
        (
            dict(
                group_query_attention=True,
                num_query_groups=8,
                kv_channels=128,
                swiglu=True,
                num_experts=8,
                moe_router_topk=2,
            ),
            dict(num_query_groups=8, kv_channels=128, swiglu=True, moe_topk=2, moe_experts=8),
        ),
        # GQA off: Megatron-LM prints its unused default of 1 query group
        (
            dict(
                group_query_attention=False,
                num_query_groups=1,
                kv_channels=128,
                swiglu=False,
                num_experts=None,
                moe_router_topk=2,
            ),
            dict(num_query_groups=None, kv_channels=128, swiglu=False, moe_topk=None, moe_experts=None),
        ),
        # Megatron-DeepSpeed's DeepSpeed-MoE option is a list (nargs='+'), [1] by default: not Megatron-LM's MoE
        (
            dict(num_experts="[1]", kv_channels=256),
            dict(num_query_groups=None, kv_channels=256, swiglu=None, moe_topk=None, moe_experts=None),
        ),
        # a 2021 dump: none of them but kv_channels (h/a)
        (
            dict(hidden_size=8192, kv_channels=256),
            dict(num_query_groups=None, kv_channels=256, swiglu=None, moe_topk=None, moe_experts=None),
        ),
        # Megatron-DeepSpeed's Llama-2-70B: 64 heads sharing 8 key/value heads (its --num-key-value-heads)
        (
            dict(num_attention_heads=64, num_key_value_heads=8, swiglu=True),
            dict(num_query_groups=8, kv_channels=None, swiglu=True, moe_topk=None, moe_experts=None),
        ),
        # Megatron-DeepSpeed without GQA: validate_args sets num_key_value_heads to the heads
        (
            dict(num_attention_heads=32, num_key_value_heads=32),
            dict(num_query_groups=None, kv_channels=None, swiglu=None, moe_topk=None, moe_experts=None),
        ),
        # nonsense values are no facts
        (
            dict(
                group_query_attention=True,
                num_query_groups=0,
                swiglu="maybe",
                num_experts=8,
                moe_router_topk="None",
            ),
            dict(num_query_groups=None, kv_channels=None, swiglu=None, moe_topk=None, moe_experts=8),
        ),
    ],
)
def test_gqa_swiglu_and_moe_facts_of_the_arguments_dump(arguments, expected):
    run = _dump(**arguments)
    assert {fact: run.facts.get(fact) for fact in SHAPE_FACTS} == expected
    if expected["num_query_groups"] is not None:
        # provenance: the line of the groups' argument, 1-based after the dump's title line
        name = "num_query_groups" if "num_query_groups" in arguments else "num_key_value_heads"
        line = 2 + sorted(arguments, key=str.lower).index(name)
        assert run.provenance["num_query_groups"] == f"megatron:{line}"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # Qwen2-57B-A14B-like: experts narrower than the dense FFN, and shared experts
        (
            dict(
                num_experts=64,
                moe_router_topk=8,
                moe_ffn_hidden_size=2560,
                moe_shared_expert_intermediate_size=20480,
            ),
            (8, 2560, 20480),
        ),
        # Mixtral-like: no shared experts (None), the experts' width printed as validate_args set it
        (
            dict(
                num_experts=8,
                moe_router_topk=2,
                moe_ffn_hidden_size=14336,
                moe_shared_expert_intermediate_size=None,
            ),
            (2, 14336, None),
        ),
        # a dense model prints its unused MoE defaults
        (dict(num_experts=None, moe_router_topk=2, moe_ffn_hidden_size=None), (None, None, None)),
    ],
)
def test_moe_expert_widths_of_the_arguments_dump(arguments, expected):
    run = _dump(**arguments)
    facts = ("moe_topk", "moe_ffn_hidden_size", "moe_shared_ffn_hidden_size")
    assert tuple(run.facts.get(fact) for fact in facts) == expected


@pytest.mark.parametrize(
    ("frequency", "layers", "moe_layers"),
    [
        (2, 32, 16),  # every other layer from the first: 0, 2, ..., 30
        (3, 32, 11),  # 0, 3, ..., 30
        ("[0, 0, 0, 1, 1, 1, 1, 1]", 8, 5),  # DeepSeek-V3's "([0]*3+[1]*58)" as the dump prints the list
        (1, 32, None),  # every layer: MoE's default
        ("[1, 1, 1, 1]", 4, None),
    ],
)
def test_moe_layers_of_the_arguments_dumps_layer_frequency(frequency, layers, moe_layers):
    run = _dump(num_experts=8, moe_router_topk=2, num_layers=layers, moe_layer_freq=frequency)
    assert run.facts.get("moe_layers") == moe_layers
    assert _dump(num_experts=None, num_layers=32, moe_layer_freq=2).facts.get("moe_layers") is None


def test_megatron_deepspeeds_moe_arguments():
    # its arguments.py: --num-experts a list ([1], its default, is dense), --topk, --expert-interval (every
    # k-th layer: numbers divisible by k)
    moe = _dump(num_experts="[64]", topk=1, expert_interval=2, num_layers=24).facts
    assert (moe["moe_experts"], moe["moe_topk"], moe["moe_layers"]) == (64, 1, 12)
    dense = _dump(num_experts="[1]", topk=1, expert_interval=2, num_layers=24).facts
    assert not {"moe_experts", "moe_topk", "moe_layers"} & dense.keys()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # the first 2 of each stage's 10 layers (4 stages) recompute their forward
        (dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=2), (True, 8)),
        # virtual stages of 5 layers: 2 of each of 8 chunks
        (
            dict(
                recompute_granularity="full",
                recompute_method="block",
                recompute_num_layers=2,
                num_layers_per_virtual_pipeline_stage=5,
            ),
            (True, 16),
        ),
        # the same virtual stages given as their count (--num-virtual-stages-per-pipeline-rank 2: its
        # num_layers_per_virtual_pipeline_stage None): 40 layers / (4 x 2) = chunks of 5, 2 of each of 8
        (
            dict(
                recompute_granularity="full",
                recompute_method="block",
                recompute_num_layers=2,
                num_layers_per_virtual_pipeline_stage=None,
                virtual_pipeline_model_parallel_size=2,
            ),
            (True, 16),
        ),
        # as many as a stage has, or the uniform method (chunks of N layers): all of them
        (dict(recompute_granularity="full", recompute_method="block", recompute_num_layers=10), (True, None)),
        (
            dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
            (True, None),
        ),
        # selective recomputation (attention only) is no full recomputation of a layer
        (
            dict(recompute_granularity="selective", recompute_method=None, recompute_num_layers=1),
            (False, None),
        ),
        # 2022's names
        (
            dict(
                checkpoint_activations=True,
                activations_checkpoint_method="block",
                activations_checkpoint_num_layers=3,
            ),
            (True, 12),
        ),
    ],
)
def test_recomputed_layers_of_the_arguments_dump(arguments, expected):
    run = _dump(num_layers=40, pipeline_model_parallel_size=4, **arguments)
    assert (run.facts.get("activation_checkpointing"), run.facts.get("recomputed_layers")) == expected


def test_misc_fact_lines():
    run = feed(
        "using torch.float16 for parameters ...",
        " > padded vocab (size: 50257) with 431 dummy tokens (new size: 50688)",
        "setting number of micro-batches to constant 256",
        ITERATION_1,
        "Effective Tera Flops per GPU: 41.94 and total parameters 52.005 B",
    )
    assert run.facts["precision"] == "fp16"
    assert (run.facts["vocab_size"], run.facts["padded_vocab_size"]) == (50257, 50688)
    assert run.facts["gas"] == 256 and run.facts["logged_model_size"] == 52.005
    assert run.iterations[1]["logged_tflops_per_gpu"] == 41.94
    # megatron.core's num_microbatches_calculator (NeMo 2 logs it through its logger)
    core = "[NeMo I 2024-12-03 10:00:00 num_microbatches_calculator:228] setting number of microbatches to constant 16"
    assert feed(core).facts["gas"] == 16


@pytest.mark.parametrize(
    "end",
    [
        "[after training is done] datetime: 2024-03-10 14:02:19 ",
        "[exiting program at iteration 5000] datetime: 2024-03-10 14:02:19 ",
    ],
)
def test_a_planned_end_completes_the_run(end):
    assert feed(ITERATION_1, end).completion[:2] == (end.strip(), 2)


def test_an_end_on_its_own_time_budget_is_a_timeout():
    # --exit-duration-in-mins spent: the checkpoint saved, the iterations not done (the next job resumes)
    end = "[exiting program after 1190.0371 minutes] datetime: 2024-03-10 14:02:19 "
    run = feed(ITERATION_1, end)
    assert (run.completion, run.failure) == (None, ("timeout", f"time budget spent: {end.strip()}", 2))


def test_an_end_on_sigterm_cancelled_the_run():
    # --exit-signal-handler saves a checkpoint and exits on a signal from outside: the iterations were not done
    end = "[exiting program after receiving SIGTERM.] datetime: 2024-03-10 14:02:19 "
    run = feed(ITERATION_1, end)
    assert (run.completion, run.failure) == (None, ("cancelled", end.strip(), 2))


@pytest.mark.parametrize(
    "switch",
    [  # BigScience's training.py: after a step, and before training (a queued job told not to start)
        "[Detected kill switch at /gpfswork/rech/six/commun/kill-switch-tr11-176B-exp1, exiting] datetime: "
        "2022-03-20 04:52:37 ",
        "[Detected kill switch at /gpfswork/rech/six/commun/kill-switch-tr11-176B-exp1. Exiting] datetime: "
        "2022-03-20 05:10:02 ",
    ],
)
def test_an_operators_kill_switch_cancelled_the_run(switch):
    run = feed(ITERATION_1, switch)
    assert (run.completion, run.failure) == (None, ("cancelled", switch.strip(), 2))


def test_an_end_on_sigterm_follows_from_slurms_time_limit_in_the_jobs_err(tmp_path):
    """Slurm signals the job at its time limit; Megatron's handler saves and exits. The reason is the
    time limit, and the handler's line is its consequence."""
    end = "[exiting program after receiving SIGTERM.] datetime: 2025-02-28 06:03:19 "
    limit = "slurmstepd: error: *** JOB 900512 ON gpu-c-003 CANCELLED AT 2025-02-28T06:02:19 DUE TO TIME LIMIT ***"
    (tmp_path / "slurm-900512.out").write_text(f"{ITERATION_1}\n{end}\n")
    (tmp_path / "slurm-900512.err").write_text(f"{limit}\n")
    row = load_runs([tmp_path]).runs.row(0, named=True)
    assert (row["status"], row["reason"]) == ("timeout", f"time limit: {limit}")
    assert row["consequences"] == [f"slurm-900512.out:2: {end.strip()}"]


def test_the_theoretical_memory_reports_total_parameters_is_the_logged_size():
    # Megatron-LM core's report_theoretical_memory, at the first logged step (Llama-3 8B, --log-throughput)
    lines = (
        "Number of parameters in transformer layers in billions:  6.98",
        "Number of parameters in embedding layers in billions: 1.05",
        "Total number of parameters in billions: 8.03",
        "Number of parameters in most loaded shard in billions: 8.0301",
    )
    assert feed(ITERATION_1, *lines).facts["logged_model_size"] == 8.03


@pytest.mark.parametrize(
    "junk",
    ["", "iteration", " iteration x/ y |", "time (ms)", "memory (MB) |", "\x00\xff", "using world size: x"],
)
def test_garbage_never_raises(junk):
    feed(junk)


#: GPT-NeoX 20B's configuration (configs/20B.yml, on 96 GPUs), as NeoXArgs.print() dumps it
NEOX_ARGS = {
    "attention_config": "['global', 'global']",
    "bf16": None,
    "checkpoint_activations": True,
    "fp16": "{'fp16': True, 'enabled': True, 'loss_scale': 0}",
    "global_num_gpus": 96,
    "gradient_accumulation_steps": 32,
    "hidden_size": 6144,
    "model_parallel_size": 2,
    "num_attention_heads": 64,
    "num_layers": 44,
    "padded_vocab_size": 50432,
    "pipe_parallel_size": 4,
    "precision": "fp16",
    "seq_length": 2048,
    "train_batch_size": 1536,
    "train_iters": 150000,
    "train_micro_batch_size_per_gpu": 4,
}


def _neox_dump(args: dict) -> list[str]:
    """NeoXArgs.print(): ``  name ..... value`` padded with dots to 64 characters, then default/updated."""
    lines = ["-------------------- arguments --------------------"]
    for name, value in args.items():
        text = "  {} {} {}".format(name, "." * (32 - len(name)), value)
        lines.append(text + "." * (64 - len(text)) + ("default" if value is None else "updated"))
    return [*lines, "---------------- end of arguments ----------------"]


def _neox_flops(readable: str, seconds: float, a: dict) -> tuple[float, str]:
    """GPT-NeoX's get_flops (its flops per GPU of a step) and human_readable_flops' text of it."""
    h, layers, s, v = a["hidden_size"], a["num_layers"], a["seq_length"], a["padded_vocab_size"]
    factor = 4 if a["checkpoint_activations"] else 3
    flops = (
        24 * factor * a["train_batch_size"] * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))
    )
    per_gpu = flops / (seconds * a["global_num_gpus"])
    return per_gpu, readable % (per_gpu / 1e12)


def test_gpt_neox_dump_and_iteration_lines_are_read(tmp_path):
    # NeoXArgs.configure_distributed_args() prints Megatron v1's world line, but NeoX has pipelines: it
    # states no pipeline size, and the data-parallel size is derived from the dump's
    world = "NeoXArgs.configure_distributed_args() using world size: 96 and model-parallel size: 2 "
    lines = [*_neox_dump(NEOX_ARGS), world]
    for step, seconds in ((10, 38.1), (20, 36.8), (30, 36.7)):
        _, flops = _neox_flops("%3.1fTFLOPS", seconds, NEOX_ARGS)
        lines.append(
            f" samples/sec: {1536 / seconds:.3f} | iteration {step:8d}/{150000:8d} | elapsed time per iteration"
            f" (ms): {seconds * 1000:.1f} | learning rate: 9.700E-07 | approx flops per GPU: {flops} | lm_loss:"
            " 1.116477E+01 | loss scale: 4096.0 | number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    run = feed(*lines)
    facts = {
        name: run.facts.get(name) for name in ("gpus", "tp", "pp", "micro_batch_size", "global_batch_size")
    }
    assert facts == {"gpus": 96, "tp": 2, "pp": 4, "micro_batch_size": 4, "global_batch_size": 1536}
    assert "dp" not in run.facts  # derived when the run is concluded
    assert (run.facts["gas"], run.facts["precision"], run.facts["activation_checkpointing"]) == (
        32,
        "fp16",
        True,
    )
    assert (run.facts["hidden_size"], run.facts["num_layers"], run.facts["seq_len"]) == (6144, 44, 2048)
    row = run.iterations[20]
    assert (row["samples_per_sec"], row["loss"], row["elapsed_ms"]) == (41.739, 11.16477, 36800.0)
    assert row["logged_tflops_per_gpu"] == round(_neox_flops("%3.1f", 36.8, NEOX_ARGS)[0] / 1e12, 1)
    # NeoX counts as Megatron-LM's eq. 3 with the recomputed forward: logstat's count agrees, no warning
    (tmp_path / "neox.out").write_text("\n".join(lines) + "\n")
    summary = load_runs([tmp_path / "neox.out"]).runs.row(0, named=True)
    assert (summary["pp"], summary["dp"]) == (4, 12)
    assert summary["tflops_per_gpu_megatron"] == pytest.approx(_neox_flops("%f", 36.75, NEOX_ARGS)[0] / 1e12)
    assert summary["warnings"] == []


def test_gpt_neox_no_weight_tying_counts_the_output_layer_apart(tmp_path):
    # 20B.yml trains with "no-weight-tying": its output layer is a second V x h matrix
    (tmp_path / "neox.out").write_text("\n".join(_neox_dump(NEOX_ARGS | {"no_weight_tying": True})) + "\n")
    row = load_runs([tmp_path / "neox.out"]).runs.row(0, named=True)
    h, layers, v, s = 6144, 44, 50432, 2048
    assert row["untied_embeddings"] is True
    assert row["model_size_b"] * 1e9 == layers * (12 * h * h + 13 * h) + 2 * v * h + s * h + 2 * h
    # GPT-NeoX-20B's published count, 20,554,567,680 (its rotary embedding has no s x h table)
    assert row["model_size_b"] == pytest.approx(20.554567680, rel=1e-3)


@pytest.mark.parametrize(
    ("per_gpu", "text"), [(9.53e13, "95.3TFLOPS"), (8.124e11, "812.4GFLOPS"), (512.0, "512.0")]
)
def test_gpt_neox_flops_are_read_in_their_unit(per_gpu, text):
    line = f" samples/sec: 1.0 | iteration 10/ 100 | elapsed time per iteration (ms): 1.0 | approx flops per GPU: {text} |"
    assert feed(line).iterations[10]["logged_tflops_per_gpu"] == pytest.approx(per_gpu / 1e12)


def test_a_pipe_parallel_size_of_0_is_one_stage():
    run = feed(*_neox_dump({"pipe_parallel_size": 0, "model_parallel_size": 1}))
    assert (run.facts["pp"], run.facts["tp"]) == (1, 1)


@pytest.mark.parametrize(
    ("under_deepspeed", "family"), [("True", "megatron-deepspeed"), ("False", "megatron")]
)
def test_a_dump_saying_deepspeed_names_the_run_without_engine_lines(tmp_path, under_deepspeed, family):
    # A rank's own file (%x-%j-%t.out) of Megatron-DeepSpeed: print_rank_last's steps, no engine line
    dump = [
        "------------------------ arguments ------------------------",
        f"  deepspeed ....................................... {under_deepspeed}",
        "  deepspeed_config ................................ ds_config.json",
        "  zero_stage ...................................... 1",
        "-------------------- end of arguments ---------------------",
    ]
    log = tmp_path / "mds-350m-410007-3.out"
    log.write_text("\n".join([*dump, DS_ITERATION, ""]))
    assert load_runs([log]).runs.row(0, named=True)["family"] == family


@pytest.mark.parametrize(
    "line",
    [
        "  successfully loaded checkpoint from /lustre/ckpt/llama70b [ t 0, p 0 ] at iteration 1000",
        " successfully loaded checkpoint from /gpfsscratch/checkpoints/tr11 at iteration 1000",
        "Loading checkpoint and starting from iteration 1000",
    ],
)
def test_the_checkpoint_a_run_resumed_from(line):
    # Megatron-LM's load_checkpoint prints its ranks since 2023; older ones and Megatron-DeepSpeed do not;
    # GPT-NeoX says where it starts after loading
    assert feed(line).facts["resumed_step"] == 1000
    assert "resumed_step" not in feed(line.removesuffix(" 1000")).facts
    # --finetune loads a pretrained checkpoint and starts at iteration 0: no resume
    assert "resumed_step" not in feed(line.replace(" 1000", " 0")).facts


def test_megatron_v1_names_its_resumed_iteration_only_in_the_checkpoints_path():
    # 2020's load_checkpoint: "  successfully loaded {checkpoint_name}", under iter_{:07d}
    loaded = "  successfully loaded /lustre/ckpt/gpt2_8.3b/iter_0110000/mp_rank_00/model_optim_rng.pt"
    assert feed(loaded).facts["resumed_step"] == 110000
    # a release checkpoint (--finetune from a published model) has no iteration
    assert "resumed_step" not in feed(loaded.replace("iter_0110000", "release")).facts


def test_a_checkpoint_megatron_could_not_load_ended_the_run():
    # load_checkpoint prints the exception after it and exits with status 0: nothing else says so
    run = feed(
        " loading checkpoint from /scratch/ckpt/falcon40b-sft at iteration 1500",
        "could not load the checkpoint",
        "PytorchStreamReader failed reading zip archive: failed finding central directory",
    )
    assert run.failure == ("failed", "could not load the checkpoint", 2)


def test_a_failed_build_of_the_dataset_helpers_is_failed_by_its_compilers_error(tmp_path):
    log = tmp_path / "slurm-5600001.out"
    lines = [
        "make: Entering directory '/workspace/Megatron-LM/megatron/data'",
        "helpers.cpp:26:10: fatal error: pybind11/pybind11.h: No such file or directory",
        "compilation terminated.",
        "make: *** [Makefile:9: helpers.cpython-38-x86_64-linux-gnu.so] Error 1",
        "Making C++ dataset helpers module failed, exiting.",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    log.write_text("\n".join(lines) + "\n")
    row = load_runs([log]).runs.row(0, named=True)
    assert (row["status"], row["reason"], row["reason_line"]) == ("failed", lines[1], 2)
    assert row["consequences"][0] == f"slurm-5600001.out:5: {lines[4]}"
    # without the compiler's error the helpers' line is the cause
    log.write_text("\n".join(lines[4:]) + "\n")
    assert load_runs([log]).runs.row(0, named=True)["reason"] == lines[4]


def _rampup_log(step_batches: list[int]) -> str:
    """Megatron-DeepSpeed's lines (BigScience tr11's formats) of a run with ``--rampup-batch-size``: its
    target batch 2048 in the dump and in DeepSpeed's config, each step's own batch in its line."""
    head = [
        "using world size: 16, data-parallel-size: 8, tensor-model-parallel size: 2, pipeline-model-parallel size: 1 ",
        "will use batch size rampup starting from global batch size 192 to global batch size 2048 with batch size "
        "increments 16 over 9765625 samples.",
        "------------------------ arguments ------------------------",
        "  global_batch_size ............................... 2048",
        "  micro_batch_size ................................ 2",
        "  rampup_batch_size ............................... ['192', '16', '9_765_625']",
        "-------------------- end of arguments ---------------------",
        "[2022-03-11 21:14:01,000] [INFO] [config.py:1063:print]   gradient_accumulation_steps .. 128",
        "[2022-03-11 21:14:01,000] [INFO] [config.py:1063:print]   train_batch_size ............. 2048",
        "[2022-03-11 21:14:01,000] [INFO] [engine.py:88:__init__] CONFIG: micro_batches=128 micro_batch_size=2",
    ]
    steps = [
        f" iteration {step:8d}/  115311 | consumed samples: {192 * step:12d} | elapsed time per iteration (s): 17.38 "
        f"| learning rate: 6.291E-11 | global batch size: {batch:5d} | lm loss: 1.100359E+01 |"
        for step, batch in enumerate(step_batches, start=1)
    ]
    return "\n".join(head + steps) + "\n"


@pytest.mark.parametrize(
    ("step_batches", "gas", "source"),
    [([192, 192, 208], 208 // (2 * 8), "derived:0"), ([2048, 2048], 128, "deepspeed:")],
)
def test_a_batch_rampups_accumulation_is_its_steps(tmp_path, step_batches, gas, source):
    """The row's global batch is its last step's (what its step time is of): the accumulation beside it
    is that batch's over micro x DP, not the target's that DeepSpeed's config states (it said 128 at 208)."""
    log = tmp_path / "tr11-rampup.out"
    log.write_text(_rampup_log(step_batches))
    run = load_runs([log]).runs.row(0, named=True)
    assert (run["global_batch_size"], run["micro_batch_size"], run["dp"]) == (step_batches[-1], 2, 8)
    assert run["gas"] == gas
    assert json.loads(run["provenance"])["gas"].startswith(source)


def _run_lines(global_batch: int, train_iters: int, steps: range, seconds: float) -> list[str]:
    """A Megatron-LM run's arguments dump and iteration lines."""
    arguments = {"global_batch_size": global_batch, "train_iters": train_iters, "micro_batch_size": 4}
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in arguments.items()]
    lines.append("-------------------- end of arguments ---------------------")
    return lines + [
        f" iteration {step:8d}/{train_iters:8d} | consumed samples: {step * global_batch:12d} | elapsed time per"
        f" iteration (ms): {seconds * 1000:.1f} | learning rate: 1.500E-04 | global batch size: {global_batch:5d} |"
        for step in steps
    ]


def test_a_launch_that_starts_over_supersedes_the_steps_before_it(tmp_path):
    # two runs' logs joined with cat: the second starts from step 10 again (no checkpoint): the row is its
    first = _run_lines(256, 1000, range(10, 1010, 10), 1.5) + [
        "[after training is done] datetime: 2024-05-01"
    ]
    second = _run_lines(512, 2000, range(10, 310, 10), 2.9)
    (tmp_path / "combined.log").write_text("\n".join(first + second) + "\n")
    result = load_runs([tmp_path / "combined.log"])
    row = result.runs.row(0, named=True)
    assert result.iterations["iteration"].to_list() == list(range(10, 310, 10))
    assert (row["last_iteration"], row["global_batch_size"], row["sec_per_iter"]) == (300, 512, 2.9)
    assert row["status"] == "incomplete"
    # a relaunch from a checkpoint goes on from it: the first launch's steps before it stay
    resumed = _run_lines(256, 1000, range(510, 1010, 10), 1.5)
    (tmp_path / "resumed.log").write_text(
        "\n".join(_run_lines(256, 1000, range(10, 610, 10), 1.5) + resumed) + "\n"
    )
    steps = load_runs([tmp_path / "resumed.log"]).iterations.select("iteration", "launch").rows()
    assert steps == [(step, 0) for step in range(10, 510, 10)] + [(step, 1) for step in range(510, 1010, 10)]


def test_a_torchrun_restart_that_loads_its_checkpoint_and_completes_ends_ok(tmp_path):
    """torchrun --max-restarts: the failed attempt's traceback is in the job's .err, read after the .out;
    the restarted workers load the checkpoint (a new launch even without a second dump) and complete."""
    load = "  successfully loaded checkpoint from /lustre/ckpt/gpt2.7b [ t 0, p 0 ] at iteration 50"
    end = "[after training is done] datetime: 2024-05-02 10:16:12 "
    out = [*_run_lines(512, 200, range(10, 70, 10), 4.2), load]
    out += _run_lines(512, 200, range(60, 210, 10), 4.2)[5:]  # the steps alone, no second dump
    error = (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3"
    )
    err = ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 243, in <module>', error]
    err.append(
        "[2024-05-02 10:05:01,762] torch.distributed.elastic.agent.server.api: [INFO] [default] Worker group "
        "FAILED. 2/2 attempts left; will restart worker group"
    )
    (tmp_path / "train-5101.out").write_text("\n".join([*out, end]) + "\n")
    (tmp_path / "train-5101.err").write_text("\n".join(err) + "\n")
    result = load_runs([tmp_path])
    row = result.runs.row(0, named=True)
    assert row["status"] == "ok"
    assert row["reason"] == f"{end.strip()} (after an earlier failure at train-5101.err:3: {error})"
    assert (row["last_iteration"], row["resumed_step"]) == (200, 50)
    relaunched = result.iterations.filter(pl.col("launch") == 1)["iteration"].to_list()
    assert relaunched == list(range(60, 210, 10))


def test_the_world_line_of_core_r0_10_with_its_missing_comma_states_the_tensor_parallelism():
    # arguments.py's format strings 'hierarchical context-parallel sizes: {}' 'tensor-model-parallel size: {}, '
    world = (
        "using world size: 16, data-parallel size: 8, context-parallel size: 1, hierarchical context-parallel "
        "sizes: Nonetensor-model-parallel size: 2, encoder-tensor-model-parallel size: 0, pipeline-model-parallel "
        "size: 1, encoder-pipeline-model-parallel size: 0"
    )
    facts = feed(world).facts
    assert [facts.get(fact) for fact in ("gpus", "dp", "cp", "tp", "pp")] == [16, 8, 1, 2, 1]


def test_the_model_parallel_ranks_parameter_counts_sum_to_the_logged_size(tmp_path):
    world = (
        "using world size: 8, data-parallel size: 4, context-parallel size: 1, tensor-model-parallel size: 2, "
        "pipeline-model-parallel size: 1 "
    )
    ranks = [
        f" > number of parameters on (tensor, pipeline) model parallel rank ({t}, 0): {n}"
        for t, n in ((0, 6), (1, 7))
    ]
    # every rank printed: their sum; one of the two (NeMo logs rank 0's): TP ranks hold as many each, without
    # pipelines; with them, a stage's count says nothing of the others'
    piped = world.replace("data-parallel size: 4", "data-parallel size: 2").replace(
        "pipeline-model-parallel size: 1", "pipeline-model-parallel size: 2"
    )
    cases = (([world, *ranks], 13e-9), ([world, ranks[0]], 12e-9), ([piped, ranks[0]], None))
    for lines, size in cases:
        (tmp_path / "gpt.out").write_text("\n".join([*lines, ITERATION_1]) + "\n")
        assert load_runs([tmp_path / "gpt.out"]).runs.row(0, named=True)["logged_model_size"] == size


def test_deepspeed_ulysses_sequence_parallelism_is_context_parallelism():
    # Megatron-DeepSpeed's world line and dump with --ds-sequence-parallel-size 4 (DeepSpeed-Ulysses)
    world = (
        "using world size: 16, data-parallel-size: 4, sequence-parallel size: 4, tensor-model-parallel size: 1, "
        "pipeline-model-parallel size: 1 "
    )
    facts = feed(world).facts
    assert (facts["gpus"], facts["dp"], facts["cp"], facts["tp"], facts["pp"]) == (16, 4, 4, 1, 1)
    assert _dump(ds_sequence_parallel_size=4).facts["cp"] == 4
