"""The draft-length policy on literals: request classes, statistics, the choice; and the tuner following a reload."""

from __future__ import annotations

import pytest

from orchestrator.serve.drafting import classes as dc
from orchestrator.serve.drafting import policy as dp

KS = (0, 1, 2, 3)
P = dp.Params(ks=KS)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("The quick brown fox jumps over", "latin"),
        ("我们今天在这里讨论一个问题", "cjk"),
        ("Мы сегодня обсуждаем вопрос", "cyrillic"),
        ("x = [1, 2, 3]; y = {'a': 42} # 0.5 * 7 == 3.5 / 1e-3 ()", "symbols"),
        ("   \n ", "empty"),
        ("Ελληνικά κείμενα εδώ", "other"),
        ("a long English preamble ... " * 20 + "\u0430 затем русский хвост текста, который длиннее всего", "cyrillic"),
    ],
)
def test_content_kind_reads_the_script_of_the_tail(text: str, kind: str) -> None:
    assert dc.content_kind(text) == kind


def test_classify_each_api_shape() -> None:
    chat = {"messages": [{"role": "system", "content": "Отвечай"}, {"role": "user", "content": "hello there"}]}
    assert dc.classify("chat", chat).key == "chat/no-tools/<2K/latin"
    anthropic = {
        "tools": [{"name": "t"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "读取文件并总结"}]}],
    }
    assert dc.classify("messages", anthropic).key == "messages/tools/<2K/cjk"
    responses = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "def f(x): return x"}]}]}
    assert dc.classify("responses", responses).content == "latin"
    assert dc.classify("completions", {"prompt": ["a", "b b b"]}).content == "latin"
    assert dc.classify("completions", {"prompt": [1, 2, 3]}).content == "empty"  # token ids: no text signal


def test_copy_signal_marks_a_tail_seen_before() -> None:
    passage = "def f(x):\n    return x + 1\n"
    assert dc.content_signal("Fix this:\n" + passage + "\nNow write it again: def f(x):\n    return") == "latin+copy"
    assert dc.content_signal("Write a function that adds one to x, please") == "latin"
    assert dc.content_signal("short") == "latin"
    assert dc.classify("completions", {"prompt": "我们的问题是什么呢。" * 3}).content == "cjk+copy"
    passage = "我们今天讨论的问题是模型怎样预测下一个词"
    assert dc.content_signal(passage + "。再说一遍" + passage[:7]) == "cjk+copy"  # 7 characters, about 7 tokens
    assert dc.content_signal(passage + "。再说一遍模型") == "cjk"


@pytest.mark.parametrize(
    ("n", "bucket"), [(0, "<2K"), (2047, "<2K"), (2048, "2K-8K"), (9000, "8K-32K"), (40000, "32K+")]
)
def test_depth_buckets(n: int, bucket: str) -> None:
    assert dc.depth_bucket(n) == bucket


def test_depth_comes_from_the_whole_body() -> None:
    body = {"messages": [{"role": "system", "content": "x" * 40_000}, {"role": "user", "content": "hi"}]}
    assert dc.classify("chat", body).depth == "8K-32K"


def test_observation_from_timings() -> None:
    t = {"predicted_n": 33, "predicted_ms": 500.0, "draft_n": 24, "draft_n_accepted": 21}
    o = dp.observation(3, t)
    assert o == dp.Observation(k=3, tokens=33, ms=500.0, drafted=24, accepted=21)
    assert o.steps == 12
    assert dp.observation(0, {"predicted_n": 10, "predicted_ms": 100.0}) == dp.Observation(0, 10, 100.0, 0, 0)
    assert dp.observation(1, {"predicted_n": 1, "predicted_ms": 5.0}) is None  # nothing decoded after the first
    assert dp.observation(1, {"predicted_n": "x"}) is None
    assert dp.observation(1, {"predicted_n": 10, "predicted_ms": 50.0, "draft_n": 2, "draft_n_accepted": 3}) is None


@pytest.mark.parametrize(("a", "k", "rate"), [(1.0, 3, 1.0), (0.0, 2, 0.0), (0.5, 2, 0.375), (0.9, 1, 0.9)])
def test_draft_rate(a: float, k: int, rate: float) -> None:
    assert dp.draft_rate(a, k) == pytest.approx(rate)


