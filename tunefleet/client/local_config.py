"""What to submit: a config name on the orchestrator, or a local file sent inline
(`tunefleet jobs submit CONFIG`, ``Client.submit(Path(...))``).

A local file is ``.json``, ``.toml``, ``.yaml`` or ``.yml``, or a folder in SimpleTuner's
layout (``<folder>/config.json`` with ``multidatabackend.json`` beside it, which is sent
as the job's data-loader configuration).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tunefleet.client.errors import ClientError

SUFFIXES = (".json", ".toml", ".yaml", ".yml")
DATALOADER_FILE = "multidatabackend.json"


class LocalConfigError(ClientError, ValueError):
    """The local configuration cannot be read; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class SubmitSource:
    """What the submit body carries: ``config_name``, or ``config`` (+ ``dataloader``)."""

    config_name: str | None = None
    config: dict[str, Any] | None = None
    dataloader: Any = None
    name: str | None = None

    def body(self) -> dict[str, Any]:
        if self.config_name is not None:
            return {"config_name": self.config_name}
        body: dict[str, Any] = {"config": self.config, "name": self.name}
        if self.dataloader is not None:
            body["dataloader"] = self.dataloader
        return body


def resolve(config: str | Path) -> SubmitSource:
    """A local path when one exists (or CONFIG looks like one), else a config name."""
    path = Path(config).expanduser()
    if isinstance(config, Path) and not path.exists():
        raise LocalConfigError(f"{config}: no such file or folder")
    config = str(config)
    if path.is_dir():
        for suffix in SUFFIXES:
            candidate = path / f"config{suffix}"
            if candidate.is_file():
                return _from_file(candidate, name=path.resolve().name)
        raise LocalConfigError(f"{config} is a folder without config.json, .toml or .yaml")
    if path.is_file():
        return _from_file(path, name=path.stem)
    # Config names may hold '/' (folders) and '.', so only these mean "a local path".
    if path.suffix.lower() in SUFFIXES or config.startswith(("./", "../", "/", "~")):
        raise LocalConfigError(
            f"{config}: no such file. Give a local .json/.toml/.yaml file, or the name of "
            "a configuration on the orchestrator"
        )
    return SubmitSource(config_name=config)


def _from_file(path: Path, name: str) -> SubmitSource:
    config = _read_mapping(path)
    dataloader = None
    sibling = path.parent / DATALOADER_FILE
    if path.stem == "config" and sibling.is_file():
        dataloader = _parse(sibling)
        if not isinstance(dataloader, list | dict):
            raise LocalConfigError(f"{sibling}: must be a JSON list or object")
    return SubmitSource(config=config, dataloader=dataloader, name=name[:128])


def _read_mapping(path: Path) -> dict[str, Any]:
    if path.suffix.lower() not in SUFFIXES:
        raise LocalConfigError(f"{path}: not a .json, .toml or .yaml file")
    data = _parse(path)
    if not isinstance(data, dict):
        raise LocalConfigError(f"{path}: the configuration must be a mapping at the top level")
    return data


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LocalConfigError(f"cannot read {path}: {error}") from error
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            return yaml.safe_load(text)
        return json.loads(text)
    except (ValueError, yaml.YAMLError) as error:
        kind = {".toml": "TOML", ".yaml": "YAML", ".yml": "YAML"}.get(suffix, "JSON")
        raise LocalConfigError(f"{path}: invalid {kind}: {error}") from error
