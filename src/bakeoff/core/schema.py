"""Typed YAML: a mapping built into a frozen dataclass, key by key, with errors that name the file, line and key.

src = Source.from_text("params.yaml", text)
obj = build(TrainConfig, raw["train_defaults"], "train_defaults", src)
# params.yaml:42: train_defaults.rank: unknown key (did you mean 'r'?)
"""

from __future__ import annotations

import difflib
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from bakeoff.core.errors import UserError
from bakeoff.core.secrets import KEY_QUERY, credential_in


class ParamsError(UserError):
    """A params.yaml value that cannot be used; the message names file, line and key."""


def key_lines(text: str) -> dict[str, int]:
    """Map every dotted key of a YAML document to its 1-based line."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                lines[key] = k.start_mark.line + 1
                walk(v, key)

    root = yaml.compose(text)
    if root is not None:
        walk(root, "")
    return lines


class Source:
    """Where params came from, to point errors at a line."""

    def __init__(self, path: str, lines: dict[str, int]):
        self.path, self.lines = path, lines

    def line(self, key: str) -> str:
        """``file:line`` of ``key`` (or of its nearest parent that has one)."""
        probe = key
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0]
        return f"{self.path}:{self.lines[probe]}" if probe else self.path

    def error(self, key: str, msg: str) -> ParamsError:
        return ParamsError(f"{self.line(key)}: {key}: {msg}")


# names users bring from PEFT, TRL and other tools → ours
_SYNONYMS = {
    "rank": "r",
    "lora_r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "target_modules": "targets",
    "learning_rate": "lr",
    "batch_size": "micro_batch",
    "per_device_train_batch_size": "micro_batch",
    "max_length": "max_seq_len",
    "optim": "optimizer",
}


def suggest(name: str, known: list[str]) -> str:
    close = [_SYNONYMS[name]] if _SYNONYMS.get(name) in known else difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(sorted(known))})"


def build(cls, raw: Any, key: str, src: Source):
    """Build dataclass ``cls`` from a mapping, checking every key and type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise src.error(key, f"expected a mapping, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls) if not f.name.startswith("_")}
    values = {}
    for k, v in raw.items():
        if k not in known:
            raise src.error(f"{key}.{k}", "unknown key" + suggest(str(k), list(known)))
        values[k] = coerce(v, known[k].type, f"{key}.{k}", src)
    return cls(**values)


_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def coerce(v: Any, typ: Any, key: str, src: Source) -> Any:
    t = str(typ).replace(" ", "")
    optional = "None" in t
    bases = [b for b in t.split("|") if b != "None"]
    base = bases[0]
    if v is None:
        if optional:
            return None
        raise src.error(key, "must not be empty")
    want = _TYPES.get(base)
    if want is None:  # dict, list: checked by the consumer
        return v
    if want is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if want is float and isinstance(v, str):  # YAML reads 1e-3 (without a dot) as a string
        try:
            return float(v)
        except ValueError:
            pass
    if not isinstance(v, want) or (want is int and isinstance(v, bool)):
        if any(isinstance(v, _TYPES[b]) and not isinstance(v, bool) for b in bases[1:] if b in _TYPES):
            return v  # another type of the union (int | str: a count or "auto")
        if isinstance(v, dict) and "dict" in bases[1:]:
            return v  # a mapping where the union allows one (float | dict: one figure or one per technique)
        raise src.error(key, f"expected {' or '.join(bases)}, got {v!r}")
    return v


def check(cond: bool, src: Source, key: str, msg: str) -> None:
    if not cond:
        raise src.error(key, msg)


# where each service's password goes instead of params.yaml (which git, dvc.lock and DVC's run-cache keep)
_PASSWORD_HOME = {
    "tune.storage": "PostgreSQL reads it from PGPASSWORD or ~/.pgpass (libpq's own: `host:port:db:user:password`)",
    "tracking.uri": "MLflow reads it from MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD",
}


def without_secret(url: str | None) -> str:
    """A URL as it may be printed: any user and password (``postgresql://user:pass@host/db``) left out."""
    from urllib.parse import urlsplit

    if not url:
        return "local SQLite"
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl() if parts.netloc else url


def check_no_password(url: str | None, key: str, src: Source) -> None:
    """Refuse a URL in params.yaml that holds a credential: a password (``scheme://user:password@host``), a lone token
    before ``@`` in an http(s) URL, or a key-like query value (``?api-key=…``, ``&token=…``). params.yaml is committed,
    a stage's params are written into dvc.lock and pushed with the run-cache: a secret there is shared with everyone
    who reads the repository or the remote. The error names the key and never prints the secret. A user name alone
    (``postgresql://ana@host/db``) is no secret and passes."""
    from urllib.parse import urlsplit

    if not url or "://" not in url:
        return
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    key_query = KEY_QUERY.search("?" + parts.query) if parts.query else None
    if at and ":" in user:
        said = "a password"
    elif at and parts.scheme.startswith("http"):  # a lone name before @ in an http URL is basic auth's token
        said = "user info (token@)"
    elif key_query:
        said = f"a key-like query value ({key_query['name'][1:]})"
    else:
        return
    shown = parts._replace(
        netloc=f"{user.split(':', 1)[0]}@{host}" if ":" in user else host, query="" if key_query else parts.query
    ).geturl()
    raise src.error(
        key,
        f"the URL holds {said}, and params.yaml is committed (and copied into dvc.lock and "
        f"the DVC run-cache): write it without, {shown}, and give the secret where "
        f"{_PASSWORD_HOME.get(key, 'its client reads it from the environment')}",
    )


def check_tracking_uri(uri: str | None, src: Source, root) -> None:
    """A file store named in params must sit inside the repository (a server URI may be anywhere, with no password)."""
    check_no_password(uri, "tracking.uri", src)
    if not uri or "://" not in uri or uri.split("://")[0] not in ("sqlite", "file"):
        return
    path = uri.split("://", 1)[1]
    path = path[1:] if uri.startswith("sqlite:///") else path
    target = (root / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
    check(
        target.is_relative_to(root.resolve()),
        src,
        "tracking.uri",
        f"{uri!r} writes outside the repository ({root}); use a path inside it, a server URI, or set "
        "MLFLOW_TRACKING_URI yourself",
    )


def renamed(section, prefix: str, renames: dict[str, str], src: Source, why: str = ""):
    """``section`` with deprecated keys renamed, each announced on stderr as ``file:line: old → new`` (``why``: the
    reason the name changed)."""
    import sys

    if not isinstance(section, dict):
        return section
    out = dict(section)
    for old, new in renames.items():
        if old not in out:
            continue
        check(new not in out, src, f"{prefix}.{old}", f"the old name of {prefix}.{new}, which is set too: keep one")
        print(
            f"warning: {src.line(f'{prefix}.{old}')}: {prefix}.{old} is deprecated, rename it {prefix}.{new}"
            + (f" ({why})" if why else ""),
            file=sys.stderr,
        )
        out[new] = out.pop(old)
    return out


# a baseline's `endpoint:` keys and their defaults, and its `price:` keys (bakeoff.evaluate.endpoint reads them)
SPEC_KEYS = {
    "base_url": None,
    "model": None,
    "api_key_env": None,
    "concurrency": 4,
    "timeout_s": 60.0,
    "max_retries": 4,
}
PRICE_KEYS = ("usd_per_1m_input", "usd_per_1m_output")


def check_endpoint(b, key: str):
    """(key, message) for each problem of a baseline's ``endpoint:`` and ``price:`` (bakeoff.evaluate.endpoint)."""
    if b.price is not None and b.endpoint is None:
        yield f"{key}.price", "a price needs an endpoint: the local base model's cost is cost.usd_per_1k_prompt_tokens"
    if b.endpoint is None:
        return
    e = b.endpoint
    if not isinstance(e, dict):
        yield f"{key}.endpoint", f"must be a mapping {{base_url, model, api_key_env}}; got {e!r}"
        return
    for k in e:
        if k not in SPEC_KEYS:
            yield f"{key}.endpoint.{k}", "unknown key" + suggest(str(k), list(SPEC_KEYS))
    for k in ("base_url", "model"):
        if not isinstance(e.get(k), str) or not e.get(k):
            yield f"{key}.endpoint.{k}", "is required (a string)"
    if isinstance(e.get("base_url"), str) and not e["base_url"].startswith(("http://", "https://")):
        yield f"{key}.endpoint.base_url", f"must start with http:// or https://; got {e['base_url']!r}"
    secret = credential_in(e.get("base_url")) if isinstance(e.get("base_url"), str) else None
    if secret:
        yield (
            f"{key}.endpoint.base_url",
            (
                f"holds {secret}, and params.yaml is committed (and copied into dvc.lock, "
                "eval.json and MLflow): write the URL without it and put the key in an "
                "environment variable named by api_key_env"
            ),
        )
    if "api_key" in e:
        yield f"{key}.endpoint.api_key", "never write a key into params.yaml: name its variable in api_key_env"
    for k in ("concurrency", "max_retries"):
        if k in e and (not isinstance(e[k], int) or e[k] < (1 if k == "concurrency" else 0)):
            yield f"{key}.endpoint.{k}", f"must be an integer ≥ {1 if k == 'concurrency' else 0}; got {e[k]!r}"
    if b.search:
        yield (
            f"{key}.search",
            (
                "a prompt search over an endpoint is not built yet: write the shots, selection and "
                "instruction to use (they run as written)"
            ),
        )
    for k, v in (b.price or {}).items():
        if k not in PRICE_KEYS:
            yield f"{key}.price.{k}", "unknown key" + suggest(str(k), list(PRICE_KEYS))
        elif not isinstance(v, (int, float)) or v < 0:
            yield f"{key}.price.{k}", f"must be a number ≥ 0 ($ per million tokens); got {v!r}"
