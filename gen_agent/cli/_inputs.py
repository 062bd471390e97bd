"""Where the commands' prompts come from: arguments, files and stdin, read as strict UTF-8.

- `read_prompt_file(source)`: the whole text of a file, or of stdin for `"-"`, as `pool` reads
  it (one prompt per line) and `run` reads `-` and `@FILE` (one prompt each). Bytes that are
  not UTF-8 are refused, never replaced: a binary file or stream is bad input, not prompts.
- `expand_prompts(args)`: `run`'s arguments as prompts (`-` stdin, `@FILE` a file, `@@text`
  the literal `@text`), so prompts longer than the 128 KiB argument limit can be sent.
- `read_line(console, prompt)`: one line typed at `chat`, strictly UTF-8.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from gen_agent.cli._support import CliError

__all__ = ["STDIN", "expand_prompts", "label", "read_line", "read_prompt_file", "strict_stdin"]

STDIN: Final = "-"
"""The file name that means standard input."""

_NOT_UTF8: Final = "it is not UTF-8 text"


def label(source: str) -> str:
    """How messages name `source`: `stdin` or `prompt file 'x'`."""
    return "stdin" if source == STDIN else f"prompt file {source!r}"


def read_prompt_file(source: str) -> str:
    """The text of the file `source`, or of stdin when `source` is `"-"`.

    Raises:
        CliError: it cannot be read (the OS error), or it is not UTF-8 text; one message
            form for files and stdin (`cannot read prompt file 'x': it is not UTF-8 text`,
            `cannot read stdin: it is not UTF-8 text`).
    """
    try:
        if source == STDIN:
            data: bytes | str = _read_stdin()
        else:
            with open(source, "rb") as handle:
                data = handle.read()
    except OSError as exc:
        raise CliError(f"cannot read {label(source)}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8") if isinstance(data, bytes) else _utf8(data)
    except UnicodeError:
        raise CliError(f"cannot read {label(source)}: {_NOT_UTF8}") from None


def _read_stdin() -> bytes | str:
    buffer = getattr(sys.stdin, "buffer", None)
    return buffer.read() if buffer is not None else sys.stdin.read()


def _utf8(text: str) -> str:
    # Text decoded with surrogateescape (Python's stdin in the C locale) keeps undecodable
    # bytes as lone surrogates, which do not encode.
    text.encode("utf-8")
    return text


def expand_prompts(args: list[str]) -> list[str]:
    """`run`'s prompt arguments as prompts, in order.

    `-` is the whole of stdin (once at most), `@FILE` the whole of that file, `@@text` the
    literal prompt `@text`; anything else is the prompt itself. A prompt read from stdin or a
    file is stripped of surrounding whitespace.

    Raises:
        CliError: as `read_prompt_file`; also `-` given twice, or a file or stdin with no
            text.
    """
    prompts: list[str] = []
    stdin_used = False
    for arg in args:
        if arg == STDIN:
            if stdin_used:
                raise CliError("'-' (a prompt read from stdin) can be given once")
            stdin_used = True
            source = STDIN
        elif arg.startswith("@@"):
            prompts.append(arg[1:])
            continue
        elif arg.startswith("@") and len(arg) > 1:
            source = arg[1:]
        else:
            prompts.append(arg)
            continue
        text = read_prompt_file(source).strip()
        if not text:
            raise CliError(f"{label(source)} has no prompt (it is empty)")
        prompts.append(text)
    return prompts


def strict_stdin() -> None:
    """Make stdin decode as strict UTF-8 (no replaced or escaped bytes), when it can be."""
    reconfigure = getattr(sys.stdin, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(encoding="utf-8", errors="strict")
        except (ValueError, OSError):  # already read from, or not reconfigurable: see read_line
            return


def read_line(console: Any, prompt: str) -> str:
    """One line of `chat` input (rich `Console.input`), stripped.

    Raises:
        CliError: the line is not UTF-8 text (`cannot read stdin: it is not UTF-8 text`).
        EOFError, KeyboardInterrupt: as `input()`.
    """
    try:
        return _utf8(console.input(prompt)).strip()
    except UnicodeError:
        raise CliError(f"cannot read {label(STDIN)}: {_NOT_UTF8}") from None
