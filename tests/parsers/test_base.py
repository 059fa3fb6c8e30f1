"""The builder's notes and the guard every family's ``parse_line`` wears."""

from __future__ import annotations

from logstat.parsers.base import RunBuilder, never_raises


@never_raises("toy")
def read_step(text: str, lineno: int, run: RunBuilder) -> None:
    """Reads ``step N``; any other text fails in ``int()``, as a family's bug would."""
    run.add_iteration(int(text.removeprefix("step ")), "toy", lineno)


def test_an_error_on_a_line_is_noted_and_the_next_line_is_read():
    run = RunBuilder(path="toy.log")
    read_step("step 3", 1, run)
    read_step("step three", 2, run)
    read_step("step 4", 3, run)
    assert sorted(run.iterations) == [3, 4]
    assert run.state["parse_errors"] == ["toy:2: ValueError: invalid literal for int() with base 10: 'three'"]
    assert read_step.__doc__.startswith("Reads ``step N``")


def test_a_number_beyond_int64_is_noted_not_recorded():
    run = RunBuilder(path="toy.log")
    assert run.fits("step", 2**63, "toy", 7) is False
    assert run.fits("step", 2**63 - 1, "toy", 8) is True
    assert run.state["parse_errors"] == [f"toy:7: step={2**63} does not fit a 64-bit integer; not recorded"]


def test_the_builders_inline_range_tests_decide_as_fits():
    # set_fact, add_iteration and raise_metric test an int's range inline and call fits() only beyond it
    values = [2**63, -(2**63) - 1, 2**63 - 1, -(2**63), True, 1.5e30, "x", 7]
    run = RunBuilder(path="toy.log")
    for lineno, value in enumerate(values, start=1):
        run.set_fact(f"f{lineno}", value, "toy", lineno)
        run.add_iteration(lineno, "toy", lineno, metric=value)
        run.raise_metric(lineno, "peak", value, "toy", lineno)
    for step in (2**63, -(2**63) - 1):
        run.add_iteration(step, "toy", 99, metric=1)
        run.raise_metric(step, "peak", 1, "toy", 99)
    fitting = [(lineno, value) for lineno, value in enumerate(values, start=1) if lineno > 2]
    assert run.facts == {f"f{lineno}": value for lineno, value in fitting}
    assert sorted(run.iterations) == [lineno for lineno in range(1, len(values) + 1)]
    assert [run.iterations[lineno].get("metric") for lineno, _ in fitting] == [value for _, value in fitting]
    assert run.iterations[1].get("metric") is None and run.iterations[2].get("peak") is None
    too_long = [
        f"toy:{n}: {name}={v} does not fit a 64-bit integer; not recorded"
        for n, v in enumerate(values[:2], 1)
        for name in (f"f{n}", "metric", "peak")
    ]
    beyond = [
        f"toy:99: iteration={s} does not fit a 64-bit integer; not recorded"
        for s in (2**63, -(2**63) - 1)
        for _ in "ab"
    ]
    assert run.state["parse_errors"] == too_long + beyond
