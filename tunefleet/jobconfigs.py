"""Training configurations, found by name in the configs directory.

Two layouts are understood, the folder one first:

* SimpleTuner's ``<dir>/<name>/config.json`` (or ``config.toml``, ``config.yaml``,
  ``config.yml``), with an optional ``<name>/multidatabackend.json`` beside it;
* a single file ``<dir>/<name>.json`` (or ``.toml``, ``.yaml``, ``.yml``).

Reading is synchronous (the files are small); an HTTP handler that lists a large
directory can run it with ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from tunefleet.errors import BadRequest, NotFound

ConfigFormat = Literal["json", "toml", "yaml"]
DataloaderConfig = list[Any] | dict[str, Any]

# Order matters: the first suffix found wins when several exist.
_SUFFIXES: tuple[tuple[str, ConfigFormat], ...] = (
    (".json", "json"),
    (".toml", "toml"),
    (".yaml", "yaml"),
    (".yml", "yaml"),
)
_DATALOADER_FILE = "multidatabackend.json"
# SimpleTuner writes its options with or without the leading dashes.
_DATALOADER_KEYS = ("data_backend_config", "--data_backend_config")
COMMAND_KEY = "tunefleet_command"
_MAX_LISTED = 10
_BAD_NAME = re.compile(r"[\\\x00-\x1f\x7f]")
# How deep configurations may sit in folders (SimpleTuner keeps config/examples/<name>).
_MAX_DEPTH = 3


class ConfigNotFound(NotFound):
    """No configuration of that name in the configs directory."""


class ConfigInvalid(BadRequest):
    """The file exists but cannot be used: a parse error, or not a mapping at the top."""


class ConfigNameInvalid(BadRequest):
    """The name is not a plain name (path separators, ``..``, absolute, hidden)."""


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    path: Path
    format: ConfigFormat
    modified_at: float


class ConfigCatalog:
    """The configurations under one directory, looked up by name on every call
    (so a file added while the server runs is found without a restart)."""

    def __init__(self, configs_dir: Path) -> None:
        self.configs_dir = configs_dir

    def names(self) -> list[ConfigEntry]:
        """Every loadable configuration, sorted by name; a folder wins over a file."""
        found: dict[str, ConfigEntry] = {}
        for name, path, fmt in self._candidates():
            if name in found:
                continue
            try:
                modified_at = path.stat().st_mtime
            except OSError:  # removed while we listed
                continue
            found[name] = ConfigEntry(name, path, fmt, modified_at)
        return [found[name] for name in sorted(found)]

    def load(self, name: str) -> dict[str, Any]:
        entry = self._entry(name)
        return _read_mapping(entry.path, entry.format)

    def load_with_dataloader(self, name: str) -> tuple[dict[str, Any], DataloaderConfig | None]:
        """The configuration and its data-loader configuration, if it has one: the file
        its ``data_backend_config`` key names, else ``multidatabackend.json`` beside it."""
        entry = self._entry(name)
        config = _read_mapping(entry.path, entry.format)
        reference = next((config[k] for k in _DATALOADER_KEYS if config.get(k)), None)
        if reference is not None:
            if not isinstance(reference, str):
                raise ConfigInvalid(
                    f"{entry.path}: data_backend_config must be a file path, "
                    f"not {type(reference).__name__}"
                )
            return config, _read_dataloader(self._resolve_reference(entry.path, reference))
        sibling = entry.path.parent / _DATALOADER_FILE
        if entry.path.name.startswith("config.") and sibling.is_file():
            return config, _read_dataloader(sibling)
        return config, None

    # --- lookup -------------------------------------------------------------------

    def _entry(self, name: str) -> ConfigEntry:
        validate_name(name)
        root = self.configs_dir.resolve()
        for path, fmt in self._paths_for(name):
            # A symlink may not lead a name out of the directory either.
            if path.is_file() and path.resolve().is_relative_to(root):
                return ConfigEntry(name, path, fmt, path.stat().st_mtime)
        raise ConfigNotFound(self._not_found_message(name))

    def _paths_for(self, name: str) -> Iterator[tuple[Path, ConfigFormat]]:
        folder = self.configs_dir / name
        for suffix, fmt in _SUFFIXES:
            yield folder / f"config{suffix}", fmt
        for suffix, fmt in _SUFFIXES:
            yield self.configs_dir / f"{name}{suffix}", fmt

    def _candidates(self) -> Iterator[tuple[str, Path, ConfigFormat]]:
        if self.configs_dir.is_dir():
            yield from self._candidates_in(self.configs_dir, "", 1)

    def _candidates_in(
        self, folder: Path, prefix: str, depth: int
    ) -> Iterator[tuple[str, Path, ConfigFormat]]:
        children = sorted(folder.iterdir())
        subfolders: list[Path] = []
        for child in children:
            if child.name.startswith(".") or not child.is_dir():
                continue
            for suffix, fmt in _SUFFIXES:
                path = child / f"config{suffix}"
                if path.is_file():
                    yield prefix + child.name, path, fmt
                    break
            else:
                subfolders.append(child)
        for child in children:
            fmt_or_none = _format_of(child)
            if fmt_or_none is None or child.name.startswith(".") or not child.is_file():
                continue
            # A data-loader file is not a training configuration.
            if child.stem.startswith("multidatabackend"):
                continue
            yield prefix + child.stem, child, fmt_or_none
        if depth < _MAX_DEPTH:
            for sub in subfolders:
                yield from self._candidates_in(sub, f"{prefix}{sub.name}/", depth + 1)

    def _not_found_message(self, name: str) -> str:
        if not self.configs_dir.is_dir():
            return (
                f"config '{name}' not found: the configs directory {self.configs_dir} "
                "does not exist (start the server with --configs-dir)"
            )
        available = [entry.name for entry in self.names()]
        if not available:
            listing = "none"
        elif len(available) > _MAX_LISTED:
            rest = len(available) - _MAX_LISTED
            listing = f"{', '.join(available[:_MAX_LISTED])} (and {rest} more)"
        else:
            listing = ", ".join(available)
        return f"config '{name}' not found in {self.configs_dir}; available: {listing}"

    def _resolve_reference(self, config_path: Path, reference: str) -> Path:
        """Find the data-loader file a config names. SimpleTuner writes these paths
        relative to its own working directory (``config/<name>/multidatabackend.json``),
        so besides the config's folder and the configs directory, a path starting with
        the configs directory's own name is tried inside it. Only files inside the
        configs directory are accepted."""
        ref = Path(reference)
        root = self.configs_dir.resolve()
        tries = [ref] if ref.is_absolute() else [config_path.parent / ref, self.configs_dir / ref]
        if not ref.is_absolute() and len(ref.parts) > 1 and ref.parts[0] == self.configs_dir.name:
            tries.append(self.configs_dir.joinpath(*ref.parts[1:]))
        for candidate in tries:
            resolved = candidate.resolve()
            if resolved.is_relative_to(root) and resolved.is_file():
                return resolved
        raise ConfigInvalid(
            f"{config_path}: data_backend_config '{reference}' was not found inside "
            f"{self.configs_dir} (looked at: {', '.join(str(t) for t in tries)})"
        )


def validate_name(name: str) -> None:
    """Refuse anything but a relative name inside the directory (``sdxl`` or
    ``examples/flux.peft-lora``), so a request cannot read outside it."""
    if not name or not name.strip():
        raise ConfigNameInvalid("config name is empty; give the name of a configuration")
    parts = name.split("/")
    if (
        _BAD_NAME.search(name)
        or any(not part or part.startswith(".") for part in parts)
        or Path(name).is_absolute()
        or Path(name).drive
    ):
        raise ConfigNameInvalid(
            f"config name {name!r} is not allowed: use the name of a folder or file inside "
            "the configs directory, with '/' between folder names (no '..', no leading dot)"
        )


def lift_command(config: dict[str, Any]) -> tuple[dict[str, Any], list[str] | None]:
    """Take the ``tunefleet_command`` key out of a config: the command the job runs
    instead of the worker's default. A string is split the way a shell would."""
    rest = {k: v for k, v in config.items() if k != COMMAND_KEY}
    raw = config.get(COMMAND_KEY)
    if raw is None:
        return rest, None
    if isinstance(raw, str):
        try:
            command = shlex.split(raw)
        except ValueError as error:
            raise ConfigInvalid(f"{COMMAND_KEY} cannot be split: {error}") from error
    elif isinstance(raw, list) and all(isinstance(part, str) for part in raw):
        command = list(raw)
    else:
        raise ConfigInvalid(f"{COMMAND_KEY} must be a list of strings or a string")
    if not command or not command[0]:
        raise ConfigInvalid(f"{COMMAND_KEY} is empty; give the program to run")
    return rest, command


