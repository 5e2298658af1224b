"""The gate's flags are described once (`llmbench.gate.options`) and validated by one set
of value checks (`llmbench.argtypes`), whichever front end parses them."""

from __future__ import annotations

import argparse

import pytest

from llmbench import argtypes
from llmbench.gate import options
from llmbench.gate.compare import DEFAULT_ALPHA, GateOptions


def _parser(flags=options.FLAGS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    options.register(parser.add_argument, flags)
    return parser


@pytest.mark.parametrize("minimum, text, message", [
    (1, "0", "must be at least 1, got 0"),
    (1, "many", "expected a whole number >= 1, got 'many'"),
    (1, "2.5", "expected a whole number >= 1, got '2.5'"),
    (0, "-2", "expected a whole number >= 0, got '-2'"),
])
def test_whole_numbers_are_refused_with_one_wording(minimum, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        argtypes.whole_number(minimum)(text)
    assert str(raised.value) == message


def test_whole_numbers_at_or_above_the_minimum_pass():
    assert argtypes.whole_number(0)("0") == 0
    assert argtypes.whole_number(1)("12") == 12


def test_defaults_parse_to_the_default_options():
    args = _parser().parse_args([])
    assert options.gate_options(vars(args)) == GateOptions()
    assert options.only_with(vars(args), "--compare-to PATH|latest") is None


def test_every_flag_reaches_gate_options():
    args = _parser().parse_args(["--threshold", "20%", "--threshold-for", "decode=5%",
                                 "--threshold-for", "prefill=0.3", "--alpha", "0.01",
                                 "--normalize", "--allow-mismatch", "--fail-on-inconclusive",
                                 "--work-threshold", "0", "--no-work-gate"])
    assert options.gate_options(vars(args)) == GateOptions(
        threshold=0.2, threshold_for={"decode": 0.05, "prefill": 0.3}, alpha=0.01,
        normalize=True, allow_mismatch=True, fail_on_inconclusive=True, work_threshold=0.0,
        work_gate=False)


def test_a_front_end_without_a_flag_gets_its_default():
    values = {"threshold": 0.2}  # e.g. `report`, which has no --fail-on-inconclusive
    assert options.gate_options(values) == GateOptions(threshold=0.2, alpha=DEFAULT_ALPHA)


@pytest.mark.parametrize("argv, message", [
    (["--alpha", "0.6"], "must be in (0, 0.5), got 0.6"),
    (["--alpha", "x"], "expected a number in (0, 0.5), got 'x'"),
    (["--threshold", "10"], "'10' is ambiguous"),
    (["--threshold-for", "decode"], "expected GROUP_OR_BENCHMARK=PCT"),
    (["--work-threshold=-1%"], "work threshold must be >= 0, got '-1%'"),
    (["--work-threshold", "2"], "'2' is ambiguous"),
])
def test_bad_values_are_refused_with_the_flag_and_the_fix(argv, message):
    with pytest.raises(argparse.ArgumentError) as raised:
        _parser().parse_args(argv)
    assert raised.value.argument_name == argv[0].split("=")[0] and message in str(raised.value)


def test_flags_given_without_the_flag_they_need_are_named_in_order():
    args = _parser().parse_args(["--normalize", "--threshold", "20%", "--alpha", "0.05"])
    assert options.only_with(vars(args), "--baseline B.json") == (
        "--threshold, --normalize only apply with --baseline B.json: add it, or drop them")
