"""Check HTTP requests against GitHub's published OpenAPI description (npm @octokit/openapi)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import jsonschema
import jsonschema.exceptions
from referencing import Registry
from referencing.jsonschema import DRAFT4

REPO_ROOT = Path(__file__).resolve().parents[1]
# GitHub's description: from the checkout's pinned npm package, or wherever
# GAFFER_GITHUB_OPENAPI points (an installed gaffer: `npm install @octokit/openapi` and
# point it at generated/api.github.com.json in the package).
SPEC_PATH = Path(
    os.environ.get("GAFFER_GITHUB_OPENAPI")
    or REPO_ROOT / "tests/contract/node_modules/@octokit/openapi/generated/api.github.com.json"
)
INSTALL_COMMAND = "npm ci --prefix tests/contract"
ENTERPRISE_PREFIX = "/api/v3"
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SPEC_URI = "urn:gaffer:github-openapi"

# Path parameters whose values may contain "/" (file paths, refs, branch names).
SLASHED_PARAMETERS = frozenset({"path", "ref", "branch", "basehead", "base", "head", "name"})


class ContractError(Exception):
    """A request that GitHub's OpenAPI description does not allow."""


class SpecNotInstalledError(RuntimeError):
    """GitHub's OpenAPI description is not on disk."""


@dataclass(frozen=True)
class Route:
    """One path template of the spec, compiled for matching."""

    template: str
    parameter_names: tuple[str, ...]
    strict: re.Pattern[str]
    slashed: re.Pattern[str]
    specificity: tuple[int, ...]
    operations: Mapping[str, Mapping[str, Any]]


def _segment_rank(segment: str) -> int:
    """Rank a template segment: literal before mixed before a bare parameter."""
    if "{" not in segment:
        return 0
    return 2 if re.fullmatch(r"\{[^}]+\}", segment) else 1


def _template_regex(template: str, *, allow_slashes: bool) -> re.Pattern[str]:
    """Compile a path template into a regex with one group per parameter."""
    parts = re.split(r"(\{[^}]+\})", template)
    pattern = ""
    for part in parts:
        if part.startswith("{") and part.endswith("}"):
            name = part[1:-1]
            if allow_slashes and name in SLASHED_PARAMETERS:
                # An empty content path is the repository root, which GitHub serves.
                pattern += "(.*)" if name == "path" else "(.+)"
            else:
                pattern += "([^/]+)"
        else:
            pattern += re.escape(part)
    return re.compile(pattern + "$")


def _compile_route(template: str, path_item: Mapping[str, Any]) -> Route:
    """Build the matching data for one path template."""
    return Route(
        template=template,
        parameter_names=tuple(re.findall(r"\{([^}]+)\}", template)),
        strict=_template_regex(template, allow_slashes=False),
        slashed=_template_regex(template, allow_slashes=True),
        specificity=tuple(_segment_rank(s) for s in template.split("/")),
        operations={m: op for m, op in path_item.items() if m in HTTP_METHODS},
    )