def test_fit_acceptance_inverts_the_rate() -> None:
    # K = 2 at a = 0.5: 100 drafted, 37.5 accepted; K = 1: 40 drafted, 20 accepted
    assert dp.fit_acceptance([(2, 100.0, 37.5), (1, 40.0, 20.0)]) == pytest.approx(0.5, abs=0.01)
    assert dp.fit_acceptance([]) == 0.0


def _obs(k: int, steps: int, accepted: int, step_ms: float) -> dp.Observation:
    """An answer at ``k`` of ``steps`` steps of ``step_ms`` each, ``accepted`` draft tokens accepted."""
    return dp.Observation(k=k, tokens=steps + accepted, ms=steps * step_ms, drafted=k * steps, accepted=accepted)


def _feed(state: dp.State, cls: str, o: dp.Observation, n: int = 1) -> dp.State:
    for _ in range(n):
        state = dp.observe(state, cls, "<2K", o, P)
    return state


def test_a_class_never_seen_probes_at_the_largest_k() -> None:
    assert dp.choose(dp.State(), "c", "<2K", P) == dp.Choice(3, "probe")
    assert dp.choose(dp.State(), "c", "<2K", dp.Params(ks=(0,))).reason == "off"


def test_step_cost_prior_then_two_pieces() -> None:
    s = _feed(dp.State(), "a", _obs(2, 10, 0, 15.0))
    cost = dp.step_cost(s, "<2K", P)  # one drafting K timed: a plain step from the prior 1 + 0.25 K
    assert (cost.at(0), cost.at(1), cost.at(2)) == pytest.approx((10.0, 12.5, 15.0))
    s = _feed(s, "b", _obs(0, 20, 0, 10.0), 3)
    s = _feed(s, "b", _obs(3, 10, 0, 16.0), 3)
    cost = dp.step_cost(s, "<2K", P)  # K = 0 measured; the K > 0 line through K = 2 and K = 3
    assert cost.base == pytest.approx(10.0) and cost.slope == pytest.approx(1.0) and cost.draft == pytest.approx(13.0)
    assert dp.step_cost(s, "32K+", P) == cost  # another depth: pooled


def test_the_draft_pass_fixed_cost_is_not_spread_over_k() -> None:
    """A plain step 10 ms, K = 1 17 ms, K = 3 19 ms (a CPU: the draft pass is most of it): the
    K > 0 line says K = 2 costs 18 ms, where one line through every K would say about 14."""
    s = _feed(dp.State(), "c", _obs(0, 20, 0, 10.0), 2)
    s = _feed(s, "c", _obs(1, 20, 0, 17.0), 2)
    s = _feed(s, "c", _obs(3, 20, 0, 19.0), 2)
    assert dp.step_cost(s, "<2K", P).at(2) == pytest.approx(18.0)


def test_a_plain_step_never_timed_is_a_modelled_figure() -> None:
    """Probed at K = 3 only: K = 0 comes from the prior (1 + 0.25 K plain steps per step), so
    drafting at 1.7x that is not sure (one answer, and a modelled baseline, each +-30%): the next
    request tries the best K (``confirm``); once K = 0 was timed at the depth, the same figures
    are sure."""
    s = _feed(dp.State(), "c", _obs(3, 10, 20, 20.0))  # 3 tokens per 20 ms step = 150 tok/s
    choice = dp.choose(s, "c", "<2K", P)
    assert choice.expected[0] == pytest.approx(1000 / (20 / 1.75))  # 87.5 tok/s
    assert (choice.k, choice.reason) == (3, "confirm")  # 150 - 30% < 87.5 + 30% + 3%
    s = _feed(s, "other", _obs(0, 40, 0, 20 / 1.75), 3)
    sure = dp.choose(s, "c", "<2K", P)
    assert (sure.k, sure.reason) == (3, "best") and sure.expected[0] == pytest.approx(87.5)


def _learned(accept_all: bool) -> dp.State:
    """Step time 10 ms + 2 ms per drafted token (timed on another class), and class ``c``
    probed once at K = 1: every draft right, or every draft wrong."""
    s = _feed(dp.State(), "other", _obs(0, 32, 0, 10.0), 2)
    s = _feed(s, "other", _obs(3, 10, 0, 16.0), 2)
    return _feed(s, "c", _obs(1, 16 if accept_all else 32, 16 if accept_all else 0, 12.0))


