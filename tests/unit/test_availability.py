"""How much of a run the system was up (checkers/availability.py): the share of the main phase's seconds with
a successful client op, the longest stretch without one, and the client warnings counted."""

from kafkaesque_harness.checkers.availability import availability, availability_sentence
from kafkaesque_harness.history import Op


def _ok(t_s: float, f: str = "send") -> list[Op]:
    return [Op("invoke", f, 1, None, time=int(t_s * 1e9) - 1000), Op("ok", f, 1, None, time=int(t_s * 1e9))]


def test_a_system_down_most_of_the_run_shows_it():
    history = [*_ok(0.5), *_ok(1.5), *_ok(9.2), *_ok(58.0), Op("invoke", "heal", "nemesis", None, time=int(60e9)),
               *_ok(61.0, "final-poll")]  # the final reads are not the main phase
    a = availability(history, 60, ["worker 3: client open failed: KafkaTimeoutError: Unable to bootstrap from [...]",
                                   "worker 4: client open failed: NoBrokersAvailable"])
    assert a["ok_seconds_share"] == round(4 / 60, 3)
    assert (a["longest_gap_s"], a["longest_gap"]) == (48.8, [9.2, 58.0])
    assert (a["client_warnings"], a["bootstrap_failures"]) == (2, 1)
    said = availability_sentence(a)
    assert "7% of the main phase's seconds" in said and "48.8 s (9.2-58 s)" in said and "2 client warning(s)" in said


def test_a_run_cut_short_is_measured_up_to_its_heal_and_one_with_no_success_is_all_gap():
    history = [*_ok(0.4), Op("invoke", "heal", "nemesis", None, time=int(2e9))]
    a = availability(history, 60)
    assert a["ok_seconds_share"] == 0.5 and a["longest_gap"] == [0.4, 2.0]
    assert availability([], 30)["longest_gap"] == [0.0, 30.0] and availability([], 30)["ok_seconds_share"] == 0.0
