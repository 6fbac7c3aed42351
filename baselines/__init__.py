"""The methods. Every file is imported here explicitly so that it registers itself
(a test checks that each file registers under the key matching its file name)."""

from baselines import gru, lstm, rnn  # noqa: F401