def _allow_null(check: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """Wrap a keyword check so OpenAPI 3.0 `nullable: true` admits null."""

    def keyword(validator: Any, value: Any, instance: Any, schema: Mapping[str, Any]) -> Any:
        if instance is None and schema.get("nullable") is True:
            return
        yield from check(validator, value, instance, schema)

    return keyword


OpenAPISchemaValidator = jsonschema.validators.extend(
    jsonschema.Draft4Validator,
    {
        keyword: _allow_null(jsonschema.Draft4Validator.VALIDATORS[keyword])
        for keyword in ("type", "enum", "oneOf", "anyOf", "allOf")
    },
)


def _json_pointer(*parts: str) -> str:
    """Return a JSON pointer to the given keys."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _coerce(raw: str, schema: Mapping[str, Any]) -> Any:
    """Turn a path or query string into the scalar type its schema declares."""
    kind = schema.get("type")
    if kind == "integer" and re.fullmatch(r"-?\d+", raw):
        return int(raw)
    if kind == "boolean" and raw in ("true", "false"):
        return raw == "true"
    return raw


class Contract:
    """GitHub's REST API description, indexed for checking requests."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.version = spec.get("info", {}).get("version", "unknown")
        self._routes = sorted(
            (_compile_route(t, item) for t, item in spec["paths"].items()),
            key=lambda route: route.specificity,
        )
        self._registry: Registry[Any] = Registry().with_resource(
            SPEC_URI, DRAFT4.create_resource(spec)
        )
        self._body_validators: dict[str, Any] = {}

    def validate_request(
        self, method: str, url: str, body: bytes | str | None, *, base_url: str = ""
    ) -> None:
        """Raise ContractError unless GitHub's description allows this request."""
        method = method.lower()
        path, query = self._split_url(url, base_url)
        where = f"{method.upper()} {path}"
        route, operation, path_params = self._find_operation(method, path, where)
        where = f"{where} ({operation.get('operationId', route.template)})"
        parameters = self._parameters(route, operation)
        self._check_path_parameters(parameters, path_params, where)
        self._check_query(parameters, query, where)
        self._check_body(route, method, operation, body, where)

    @staticmethod
    def _split_url(url: str, base_url: str) -> tuple[str, dict[str, list[str]]]:
        """Return the API path (prefixes removed) and the parsed query."""
        parts = urlsplit(url)
        path = parts.path or "/"
        base_path = urlsplit(base_url).path.rstrip("/")
        if base_path and path.startswith(base_path + "/"):
            path = path[len(base_path) :]
        if path.startswith(ENTERPRISE_PREFIX + "/"):
            path = path[len(ENTERPRISE_PREFIX) :]
        return path, parse_qs(parts.query, keep_blank_values=True)

    def _find_operation(
        self, method: str, path: str, where: str
    ) -> tuple[Route, Mapping[str, Any], dict[str, str]]:
        """Find the template and operation for a path, or raise ContractError."""
        matches = list(self._matching_routes(path))
        if not matches:
            raise ContractError(f"{where}: no path in GitHub's REST API matches {path!r}")
        for route, params in matches:
            if method in route.operations:
                return route, route.operations[method], params
        templates = ", ".join(sorted({r.template for r, _ in matches}))
        allowed = sorted({m.upper() for r, _ in matches for m in r.operations})
        raise ContractError(
            f"{where}: method {method.upper()} is not defined for {templates} "
            f"(allowed: {', '.join(allowed)})"
        )

    def _matching_routes(self, path: str) -> Iterator[tuple[Route, dict[str, str]]]:
        """Yield routes matching the path, most specific first, slash-tolerant last."""
        for attribute in ("strict", "slashed"):
            for route in self._routes:
                found = getattr(route, attribute).match(path)
                if found:
                    values = (unquote(v) for v in found.groups())
                    yield route, dict(zip(route.parameter_names, values, strict=True))

    def _parameters(self, route: Route, operation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Return the operation's parameter objects with references resolved."""
        shared = self.spec["paths"][route.template].get("parameters", [])
        return [self._resolve(p) for p in [*shared, *operation.get("parameters", [])]]

    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        """Follow local `$ref`s until reaching a concrete object."""
        while "$ref" in node:
            target: Any = self.spec
            for key in node["$ref"].removeprefix("#/").split("/"):
                target = target[key.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def _check_path_parameters(
        self, parameters: list[Mapping[str, Any]], values: dict[str, str], where: str
    ) -> None:
        """Check each path parameter against its schema."""
        for parameter in parameters:
            if parameter["in"] == "path" and parameter["name"] in values:
                self._check_value(parameter, values[parameter["name"]], where)

    def _check_query(
        self, parameters: list[Mapping[str, Any]], query: dict[str, list[str]], where: str
    ) -> None:
        """Require the required query parameters and check the scalar ones given."""
        for parameter in parameters:
            if parameter["in"] != "query":
                continue
            name = parameter["name"]
            if name not in query:
                if parameter.get("required"):
                    raise ContractError(f"{where}: required query parameter {name!r} is missing")
                continue
            if parameter.get("schema", {}).get("type") not in ("array", "object"):
                self._check_value(parameter, query[name][-1], where)

    def _check_value(self, parameter: Mapping[str, Any], raw: str, where: str) -> None:
        """Validate one path or query value against the parameter's schema."""
        schema = self._resolve(parameter.get("schema", {}))
        value = _coerce(raw, schema)
        error = jsonschema.exceptions.best_match(
            OpenAPISchemaValidator(schema, registry=self._registry).iter_errors(value)
        )
        if error is not None:
            raise ContractError(
                f"{where}: {parameter['in']} parameter {parameter['name']!r}={raw!r} "
                f"is invalid: {error.message}"
            )

    def _check_body(
        self,
        route: Route,
        method: str,
        operation: Mapping[str, Any],
        body: bytes | str | None,
        where: str,
    ) -> None:
        """Validate the JSON body against the operation's requestBody schema."""
        payload = _parse_body(body, where)
        request_body = self._resolve(operation.get("requestBody", {}))
        if not request_body:
            if payload not in (None, {}):
                raise ContractError(f"{where}: this operation takes no request body")
            return
        if "application/json" not in request_body.get("content", {}):
            return
        if payload is None:
            if request_body.get("required"):
                raise ContractError(f"{where}: a JSON request body is required")
            return
        pointer = _json_pointer(
            "paths", route.template, method, "requestBody", "content", "application/json", "schema"
        )
        error = jsonschema.exceptions.best_match(self._body_validator(pointer).iter_errors(payload))
        if error is not None:
            at = "".join(f"[{p!r}]" for p in error.absolute_path) or "the body"
            raise ContractError(
                f"{where}: request body does not match GitHub's schema at {at}: {error.message}"
            )

    def _body_validator(self, pointer: str) -> Any:
        """Return a (cached) validator for the schema at the pointer."""
        if pointer not in self._body_validators:
            schema = {"$ref": f"{SPEC_URI}#{pointer}"}
            self._body_validators[pointer] = OpenAPISchemaValidator(schema, registry=self._registry)
        return self._body_validators[pointer]


def _parse_body(body: bytes | str | None, where: str) -> Any:
    """Decode a JSON request body; None when there is none."""
    if body is None or body in (b"", ""):
        return None
    try:
        return json.loads(body)
    except ValueError as error:
        raise ContractError(f"{where}: request body is not JSON: {error}") from None


def load_contract(path: Path = SPEC_PATH) -> Contract:
    """Read GitHub's OpenAPI description from disk."""
    if not path.is_file():
        raise SpecNotInstalledError(
            f"GitHub's OpenAPI description is missing ({path}). Install it with: {INSTALL_COMMAND}"
        )
    with path.open("rb") as spec_file:
        return Contract(json.load(spec_file))


@functools.cache
def default_contract() -> Contract:
    """Return the contract from the installed npm package, loaded once per process."""
    return load_contract()


def validate_request(
    method: str, url: str, body: bytes | str | None, *, base_url: str = ""
) -> None:
    """Raise ContractError unless GitHub's OpenAPI description allows this request."""
    default_contract().validate_request(method, url, body, base_url=base_url)
