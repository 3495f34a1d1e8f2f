"""ConfigCatalog: both layouts, the data-loader file, name validation, and its errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tunefleet.errors import TunefleetError
from tunefleet.jobconfigs import (
    ConfigCatalog,
    ConfigInvalid,
    ConfigNameInvalid,
    ConfigNotFound,
    lift_command,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    root = tmp_path / "config"
    write(root / "sdxl" / "config.json", json.dumps({"--model_type": "lora", "lr": 1e-4}))
    write(root / "sdxl" / "multidatabackend.json", json.dumps([{"id": "pics"}]))
    write(root / "flux" / "config.toml", 'model_type = "full"\nsteps = 10\n')
    write(root / "tiny.yaml", "model_type: lora\nsteps: 3\n")
    write(root / "short.yml", "steps: 4\n")
    write(root / "plain.json", '{"steps": 5}')
    write(root / "notes.txt", "not a config")
    write(root / ".hidden.json", "{}")
    write(root / "multidatabackend.json", "[]")
    (root / "empty-folder").mkdir()
    return root


def test_names_lists_both_layouts_sorted_with_format_and_mtime(configs: Path) -> None:
    os.utime(configs / "plain.json", (1_700_000_000, 1_700_000_000))
    entries = ConfigCatalog(configs).names()
    assert [e.name for e in entries] == ["flux", "plain", "sdxl", "short", "tiny"]
    by_name = {e.name: e for e in entries}
    assert by_name["flux"].format == "toml"
    assert by_name["flux"].path == configs / "flux" / "config.toml"
    assert by_name["tiny"].format == "yaml"
    assert by_name["short"].format == "yaml"
    assert by_name["plain"].modified_at == 1_700_000_000


def test_names_of_a_missing_directory_is_empty(tmp_path: Path) -> None:
    assert ConfigCatalog(tmp_path / "nope").names() == []


def test_folder_layout_wins_over_a_file_of_the_same_name(configs: Path) -> None:
    write(configs / "sdxl.json", '{"from": "file"}')
    catalog = ConfigCatalog(configs)
    assert catalog.load("sdxl")["--model_type"] == "lora"
    assert [e.path.name for e in catalog.names() if e.name == "sdxl"] == ["config.json"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sdxl", {"--model_type": "lora", "lr": 1e-4}),
        ("flux", {"model_type": "full", "steps": 10}),
        ("tiny", {"model_type": "lora", "steps": 3}),
        ("short", {"steps": 4}),
        ("plain", {"steps": 5}),
    ],
)
def test_load_each_format(configs: Path, name: str, expected: dict[str, object]) -> None:
    assert ConfigCatalog(configs).load(name) == expected


def test_folder_yaml_config_is_found(tmp_path: Path) -> None:
    write(tmp_path / "y" / "config.yaml", "a: 1\n")
    assert ConfigCatalog(tmp_path).load("y") == {"a": 1}


def test_sibling_multidatabackend_is_the_dataloader(configs: Path) -> None:
    config, dataloader = ConfigCatalog(configs).load_with_dataloader("sdxl")
    assert config["lr"] == 1e-4
    assert dataloader == [{"id": "pics"}]


def test_no_dataloader_is_none(configs: Path) -> None:
    assert ConfigCatalog(configs).load_with_dataloader("flux") == (
        {"model_type": "full", "steps": 10},
        None,
    )
    # A flat file never picks up a multidatabackend.json lying in the configs dir.
    assert ConfigCatalog(configs).load_with_dataloader("plain")[1] is None


def test_data_backend_config_key_relative_to_the_config(tmp_path: Path) -> None:
    write(tmp_path / "a" / "config.json", '{"data_backend_config": "loaders/one.json"}')
    write(tmp_path / "a" / "loaders" / "one.json", '[{"id": "one"}]')
    # The key wins over the sibling default.
    write(tmp_path / "a" / "multidatabackend.json", '[{"id": "sibling"}]')
    _, dataloader = ConfigCatalog(tmp_path).load_with_dataloader("a")
    assert dataloader == [{"id": "one"}]


def test_simpletuner_style_path_starting_with_the_configs_dir_name(tmp_path: Path) -> None:
    root = tmp_path / "config"
    write(
        root / "b" / "config.json",
        '{"--data_backend_config": "config/shared/multidatabackend-b.json"}',
    )
    write(root / "shared" / "multidatabackend-b.json", '{"backends": []}')
    _, dataloader = ConfigCatalog(root).load_with_dataloader("b")
    assert dataloader == {"backends": []}


def test_data_backend_config_relative_to_the_configs_dir(tmp_path: Path) -> None:
    write(tmp_path / "c.yaml", "data_backend_config: loaders/c.yaml\n")
    write(tmp_path / "loaders" / "c.yaml", "- id: c\n")
    assert ConfigCatalog(tmp_path).load_with_dataloader("c")[1] == [{"id": "c"}]


def test_data_backend_config_outside_the_configs_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "configs"
    write(tmp_path / "secret.json", "[]")
    write(root / "d" / "config.json", '{"data_backend_config": "../../secret.json"}')
    write(root / "e" / "config.json", json.dumps({"data_backend_config": str(tmp_path / "x")}))
    with pytest.raises(ConfigInvalid, match="not found inside"):
        ConfigCatalog(root).load_with_dataloader("d")
    with pytest.raises(ConfigInvalid, match="not found inside"):
        ConfigCatalog(root).load_with_dataloader("e")


def test_data_backend_config_missing_or_not_a_path(tmp_path: Path) -> None:
    write(tmp_path / "f.json", '{"data_backend_config": "gone.json"}')
    write(tmp_path / "g.json", '{"data_backend_config": 7}')
    with pytest.raises(ConfigInvalid, match=r"gone\.json"):
        ConfigCatalog(tmp_path).load_with_dataloader("f")
    with pytest.raises(ConfigInvalid, match="must be a file path"):
        ConfigCatalog(tmp_path).load_with_dataloader("g")


def test_dataloader_must_be_a_list_or_object(tmp_path: Path) -> None:
    write(tmp_path / "h" / "config.json", "{}")
    write(tmp_path / "h" / "multidatabackend.json", '"just a string"')
    with pytest.raises(ConfigInvalid, match="list or an object"):
        ConfigCatalog(tmp_path).load_with_dataloader("h")


def test_not_found_lists_what_is_available(configs: Path) -> None:
    with pytest.raises(ConfigNotFound) as caught:
        ConfigCatalog(configs).load("missing")
    assert str(caught.value) == (
        f"config 'missing' not found in {configs}; available: flux, plain, sdxl, short, tiny"
    )
    assert isinstance(caught.value, TunefleetError)
    assert caught.value.status == 404


def test_not_found_lists_at_most_ten(tmp_path: Path) -> None:
    for i in range(13):
        write(tmp_path / f"c{i:02d}.json", "{}")
    with pytest.raises(ConfigNotFound) as caught:
        ConfigCatalog(tmp_path).load("x")
    message = str(caught.value)
    assert "c09" in message
    assert "c10" not in message
    assert message.endswith("(and 3 more)")


def test_not_found_in_an_empty_or_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigNotFound, match="available: none"):
        ConfigCatalog(tmp_path).load("x")
    with pytest.raises(ConfigNotFound, match="does not exist"):
        ConfigCatalog(tmp_path / "nope").load("x")


@pytest.mark.parametrize(
    "name",
    [
        "",
        "  ",
        "..",
        "../etc",
        "a/../../etc",
        "a//b",
        "a/.hidden",
        "a\\b",
        "/etc/passwd",
        ".hidden",
        "a\x00b",
        "line\nbreak",
    ],
)
def test_names_that_could_escape_are_refused(configs: Path, name: str) -> None:
    catalog = ConfigCatalog(configs)
    with pytest.raises(ConfigNameInvalid) as caught:
        catalog.load(name)
    assert caught.value.status == 400
    with pytest.raises(ConfigNameInvalid):
        catalog.load_with_dataloader(name)


def test_a_config_with_a_space_in_its_name_is_fine(tmp_path: Path) -> None:
    write(tmp_path / "my run.json", '{"a": 1}')
    assert ConfigCatalog(tmp_path).load("my run") == {"a": 1}


@pytest.mark.parametrize(
    ("filename", "text", "where"),
    [
        ("bad.json", '{\n  "a": 1,\n  oops\n}', ":3:3: invalid JSON"),
        ("bad.toml", 'a = 1\nb = "unterminated\n', "line 2"),
        ("bad.yaml", "a: 1\nb: [1, 2\n", "invalid YAML"),
    ],
)
def test_parse_errors_name_the_file_and_line(
    tmp_path: Path, filename: str, text: str, where: str
) -> None:
    path = write(tmp_path / filename, text)
    with pytest.raises(ConfigInvalid) as caught:
        ConfigCatalog(tmp_path).load("bad")
    message = str(caught.value)
    assert str(path) in message
    assert where in message


def test_yaml_error_has_a_one_based_line(tmp_path: Path) -> None:
    write(tmp_path / "bad.yaml", "a: 1\nb: c: d\n")
    with pytest.raises(ConfigInvalid, match=r"bad\.yaml:2:\d+: invalid YAML"):
        ConfigCatalog(tmp_path).load("bad")


@pytest.mark.parametrize(
    ("filename", "text", "kind"),
    [
        ("top.json", "[1, 2]", "a list"),
        ("top.yaml", "", "an empty document"),
        ("top.yml", "just words", "a string"),
    ],
)
def test_top_level_must_be_an_object(tmp_path: Path, filename: str, text: str, kind: str) -> None:
    write(tmp_path / filename, text)
    with pytest.raises(ConfigInvalid, match=f"must be an object of options, not {kind}"):
        ConfigCatalog(tmp_path).load("top")


def test_undecodable_file_is_invalid(tmp_path: Path) -> None:
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigInvalid, match="cannot be read"):
        ConfigCatalog(tmp_path).load("bin")


def test_a_file_added_later_is_found_without_a_new_catalog(tmp_path: Path) -> None:
    catalog = ConfigCatalog(tmp_path)
    with pytest.raises(ConfigNotFound):
        catalog.load("late")
    write(tmp_path / "late.json", "{}")
    assert catalog.load("late") == {}


# --- lift_command -----------------------------------------------------------------


def test_lift_command_list() -> None:
    config = {"steps": 1, "tunefleet_command": ["python", "train.py", "--x"]}
    rest, command = lift_command(config)
    assert rest == {"steps": 1}
    assert command == ["python", "train.py", "--x"]
    assert "tunefleet_command" in config  # the input is not changed


def test_lift_command_string_is_split_like_a_shell() -> None:
    _, command = lift_command({"tunefleet_command": "accelerate launch 'my script.py' --n 2"})
    assert command == ["accelerate", "launch", "my script.py", "--n", "2"]


def test_lift_command_absent_or_null() -> None:
    assert lift_command({"a": 1}) == ({"a": 1}, None)
    assert lift_command({"a": 1, "tunefleet_command": None}) == ({"a": 1}, None)


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("", "is empty"),
        ([], "is empty"),
        ([""], "is empty"),
        ("python 'unclosed", "cannot be split"),
        (["python", 3], "list of strings"),
        (42, "list of strings"),
    ],
)
def test_lift_command_rejects_bad_values(raw: object, match: str) -> None:
    with pytest.raises(ConfigInvalid, match=match):
        lift_command({"tunefleet_command": raw})


def test_nested_configs_are_listed_and_loaded_by_their_path(tmp_path: Path) -> None:
    # SimpleTuner keeps examples as config/examples/<name>/config.json.
    nested = tmp_path / "examples" / "flux.peft-lora"
    nested.mkdir(parents=True)
    (nested / "config.json").write_text('{"model_family": "flux"}')
    (tmp_path / "examples" / "plain.json").write_text('{"a": 1}')
    catalog = ConfigCatalog(tmp_path)
    names = [entry.name for entry in catalog.names()]
    assert names == ["examples/flux.peft-lora", "examples/plain"]
    assert catalog.load("examples/flux.peft-lora") == {"model_family": "flux"}
    assert catalog.load("examples/plain") == {"a": 1}


def test_a_symlink_cannot_lead_a_name_out_of_the_directory(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "config.json").write_text('{"secret": true}')
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "escape").symlink_to(outside)
    with pytest.raises(ConfigNotFound):
        ConfigCatalog(configs).load("escape")
