"""tunefleet/commands.py: which env names choose the program, and allowed-command globs."""

from __future__ import annotations

import pytest

from tunefleet.commands import (
    ANY,
    BadPattern,
    chooses_program,
    command_allowed,
    default_patterns,
    loader_env_names,
    parse_patterns,
    refusal,
)


def test_loader_env_names_are_found_by_glob_and_sorted() -> None:
    env = ["WANDB_MODE", "PYTHONSTARTUP", "LD_PRELOAD", "BASH_ENV", "PATH", "HF_HOME"]
    assert loader_env_names(env) == ["BASH_ENV", "LD_PRELOAD", "PATH", "PYTHONSTARTUP"]
    assert loader_env_names(["ld_preload", "MYPATH", "ENVIRONMENT"]) == []


def test_chooses_program_says_why() -> None:
    assert chooses_program(None, {"WANDB_MODE": "x"}) is None
    assert chooses_program(["sh"], {}) == "a job that names its command"
    assert chooses_program(None, {"LD_AUDIT": "x", "NODE_OPTIONS": "y"}) == (
        "env LD_AUDIT, NODE_OPTIONS, which changes how programs load"
    )


def test_patterns_match_word_by_word() -> None:
    patterns = parse_patterns(["python -m simpletuner.train", "bash train-*.sh **"])
    assert command_allowed(["python", "-m", "simpletuner.train"], patterns)
    assert not command_allowed(["python", "-m", "simpletuner.train", "-c", "x"], patterns)
    assert not command_allowed(["python", "-c", "import os"], patterns)
    assert command_allowed(["bash", "train-a.sh"], patterns)
    assert command_allowed(["bash", "train-a.sh", "--lr", "1"], patterns)
    assert not command_allowed(["bash", "evil.sh"], patterns)
    # Word by word: a glob never spans words, so no extra argument slips in.
    assert not command_allowed(["bash", "train-a.sh", "x"], ["bash train-*"])


def test_patterns_are_checked() -> None:
    assert parse_patterns([" sh  -c x ", "sh  -c x"]) == ("sh  -c x",)
    with pytest.raises(BadPattern, match="cannot be split"):
        parse_patterns(["python 'open"])
    with pytest.raises(BadPattern, match="empty"):
        parse_patterns(["  "])
    with pytest.raises(BadPattern, match=r"\*\* may only be the last word"):
        parse_patterns(["sh ** -c"])


def test_defaults_are_the_train_command_and_the_known_trainers() -> None:
    assert default_patterns(("bash", "/opt/train.sh")) == (
        "bash /opt/train.sh",
        "python -m simpletuner.train",
        "python -m tunefleet.examples.tiny_trainer",
    )
    assert default_patterns(("python", "-m", "simpletuner.train"))[0] == (
        "python -m simpletuner.train"
    )


def test_refusal_names_the_command_or_the_env() -> None:
    allowed = ("python -m simpletuner.train",)
    assert refusal(["python", "-m", "simpletuner.train"], [], allowed) is None
    assert refusal(["sh", "-c", "id"], [], allowed) == (
        "command 'sh -c id' is not among the allowed commands ('python -m simpletuner.train')"
    )
    why = refusal(["python", "-m", "simpletuner.train"], ["PYTHONSTARTUP"], allowed)
    assert why is not None and why.startswith("env PYTHONSTARTUP changes how programs load")
    assert refusal(None, [], allowed) is None  # the worker's own default: its to check
    assert refusal(["sh"], ["LD_PRELOAD"], (ANY,)) is None
    assert refusal(["sh"], ["LD_PRELOAD"], None) is None
