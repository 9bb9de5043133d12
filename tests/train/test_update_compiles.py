"""`training.update.CompileCount`: the update's calls that compiled its step, logged as
time_update_compiles / time_update_compile_s."""

import jax
import numpy as np

from agentic_jax.training.update import CompileCount


def test_the_calls_that_compiled_are_counted_with_their_seconds():
    step = jax.jit(lambda x: x * 2.0)
    count = CompileCount()
    np.testing.assert_array_equal(count.call(step, np.ones(3)), 2 * np.ones(3))
    assert count.compiles == 1 and count.seconds > 0
    seconds = count.seconds
    count.call(step, np.ones(3))                 # the same shape: nothing compiles
    assert count.compiles == 1 and count.seconds == seconds
    count.call(step, np.ones(4))                 # a new shape compiles again
    assert count.compiles == 2 and count.seconds > seconds
    assert count.metrics() == {"time_update_compiles": 2.0, "time_update_compile_s": count.seconds}


def test_a_function_that_does_not_say_is_called_and_not_counted():
    count = CompileCount()
    assert count.call(lambda x: x + 1, 1) == 2
    assert count.metrics() == {"time_update_compiles": 0.0, "time_update_compile_s": 0.0}
