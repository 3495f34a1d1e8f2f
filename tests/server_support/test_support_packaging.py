"""The package metadata: installing tunefleet must not warn about how it is declared."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _pyproject() -> dict:
    return tomllib.loads(PYPROJECT.read_text())


def test_license_is_an_spdx_expression() -> None:
    # A table (`{ text = ... }`) makes setuptools >= 77 print a deprecation warning on
    # every `pip install`; PEP 639 wants a plain SPDX expression.
    license_ = _pyproject()["project"]["license"]
    assert isinstance(license_, str)
    assert canonicalize_license_expression(license_) == license_ == "Apache-2.0"
    assert not any(
        c.startswith("License ::") for c in _pyproject()["project"].get("classifiers", [])
    )


def test_the_build_uses_a_setuptools_that_reads_spdx_expressions() -> None:
    requires = [Requirement(r) for r in _pyproject()["build-system"]["requires"]]
    setuptools = next(r for r in requires if r.name == "setuptools")
    assert not setuptools.specifier.contains("76.1") and setuptools.specifier.contains("77.0")
