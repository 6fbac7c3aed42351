"""The methods. Every file is imported here explicitly so that it registers itself
(a test checks that each file registers under the key matching its file name)."""

from baselines import (  # noqa: F401
    clockwork_rnn,
    delta_gru,
    egru,
    ei_rehn,
    gru,
    hsg,
    lstm,
    phased_lstm,
    random_updates,
    rhn,
    rnn,
    sa_rnn,
    skip_rnn,
    srehn,
    srhn,
    vc_rnn,
)
