"""Workspace: every lifecycle hook around an isolated git repository (contract §10).

- `init_agent` validates an optional workspace id (lowercase letters, digits and hyphens, at
  most 63 characters) and computes the workspace path, without touching the disk;
- `pre_run` creates the directory exclusively (an existing one is refused), runs `git init`
  with a timeout per command and with the global/system git configuration, hooks and signing
  disabled, and removes a partial setup when a step fails;
- `pre_turn` rewrites the generic prompt `"next paragraph"` into a grounded one, and after the
  last paragraph checks the commit log and halts (`finished`), or halts on a recorded failure;
- `post_turn` writes and commits each paragraph and records the commit id (a failure is
  recorded in the state, never raised);
- `post_run` prints a summary that claims success only for `finished`;
- `handle_error` halts with phase `failed`.

Hook order: init_agent → start_session → pre_run → pre_turn → backend → decision
(handle_response / handle_error) → post_turn → transition → post_run (on halt) →
terminate_agent (on exit).

Run it: `python docs/examples/workspace.py [--backend NAME]` (needs `git`).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from choose_backend import chosen_backend

import gen_agent
from gen_agent import GenAgent, Halt, InitAgentError, PreRunError, Proceed, Prompt

# --8<-- [start:git]
NEXT = "next paragraph"
_WORKSPACE_ID = re.compile(r"[a-z0-9-]{1,63}")
# Nothing from the user's or the system's git setup may run or sign in the workspace.
_GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0"}
_GIT_CONFIG = ("-c", f"core.hooksPath={os.devnull}", "-c", "commit.gpgsign=false",
               "-c", "init.defaultBranch=main",
               "-c", "user.name=gen_agent workspace", "-c", "user.email=workspace@localhost")


def git(path: str, *args: str, timeout_s: float) -> str:
    """Run one git command in `path`; raises `subprocess.SubprocessError` on failure."""
    done = subprocess.run(["git", *_GIT_CONFIG, *args], cwd=path, capture_output=True,
                          text=True, timeout=timeout_s, check=True,
                          env={**os.environ, **_GIT_ENV})
    return done.stdout.strip()
# --8<-- [end:git]


# --8<-- [start:agent]
@dataclass(frozen=True)
class Book:
    path: str
    topic: str
    paragraphs: int                        # how many to write
    git_timeout_s: float
    report_to: Any = None                  # optional: gets the summary dict on halt
    trace: Callable[[str], Any] | None = None   # optional: told each hook's name
    phase: str = "writing"                 # writing → finished | failed
    written: tuple[tuple[int, str], ...] = ()   # (paragraph number, commit id)
    last_text: str = ""
    failure: Any = None


class WorkspaceWriter(GenAgent):
    def init_agent(self, opts):
        workspace_id = opts.get("workspace_id") or uuid.uuid4().hex[:12]
        if not isinstance(workspace_id, str) or not _WORKSPACE_ID.fullmatch(workspace_id):
            raise InitAgentError(("invalid_workspace_id", workspace_id))
        book = Book(path=os.path.join(opts["root"], workspace_id), topic=opts["topic"],
                    paragraphs=opts.get("paragraphs", 3),
                    git_timeout_s=opts.get("git_timeout_s", 10.0),
                    report_to=opts.get("report_to"), trace=opts.get("trace"))
        _trace(book, "init_agent")
        # The path is known before it exists; a backend that takes a working directory
        # gets it here (see "Real backends" on the recipe's page).
        return opts["backend_opts"], book

    def pre_run(self, book):
        _trace(book, "pre_run")
        try:
            os.mkdir(book.path)                    # exclusive: never reuse a directory
        except FileExistsError:
            raise PreRunError(("workspace_exists", book.path)) from None
        try:
            git(book.path, "init", "-q", timeout_s=book.git_timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            shutil.rmtree(book.path, ignore_errors=True)   # no half-made workspace
            raise PreRunError(("workspace_setup_failed", type(exc).__name__)) from None
        return book

    def pre_turn(self, prompt, book):
        _trace(book, "pre_turn")
        if book.failure is not None:
            return Halt(replace(book, phase="failed"))
        if len(book.written) >= book.paragraphs:
            commits = int(git(book.path, "rev-list", "--count", "HEAD",
                              timeout_s=book.git_timeout_s))
            if commits == book.paragraphs:
                return Halt(replace(book, phase="finished"))
            return Halt(replace(book, phase="failed", failure=("commit_log", commits)))
        if prompt == NEXT:
            number = len(book.written) + 1
            prompt = (f"We are writing {book.paragraphs} short paragraphs about {book.topic}."
                      f" Write paragraph {number}."
                      + (f" The previous one was:\n{book.last_text}" if book.last_text else ""))
        return Proceed(prompt, book)

    def handle_response(self, ref, response, book):
        _trace(book, "handle_response")
        return Prompt(NEXT, replace(book, last_text=response.text))

    def handle_error(self, ref, reason, book):
        _trace(book, "handle_error")
        return Halt(replace(book, phase="failed", failure=reason))

    def post_turn(self, outcome, ref, book):
        _trace(book, "post_turn")
        if outcome[0] != "ok":
            return book
        number = len(book.written) + 1
        name = f"paragraph-{number}.md"
        try:
            with open(os.path.join(book.path, name), "w", encoding="utf-8") as file:
                file.write(outcome[1].text + "\n")
            git(book.path, "add", name, timeout_s=book.git_timeout_s)
            git(book.path, "commit", "-q", "-m", f"Paragraph {number}",
                timeout_s=book.git_timeout_s)
            sha = git(book.path, "rev-parse", "HEAD", timeout_s=book.git_timeout_s)
        except (OSError, subprocess.SubprocessError) as exc:
            return replace(book, failure=("commit_failed", number, type(exc).__name__))
        return replace(book, written=(*book.written, (number, sha)))

    def post_run(self, book):
        _trace(book, "post_run")
        summary = {"phase": book.phase, "path": book.path, "commits": len(book.written),
                   "failure": book.failure}
        if book.phase == "finished":
            print(f"Wrote {len(book.written)} paragraphs in {book.path}")
        else:
            print(f"Stopped ({book.phase}) after {len(book.written)} commits: {book.failure}")
        if book.report_to is not None:
            book.report_to.put(summary)

    def terminate_agent(self, reason, book):
        _trace(book, "terminate_agent")


def _trace(book, hook):
    if book.trace is not None:
        book.trace(hook)
# --8<-- [end:agent]


def fake_model(prompt: str) -> str:
    """The stand-in model: a paragraph that names its number."""
    number = prompt.split("Write paragraph ", 1)[1].split(".", 1)[0]
    return f"Paragraph {number}: agents keep their state between turns."


def run(backend: Any, backend_opts: dict[str, Any], root: str, **opts: Any) -> dict[str, Any]:
    reports: queue.Queue = queue.Queue()
    gen_agent.start_agent(WorkspaceWriter, name="writer", backend=backend,
                          backend_opts=backend_opts, root=root, topic="actors",
                          report_to=reports, **opts)
    gen_agent.tell("writer", NEXT)
    return reports.get(timeout=600)


def main(argv: Sequence[str] | None = None) -> None:
    with (tempfile.TemporaryDirectory() as root,
          chosen_backend(argv, fake_model, description=__doc__) as (backend, opts),
          gen_agent.AgentSystem()):
        summary = run(backend, opts, root, workspace_id="demo")
        print(git(summary["path"], "log", "--oneline", timeout_s=10))


if __name__ == "__main__":
    main(sys.argv[1:])
