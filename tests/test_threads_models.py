"""Issue 43 (threads battery, short form): threads sharing one CausalLM (forward,
prefill + steps on their own states) and threads switching their own numeric mode
with modes.using around products, all at once: every result is the bits the same call
gives alone. make fuzz runs the same battery longer (tests/threads_battery.py)."""

import threads_battery


def test_shared_model_and_per_thread_modes_keep_their_bits():
    bad = threads_battery.run(8.0, threads=3)
    assert threads_battery.run.counts["model"] > 3 and threads_battery.run.counts["modes"] > 3
    assert not bad, bad[:5]
