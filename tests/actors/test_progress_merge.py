"""A job's progress: reports merged, bounded in keys and bytes, the change told apart."""

from __future__ import annotations

import pytest

from tunefleet.actors.progress_merge import ProgressTooLarge, merge_progress
from tunefleet.limits import Limits


def test_a_report_merges_in_and_only_what_changed_is_the_change() -> None:
    merged = merge_progress(
        {"step": 1, "total": 10, "loss": 0.9}, {"step": 2, "total": 10}, Limits()
    )
    assert merged.progress == {"step": 2, "total": 10, "loss": 0.9}
    assert merged.changed == {"step": 2}


def test_a_repeated_report_changes_nothing() -> None:
    merged = merge_progress({"step": 2}, {"step": 2}, Limits())
    assert merged.changed == {}
    assert merge_progress({"done": 1}, {"done": True}, Limits()).changed == {"done": True}


def test_new_keys_past_the_bound_are_refused_whole_and_the_old_object_is_untouched() -> None:
    # Finding 3 at small scale: every report names new keys.
    limits = Limits(max_progress_keys=8)
    progress: dict[str, object] = {}
    refused = 0
    for report in range(10):
        try:
            progress = merge_progress(
                progress, {f"k{report}a": 1, f"k{report}b": 2}, limits
            ).progress
        except ProgressTooLarge as error:
            refused += 1
            assert "over the server's limit of 8 (--max-progress-keys)" in str(error)
            assert error.status == 400
    assert len(progress) == 8 and refused == 6
    # Keys it already holds may still change.
    assert merge_progress(progress, {"k0a": 5}, limits).progress["k0a"] == 5


def test_bytes_past_the_bound_are_refused_whole() -> None:
    limits = Limits(max_progress_bytes=100)
    progress = merge_progress({}, {"note": "x" * 50}, limits).progress
    with pytest.raises(ProgressTooLarge, match="--max-progress-bytes"):
        merge_progress(progress, {"more": "y" * 50}, limits)
    # A value that shrinks the object is taken.
    assert merge_progress(progress, {"note": "short"}, limits).progress == {"note": "short"}


def test_zero_bounds_are_no_bounds() -> None:
    limits = Limits(max_progress_keys=0, max_progress_bytes=0)
    big = {f"k{i}": i for i in range(1000)}
    assert len(merge_progress({}, big, limits).progress) == 1000
