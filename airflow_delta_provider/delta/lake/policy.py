"""Load a lake policy file: JSON always, YAML when PyYAML is installed (it comes with Airflow); the rules and
their validation are `protocol.lake_policy`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidArgumentError
from ..protocol.lake_policy import LakePolicy, parse_policy
from ..storage import store_for


def parse_policy_text(text: str, *, origin: str = "policy", yaml_allowed: bool = True) -> LakePolicy:
    """A policy from its JSON or YAML text (JSON first: JSON is YAML too, but needs no extra package)."""
    try:
        document = json.loads(text)
    except ValueError as json_error:
        if not yaml_allowed:
            raise InvalidArgumentError(
                f"Invalid lake policy {origin}: not JSON: {json_error}", argument=origin
            ) from None
        try:
            import yaml
        except ImportError:
            raise InvalidArgumentError(
                f"Invalid lake policy {origin}: not JSON ({json_error}), and PyYAML is not installed to read YAML",
                argument=origin,
            ) from None
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidArgumentError(
                f"Invalid lake policy {origin}: not JSON or YAML: {exc}", argument=origin
            ) from None
    return parse_policy(document, origin="policy")


def load_policy(uri: str | None, storage_options: Mapping[str, Any] | None = None) -> LakePolicy:
    """The policy in the file at `uri` (a local path or a store URI); None: the defaults from table properties."""
    if uri is None:
        return LakePolicy()
    try:
        data = store_for(uri, storage_options).read_bytes(uri)
    except FileNotFoundError:
        raise InvalidArgumentError(f"Lake policy file not found: {uri}", argument="policy") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"Lake policy file is not UTF-8 text: {uri}", argument="policy") from None
    return parse_policy_text(text, origin=uri, yaml_allowed=not uri.endswith(".json"))
