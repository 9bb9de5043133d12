"""`utils.timing.CompileCount`: the calls that compiled a jitted function's program, as the
update logs them (time_update_compiles / time_update_compile_s) and the engine counts its own."""

import jax
import numpy as np

from agentic_jax.utils.timing import CompileCount, programs_held


def test_the_calls_that_compiled_are_counted_with_their_seconds():
    step = jax.jit(lambda x: x * 2.0)
    count = CompileCount(step)
    np.testing.assert_array_equal(count.call(step, np.ones(3)), 2 * np.ones(3))
    assert count.compiles == 1 and count.seconds > 0
    seconds = count.seconds
    count.call(step, np.ones(3))                 # the same shape: nothing compiles
    assert count.compiles == 1 and count.seconds == seconds
    count.call(step, x=np.ones(4))               # a new shape compiles again
    assert count.compiles == 2 and count.seconds > seconds
    total = count.seconds
    assert count.take() == (2, total)
    assert count.take() == (0, 0.0)              # taken: counted again from zero


def test_a_function_that_does_not_say_is_called_and_not_counted():
    count = CompileCount(print)
    assert programs_held(print) is None
    assert count.call(lambda x: x + 1, 1) == 2
    assert count.take() == (0, 0.0)