def test_right_drafts_choose_the_longest_k() -> None:
    choice = dp.choose(_learned(True), "c", "<2K", P)
    # tokens per step K + 1 over 10 + 2K ms: 100, 167, 214, 250 tok/s
    assert choice.k == 3 and choice.reason == "best"
    assert choice.expected[0] == pytest.approx(100.0, rel=0.02)
    assert choice.expected[3] == pytest.approx(250.0, rel=0.05)


def test_wrong_drafts_choose_k_0_and_skip_exploring_a_clear_loser() -> None:
    s = _learned(False)
    for n in range(1, 64):  # up to the refresh (the 64th), no request of the class drafts
        choice = dp.choose(s, "c", "<2K", P)
        assert choice.k == 0 and choice.reason == "best", n
        s = dp.counted(s, "c")
    assert dp.choose(s, "c", "<2K", P) == dp.Choice(1, "refresh", dp.choose(s, "c", "<2K", P).expected)


def test_a_gain_within_the_margin_is_not_taken() -> None:
    s = _feed(dp.State(), "other", _obs(0, 32, 0, 10.0), 2)
    s = _feed(s, "other", _obs(3, 10, 0, 16.0), 2)
    # acceptance a = 0.19 at K = 1: 1.19 tokens per 12 ms = 99 tok/s against 100 at K = 0
    s = _feed(s, "c", dp.Observation(k=1, tokens=119, ms=1200.0, drafted=100, accepted=19))
    choice = dp.choose(s, "c", "<2K", P)
    assert choice.k == 0 and choice.reason in ("best", "no-gain")


def test_near_arms_are_explored_every_sixteenth_request() -> None:
    s = _learned(True)
    picks = []
    for _ in range(32):
        picks.append(dp.choose(s, "c", "<2K", P))
        s = dp.counted(s, "c")
    explored = [(i + 1, c.k) for i, c in enumerate(picks) if c.reason == "explore"]
    assert explored == [(16, 2), (32, 2)]  # K = 3 is the top: its one neighbour is K = 2 (within 15%)
    assert all(c.k == 3 for c in picks if c.reason == "best")


def test_measured_tokens_per_step_replace_the_model() -> None:
    s = _learned(True)
    assert dp.tokens_per_step(s, "c", 3, P) == pytest.approx(4.0)  # extrapolated from a = 1
    s = _feed(s, "c", dp.Observation(k=3, tokens=40, ms=400.0, drafted=60, accepted=20))  # a decaying class
    assert dp.tokens_per_step(s, "c", 3, P) == pytest.approx(2.0)


def test_a_measured_step_time_wins_over_the_line() -> None:
    """K = 1 timed at 17 ms (the draft pass's fixed cost) while the model from K = 0 (10 ms) and
    K = 3 (16 ms) alone says 11 ms: at acceptance 0.6 the model would choose K = 1 (1.6 tokens per
    11 ms = 145 tok/s), the measurement says 94 tok/s, below K = 0's 100."""
    s = _feed(dp.State(), "other", _obs(0, 32, 0, 10.0), 3)
    s = _feed(s, "other", _obs(3, 10, 0, 16.0), 3)
    p01 = dp.Params(ks=(0, 1))
    assert dp.step_cost(s, "<2K", p01).at(1) == pytest.approx(11.0, rel=0.02)
    s = _feed(s, "c", dp.Observation(k=1, tokens=160, ms=1700.0, drafted=100, accepted=60), 2)
    choice = dp.choose(s, "c", "<2K", p01)
    assert choice.k == 0 and choice.expected[1] == pytest.approx(1000 * 1.6 / 17, rel=0.01)


def test_drafting_must_beat_k0_by_more_than_its_own_noise() -> None:
    """Class ``c`` measured at K = 1 on three answers: 140, 80 and 110 tok/s (about 105 over
    all, +- 15) against 95 at K = 0: the figure wins by 10%, its spread does not: K = 0, reason
    unsure. With three steady answers at 120 the gap is sure (two errors of each figure)."""
    s = _feed(dp.State(), "c", _obs(0, 32, 0, 1000 / 95 / 1.0), 3)
    noisy = s
    for ms in (1000 / 140, 1000 / 80, 1000 / 110):
        noisy = dp.observe(noisy, "c", "<2K", dp.Observation(1, 32, 32 * ms, 20, 0), P)
    p01 = dp.Params(ks=(0, 1))
    assert dp.choose(noisy, "c", "<2K", p01).reason == "unsure"  # three answers of its own: no confirm now
    steady = s
    for _ in range(3):
        steady = dp.observe(steady, "c", "<2K", dp.Observation(1, 32, 32 * 1000 / 120, 20, 0), p01)
    assert dp.choose(steady, "c", "<2K", p01) == dp.Choice(1, "best", dp.choose(steady, "c", "<2K", p01).expected)


