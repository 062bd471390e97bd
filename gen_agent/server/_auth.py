"""Who is asking: `Principal`, the bearer-token table `BearerTokens`, and the default
`authenticate` hook of `gen_agent.server`.

A principal is a tenant (the unit of isolation, keys and budgets) and a subject (who inside
it, for logs and audits). The server asks `authenticate(request)` for every request but the
health probes; the hook returns a `Principal`, or None to refuse with 401.

The built-in hook reads bearer tokens (`Authorization: Bearer <token>`) from a table:

- `GEN_AGENT_SERVER_TOKENS`: entries separated by commas or newlines;
- `GEN_AGENT_SERVER_TOKEN_FILE`: a file with one entry a line (`#` starts a comment).

An entry is `tenant:token` or `tenant/subject:token` (the first `:` splits; a tenant or subject
holds no `/`, `:` or whitespace; a token is at least 16 characters). A presented token is
compared with every entry in constant time (SHA-256 digests through `hmac.compare_digest`),
so neither its length nor how many characters match shows in the timing.

With no table and no hook the server is loopback-only: a request from a non-loopback peer
or with a non-loopback `Host` header (a DNS-rebinding page) is refused, and every loopback
request is the principal `Principal(tenant="local", subject="local")`.

Mirrors: nothing in the Elixir original.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["LOCAL", "BearerTokens", "Principal", "is_loopback", "presented_token"]

_NAME = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}$")
_MIN_TOKEN_CHARS = 16
ENV_TOKENS = "GEN_AGENT_SERVER_TOKENS"
ENV_TOKEN_FILE = "GEN_AGENT_SERVER_TOKEN_FILE"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """Who a request is from.

    Fields:
        tenant: the tenant (a non-empty str): keys, response ids, rate limits and budgets are
            per tenant.
        subject: who inside the tenant (a str; for audits, never part of a key).
    """

    tenant: str
    subject: str


LOCAL = Principal(tenant="local", subject="local")
"""The principal of every request on a loopback-only server without auth."""


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an IP address, `"localhost"`, or a `Host` header value with its port)
    names only this machine."""
    if not host:
        return False
    if host.startswith("["):  # [::1]:8000
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:  # 127.0.0.1:8000, localhost:8000
        host = host.split(":", 1)[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def presented_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token of an `Authorization: Bearer <token>` header, or None."""
    header = headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        token = header[7:].strip()
        return token or None
    return None


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class BearerTokens:
    """A table of bearer tokens, each naming a `Principal`. Call it with a request (or any
    object with `headers`) to get the principal of its token, or None.

    Args:
        entries: `{token: Principal}`.

    Raises:
        ValueError: a token shorter than 16 characters, or an empty table.
    """

    def __init__(self, entries: Mapping[str, Principal]) -> None:
        if not entries:
            raise ValueError("BearerTokens: no token given")
        table = []
        for token, principal in entries.items():
            if not isinstance(token, str) or len(token) < _MIN_TOKEN_CHARS:
                raise ValueError(f"BearerTokens: a token must be a str of at least "
                                 f"{_MIN_TOKEN_CHARS} characters (tenant {principal.tenant!r})")
            if not isinstance(principal, Principal):
                raise ValueError("BearerTokens: each token names a Principal")
            table.append((_digest(token), principal))
        self._table = tuple(table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:  # never the tokens
        return f"<BearerTokens {len(self._table)} tokens>"

    @classmethod
    def parse(cls, text: str, *, where: str = "tokens") -> BearerTokens:
        """Read entries (`tenant:token` or `tenant/subject:token`, separated by commas or
        newlines; `#` starts a comment) from `text`.

        Raises:
            ValueError: a malformed entry (the message names its line, never the token).
        """
        entries: dict[str, Principal] = {}
        number = 0
        for line in text.splitlines():
            line = line.split("#", 1)[0]
            for raw in line.split(","):
                number += 1
                entry = raw.strip()
                if not entry:
                    continue
                who, sep, token = entry.partition(":")
                tenant, _, subject = who.partition("/")
                subject = subject or tenant
                if not sep or not _NAME.match(tenant) or not _NAME.match(subject):
                    raise ValueError(f"{where}: entry {number} is not tenant:token or "
                                     "tenant/subject:token")
                if token in entries:
                    raise ValueError(f"{where}: entry {number} repeats a token")
                entries[token.strip()] = Principal(tenant=tenant, subject=subject)
        return cls(entries)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BearerTokens:
        """Read the table from a file (one entry a line; see `parse`)."""
        return cls.parse(Path(path).read_text("utf-8"), where=str(path))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BearerTokens | None:
        """The table from `GEN_AGENT_SERVER_TOKENS` and/or the file named by
        `GEN_AGENT_SERVER_TOKEN_FILE`; None when neither is set."""
        env = os.environ if environ is None else environ
        text = env.get(ENV_TOKENS, "")
        path = env.get(ENV_TOKEN_FILE)
        if path:
            text += "\n" + Path(path).read_text("utf-8")
        if not text.strip():
            return None
        return cls.parse(text, where=ENV_TOKENS if not path else f"{ENV_TOKENS}/{path}")

    def lookup(self, token: str | None) -> Principal | None:
        """The principal of `token`, comparing it with every entry in constant time."""
        if token is None:
            return None
        given = _digest(token)
        found = None
        for digest, principal in self._table:
            if hmac.compare_digest(given, digest):  # no early exit: the timing is the same
                found = principal
        return found

    def __call__(self, request: Any) -> Principal | None:
        return self.lookup(presented_token(request.headers))
