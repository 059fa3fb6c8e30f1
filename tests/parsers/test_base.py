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
    assert [event[1] for event in run.step_events] == [3, 4]
    assert run.state["parse_errors"] == ["toy:2: ValueError: invalid literal for int() with base 10: 'three'"]
    assert read_step.__doc__.startswith("Reads ``step N``")


def test_a_number_beyond_int64_is_noted_not_recorded():
    run = RunBuilder(path="toy.log")
    assert run.fits("step", 2**63, "toy", 7) is False
    assert run.fits("step", 2**63 - 1, "toy", 8) is True
    assert run.state["parse_errors"] == [f"toy:7: step={2**63} does not fit a 64-bit integer; not recorded"]
