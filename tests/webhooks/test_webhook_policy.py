"""The pure parts of webhooks (issue 27): retries, verdicts, signatures, SSRF rules, the
chat sentence and which subscription wants which event."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunefleet.webhooks.addresses import address_refusal, url_refusal
from tunefleet.webhooks.chat import duration, sentence, slack_body
from tunefleet.webhooks.events import EVENT_KINDS, Scope, matches
from tunefleet.webhooks.policy import (
    FIRST_RETRY_S,
    GIVE_UP_AFTER_S,
    MAX_RETRY_S,
    judge,
    retry_delay,
)
from tunefleet.webhooks.signing import masked, new_secret, signature, verify


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_retry_delays_grow_with_jitter_and_stay_bounded(attempts: int, seed: int) -> None:
    delay = retry_delay(attempts, random.Random(seed))
    ceiling = min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (attempts - 1))
    assert ceiling / 2 <= delay <= ceiling


@given(
    st.one_of(st.none(), st.integers(min_value=100, max_value=599)),
    st.integers(min_value=1, max_value=100),
    st.floats(min_value=0, max_value=GIVE_UP_AFTER_S * 2),
)
def test_every_answer_has_one_verdict(status: int | None, attempts: int, age: float) -> None:
    verdict = judge(status, attempts, 1000.0, 1000.0 + age, random.Random(1))
    if status is not None and 200 <= status < 300:
        assert verdict.state == "delivered" and verdict.next_at is None
    elif status == 410:
        assert verdict.state == "failed" and verdict.disable
    elif verdict.state == "pending":
        # Retried only within the day after the event.
        assert verdict.next_at is not None and verdict.next_at - 1000.0 <= GIVE_UP_AFTER_S
    else:
        assert verdict.state == "failed" and not verdict.disable
        assert age + FIRST_RETRY_S / 2 > GIVE_UP_AFTER_S - MAX_RETRY_S


def test_a_delivery_is_given_up_a_day_after_its_event() -> None:
    rng = random.Random(3)
    assert judge(500, 30, 0.0, GIVE_UP_AFTER_S - 1, rng).state == "failed"
    assert judge(None, 1, 0.0, 5.0, rng).state == "pending"
    assert judge(302, 1, 0.0, 5.0, rng).state == "pending"  # a redirect is not followed


@given(st.binary(max_size=512), st.integers(min_value=0, max_value=2**40))
def test_a_signature_verifies_only_with_its_secret_and_body(body: bytes, t: int) -> None:
    secret = "whsec_" + "k" * 20
    header = signature(secret, t, body)
    assert header.startswith(f"t={t},v1=")
    assert verify(secret, header, body, now=t)
    assert not verify(secret + "x", header, body, now=t)  # a bad secret
    assert not verify(secret, header, body + b"!", now=t)
    assert not verify(secret, header, body, now=t + 3600)  # replayed an hour later


def test_secrets_are_made_fresh_and_masked() -> None:
    one, two = new_secret(), new_secret()
    assert one != two and one.startswith("whsec_") and len(one) > 40
    hint = masked(one)
    assert one not in hint and hint.startswith("whsec_") and hint.endswith(one[-2:])


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://example.com/hook", "http:// or https://"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("http://127.0.0.1:9000/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://10.1.2.3/hook", "private"),
        ("http://192.168.0.10/hook", "private"),
        ("http://169.254.10.1/hook", "link-local"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://0.0.0.0/hook", "unspecified"),
        ("https:///nohost", "no host"),
        ("http://example.com:99999/", "not a valid URL"),
    ],
)
def test_ssrf_targets_are_refused_with_a_reason(url: str, words: str) -> None:
    refusal = url_refusal(url, allow_private=False)
    assert refusal is not None and words in refusal


def test_allow_private_opens_the_lan_but_never_the_metadata_address() -> None:
    assert url_refusal("http://127.0.0.1:9000/hook", allow_private=True) is None
    assert url_refusal("http://10.0.0.5/hook", allow_private=True) is None
    assert "metadata" in (url_refusal("http://169.254.169.254/", allow_private=True) or "")
    assert url_refusal("https://hooks.example.com/x", allow_private=False) is None
    assert address_refusal("93.184.216.34", allow_private=False) is None
    assert "private" in (address_refusal("172.16.0.1", allow_private=False) or "")


def test_one_good_human_message_per_finished_job() -> None:
    data = {
        "job_id": "j_12",
        "name": "tiny-example",
        "worker_name": "gpu-worker-1",
        "duration_s": 2 * 3600 + 14 * 60 + 5,
        "final_metrics": {"loss": 0.031, "step": 100},
        "checkpoints": 3,
        "links": {"job": "http://orch/#/jobs/j_12"},
    }
    assert sentence("job.completed", data) == (
        "j_12 tiny-example completed on gpu-worker-1 in 2 h 14 min, loss 0.031, 3 checkpoints"
    )
    body = slack_body("job.completed", data)
    assert body["text"].startswith("j_12 tiny-example completed")
    assert body["blocks"][0]["text"]["text"] == body["text"]
    assert "http://orch/#/jobs/j_12" in body["blocks"][1]["elements"][0]["text"]
    failed = sentence("job.failed", {"job_id": "j_3", "error": "CUDA out of memory"})
    assert failed == "j_3 failed, CUDA out of memory"
    assert sentence("worker.offline", {"name": "gpu-2"}) == "worker gpu-2 is offline"
    assert (duration(40), duration(300)) == ("40 s", "5 min")


@given(st.sampled_from(EVENT_KINDS), st.sampled_from(EVENT_KINDS))
def test_a_subscription_hears_only_what_it_asked_for(asked: str, kind: str) -> None:
    scope = Scope("alice", "ml", {"gpu": "a100"})
    assert matches((asked,), Scope(), None, kind, scope) == (asked == kind)


def test_filters_and_owners_narrow_what_is_heard() -> None:
    alice_job = Scope("alice", "ml", {"gpu": "a100"})
    bob_job = Scope("bob", "ml", {"gpu": "h100"})
    kind = "job.completed"
    assert matches((kind,), Scope(team_name="ml"), None, kind, bob_job)
    assert not matches((kind,), Scope(team_name="vision"), None, kind, bob_job)
    assert matches((kind,), Scope(user_name="alice"), None, kind, alice_job)
    assert not matches((kind,), Scope(user_name="alice"), None, kind, bob_job)
    assert matches((kind,), Scope(worker_labels={"gpu": "a100"}), None, kind, alice_job)
    assert not matches((kind,), Scope(worker_labels={"gpu": "a100"}), None, kind, bob_job)
    # Alice's own subscription never hears of Bob's job, even in her team.
    assert matches((kind,), Scope(), "alice", kind, alice_job)
    assert not matches((kind,), Scope(), "alice", kind, bob_job)
