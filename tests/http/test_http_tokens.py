"""Tokens: shape, hashing for storage, constant-time comparison, redaction."""

from __future__ import annotations

import hashlib

from tunefleet.http.tokens import (
    hash_matches,
    hash_token,
    looks_like,
    looks_like_api_token,
    looks_like_worker_token,
    new_api_token,
    new_worker_token,
    redact,
    tokens_equal,
)


def test_worker_tokens_are_wt_and_32_urlsafe_random_bytes() -> None:
    tokens = {new_worker_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert token.startswith("wt_")
        assert len(token) == 3 + 43
        assert looks_like_worker_token(token)
        assert not looks_like_api_token(token)
        assert looks_like(token) == "worker"


def test_api_tokens_are_tf_and_32_urlsafe_random_bytes() -> None:
    token = new_api_token()
    assert token.startswith("tf_") and len(token) == 46
    assert looks_like_api_token(token) and not looks_like_worker_token(token)
    assert looks_like(token) == "api"


def test_other_strings_do_not_look_like_tokens() -> None:
    for text in ("", "wt_", "wt_short", "tf_" + "a" * 42, "wt_" + "!" * 43, "x" * 46, "Bearer"):
        assert looks_like(text) is None


def test_hash_is_sha256_hex_of_the_utf8_token() -> None:
    assert hash_token("wt_abc") == hashlib.sha256(b"wt_abc").hexdigest()
    assert len(hash_token(new_worker_token())) == 64
    assert hash_token("a") != hash_token("b")


def test_hash_matches_compares_against_a_stored_hash() -> None:
    token = new_worker_token()
    stored = hash_token(token)
    assert hash_matches(token, stored)
    assert hash_matches(token, stored.upper())
    assert not hash_matches(token + "x", stored)
    assert not hash_matches(token, "")


def test_tokens_equal() -> None:
    assert tokens_equal("tf_same", "tf_same")
    assert not tokens_equal("tf_same", "tf_Same")
    assert not tokens_equal("tf_same", "tf_same ")
    assert tokens_equal("ünï", "ünï")


def test_redact_keeps_prefix_and_last_four_only() -> None:
    token = new_worker_token()
    shown = redact(token)
    assert shown == f"wt_…{token[-4:]}"
    assert token[3:-4] not in shown
    assert redact(new_api_token()).startswith("tf_…")


def test_redact_shows_nothing_of_short_or_unknown_secrets() -> None:
    assert redact("wt_abc") == "wt_…"
    assert redact("hunter2") == "…"
    assert redact("x" * 40) == "…xxxx"
    assert redact(None) == "<none>"
    assert redact("") == "<none>"
