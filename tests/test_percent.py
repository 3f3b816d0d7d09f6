"""Percentages are parsed once, at the command line's edge: '2%' and '0.02' are both two percent."""

from __future__ import annotations

import pytest

from alloclab.cli.app import min_effect_value, percent
from alloclab.errors import AlloclabError


@pytest.mark.parametrize("text, value", [("2%", 0.02), ("0.02", 0.02), (" 2.5% ", 0.025), ("0", 0.0),
                                         ("150%", 1.5), ("-5%", -0.05)])
def test_a_percentage_and_a_fraction_mean_the_same(text, value):
    assert percent(text) == pytest.approx(value)


@pytest.mark.parametrize("text, message", [("2", "ambiguous"), ("1", "ambiguous"), ("abc", "Cannot read"),
                                           ("nan%", "Cannot read"), ("", "Cannot read")])
def test_a_number_that_could_mean_two_things_is_refused(text, message):
    with pytest.raises(AlloclabError, match=message):
        percent(text)


def test_min_effect_is_a_non_negative_number():
    assert min_effect_value("3%") == pytest.approx(0.03)
    with pytest.raises(AlloclabError, match="cannot be negative"):
        min_effect_value("-1%")


@pytest.mark.e2e
def test_compare_stores_the_margin_it_was_given_as_a_fraction(cli, store_of):
    p = cli("compare", "-a", "glibc", "--runs", "2", "--warmup", "0", "--no-verify", "--min-effect", "0.03",
            "--", "true")
    assert p.returncode == 0, p.stderr
    assert store_of(cli.db).load().config.margin == pytest.approx(0.03)