def test_the_tuner_follows_a_reload_of_the_adaptive_switch() -> None:
    """``speculative.adaptive`` is read from the running config's current snapshot: a reload that
    turns it off stops the policy at the next request; turning it on again starts it empty."""
    from prometheus_client import CollectorRegistry

    from orchestrator.config.running import RunningConfig
    from orchestrator.config.schema import Config, ModelConfig
    from orchestrator.serve.drafting.tuner import DraftTuner

    def config(adaptive: bool, n_max: int = 3) -> Config:
        spec = {"type": "draft-mtp", "n_max": n_max, "adaptive": adaptive}
        return Config(models=[ModelConfig(name="m", path="m.gguf", speculative=spec)])  # type: ignore[arg-type]

    running = RunningConfig(config(True))
    registry = CollectorRegistry()
    tuner = DraftTuner(running, registry)
    body = {"prompt": "The quick brown fox"}
    new, ticket = tuner.decide("completions", running.current.models[0], body)
    assert new == {**body, "speculative.n_max": 3} and ticket is not None and ticket.reason == "probe"
    tuner.learn(ticket, {"predicted_n": 32, "predicted_ms": 400.0, "draft_n": 16, "draft_n_accepted": 16})
    assert tuner.status()["m"]["recent"][0]["accepted"] == "16/16"
    tuner.decide("completions", running.current.models[0], body)  # chosen from what was learned

    def expected_ks() -> set[str]:
        gauge = "orchestrator_draft_policy_expected_tokens_per_second"
        return {s.labels["k"] for m in registry.collect() if m.name == gauge for s in m.samples}

    assert expected_ks() == {"0", "1", "2", "3"}
    running.swap(config(False))
    assert tuner.decide("completions", running.current.models[0], body) == (None, None)
    assert tuner.status() == {}
    assert expected_ks() == set()  # the expectations went with the statistics (K = 3 stayed at its last figure)
    running.swap(config(True, n_max=2))
    assert tuner.status()["m"] == {"ks": [0, 1, 2], "recent": []}
    assert tuner.decide("chat", running.current.models[0], {"messages": [], "speculative.n_max": 0})[0] is None
    assert tuner.status()["m"]["recent"][0]["reason"] == "client"


def test_an_unsure_k_is_confirmed_by_its_own_answers_not_its_neighbour() -> None:
    """Latin on the test bed: the probe at K = 3 measured 65 tok/s (its mean is 75), K = 0 runs
    at 46. One answer is not sure enough (65 - 30% < 46 + 3%): the next request tries K = 3
    again (``confirm``), and with its answer K = 3 is chosen. A K that stays unsure is tried
    again only every 16th request, the rest run at K = 0."""
    s = _feed(dp.State(), "c", _obs(0, 32, 0, 1000 / 46), 2)
    s = _feed(s, "c", dp.Observation(k=3, tokens=32, ms=32 * 1000 / 65, drafted=24, accepted=24))
    s = dp.counted(dp.counted(s, "c"), "c")
    choice = dp.choose(s, "c", "<2K", P)
    assert (choice.k, choice.reason) == (3, "confirm")
    s = dp.counted(s, "c")
    sure = _feed(s, "c", dp.Observation(k=3, tokens=32, ms=32 * 1000 / 75, drafted=24, accepted=24))
    assert (dp.choose(sure, "c", "<2K", P).k, dp.choose(sure, "c", "<2K", P).reason) == (3, "best")

    doubtful = _feed(s, "c", dp.Observation(k=3, tokens=32, ms=32 * 1000 / 35, drafted=60, accepted=12))
    picks = []
    for _ in range(20):
        c = dp.choose(doubtful, "c", "<2K", P)
        picks.append((c.k, c.reason))
        doubtful = dp.counted(doubtful, "c")
    trials = [i for i, (k, _) in enumerate(picks) if k > 0]
    assert len(trials) <= 2 and all(picks[i][1] in ("confirm", "explore") for i in trials)