# --- parsing ----------------------------------------------------------------------


def _format_of(path: Path) -> ConfigFormat | None:
    for suffix, fmt in _SUFFIXES:
        if path.name.endswith(suffix):
            return fmt
    return None


def _parse_json(text: str, path: Path) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigInvalid(
            f"{path}:{error.lineno}:{error.colno}: invalid JSON: {error.msg}"
        ) from error


def _parse_toml(text: str, path: Path) -> object:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        # The message already says "(at line L, column C)".
        raise ConfigInvalid(f"{path}: invalid TOML: {error}") from error


def _parse_yaml(text: str, path: Path) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = error.problem or error.context or "parse error"
        raise ConfigInvalid(f"{where}: invalid YAML: {problem}") from error
    except yaml.YAMLError as error:
        raise ConfigInvalid(f"{path}: invalid YAML: {error}") from error


_PARSERS: dict[ConfigFormat, Callable[[str, Path], object]] = {
    "json": _parse_json,
    "toml": _parse_toml,
    "yaml": _parse_yaml,
}


def _read(path: Path, fmt: ConfigFormat) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigInvalid(f"{path}: cannot be read: {error}") from error
    return _PARSERS[fmt](text, path)


def _read_mapping(path: Path, fmt: ConfigFormat) -> dict[str, Any]:
    data = _read(path, fmt)
    if not isinstance(data, dict):
        raise ConfigInvalid(
            f"{path}: the top level must be an object of options, not {_kind(data)}"
        )
    return data


def _read_dataloader(path: Path) -> DataloaderConfig:
    data = _read(path, _format_of(path) or "json")
    if not isinstance(data, list | dict):
        raise ConfigInvalid(f"{path}: a data-loader config must be a list or an object")
    return data


def _kind(data: object) -> str:
    if data is None:
        return "an empty document"
    if isinstance(data, list):
        return "a list"
    if isinstance(data, str):
        return "a string"
    return f"a {type(data).__name__}"
