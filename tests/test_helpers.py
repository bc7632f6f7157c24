"""Issue 36: the one way the tests share a real job's results (helpers.once), without a job."""
import pytest
from helpers import CALLS, _frozen, once


def test_a_call_runs_once_for_the_same_arguments_and_each_caller_gets_its_own_copy():
    ran = []

    def job(world_size, **settings):
        ran.append((world_size, settings))
        return [{"rank": r, "settings": dict(settings)} for r in range(world_size)]

    first = once(job, 2, steps=3, layers=[1, 2])
    first[0]["rank"] = 99                                         # a test that changes what it got ...
    again = once(job, 2, layers=[1, 2], steps=3)                   # ... (keywords in any order)
    assert again == [{"rank": 0, "settings": {"steps": 3, "layers": [1, 2]}},
                     {"rank": 1, "settings": {"steps": 3, "layers": [1, 2]}}]   # ... changes nobody else's
    assert len(ran) == 1 and _frozen((job, (2,), {"steps": 3, "layers": [1, 2]})) in CALLS
    once(job, 2, steps=3, layers=(1, 2))                           # other arguments: another call
    once(job, 2, steps=True, layers=[1, 2])                        # True is not 1
    once(job, 2, steps=3.0, layers=[1, 2])                         # nor 3.0 3
    assert len(ran) == 4


def test_a_call_that_failed_fails_again_without_running_again():
    ran = []

    def refused(n):
        ran.append(n)
        raise ValueError(f"no {n}")

    for _ in range(2):
        with pytest.raises(ValueError, match="no 3"):
            once(refused, 3)
    assert ran == [3]


def test_functions_are_told_apart_by_module_and_name():
    def job():
        return 1

    def other():
        return 2

    assert _frozen(job) != _frozen(other) and _frozen(job) == _frozen(job)
    assert _frozen({"b": 1, "a": [1, {2}]}) == _frozen({"a": [1, {2}], "b": 1})
    with pytest.raises(TypeError):
        _frozen(bytearray(b"unhashable"))
