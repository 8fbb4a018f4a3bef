"""The file tools: read, list, search, patch and write, each run by the runner inside the container
(so a symlink resolves there, never on the host). Each docstring is what the model reads."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from harness.errors import ToolError
from harness.tools import fileops, pathguard
from harness.tools.calls import call_runner
from harness.tools.registry import Outcome, ToolContext, tool

Line = Annotated[int, Field(ge=1, le=10_000_000)]


@tool("read", paths=("path",))
def read_file(
    ctx: ToolContext,
    path: str,
    start_line: Line | None = None,
    end_line: Line | None = None,
    pattern: Annotated[str | None, Field(min_length=1, max_length=500)] = None,
    context: Annotated[int, Field(ge=0, le=20)] = 2,
) -> Outcome:
    """Read a text file of the workspace, with numbered lines (at most 800 lines per call).

    Output starts `OK read_file <path>: lines a-b of N`; when more remains it ends with
    `[TRUNCATED: lines a-b of N shown; continue with start_line=b+1]`. With `pattern`, only the
    lines matching it (and `context` lines around each) are shown, groups separated by `--`, and the
    header says how many lines matched. Binary files are refused.
    Use it to look at code before editing it, to re-read a region after an edit, and (with pattern)
    to see every place a name appears in one long file. Do NOT use it to find which file defines
    something (use search_code) or to see what files exist (use list_dir).

    Args:
      path: file path relative to the workspace root (e.g. `src/app.py`); must stay inside it.
      start_line: first line to show (or to search from, with pattern), 1-based (default 1).
      end_line: last line to show, inclusive (default: start_line + 799 or the end of the file).
      pattern: optional Python regular expression; only matching lines and their context are shown.
      context: lines shown before and after each match when pattern is given (0-20, default 2).
    """
    args = {"path": path, "start_line": start_line, "end_line": end_line, "pattern": pattern, "context": context}
    answer, envelope = call_runner(ctx, "read_file", args)
    return Outcome(answer["text"], envelope)


@tool("read", paths=("path",))
def list_dir(ctx: ToolContext, path: str = ".", depth: Annotated[int, Field(ge=1, le=5)] = 2) -> Outcome:
    """List the files and directories under a workspace directory, as an indented tree.

    Skips .git, node_modules, __pycache__, dist, build and other generated output, and anything the
    repository's .gitignore files ignore. At most 400 entries, then a `[TRUNCATED: ...]` marker.
    Directories end with `/`; symlinks show their target.
    Use it to get oriented in a repository or a directory. Do NOT use it to find text inside files
    (use search_code) or to read a file (use read_file).

    Args:
      path: directory relative to the workspace root (default `.`, the root).
      depth: how many directory levels to show, 1-5 (default 2).
    """
    answer, envelope = call_runner(ctx, "list_dir", {"path": path, "depth": depth})
    return Outcome(answer["text"], envelope)


@tool("read", paths=("path",))
def search_code(
    ctx: ToolContext,
    pattern: Annotated[str, Field(min_length=1, max_length=500)],
    path: str = ".",
    glob: Annotated[str | None, Field(max_length=200)] = None,
) -> Outcome:
    """Search file contents with ripgrep; prints `file:line:text` for each match, sorted by path.

    At most 50 matches per file and 200 in total, then a `[TRUNCATED: ...]` marker. Ignored files
    (.gitignore), hidden files and binary files are skipped.
    Use it to find definitions, call sites, error messages or config keys. Do NOT use it to list
    files (use list_dir) or to read a whole file (use read_file).

    Args:
      pattern: a Rust-syntax regular expression (escape `( [ { .` to match them literally), 1-500 chars.
      path: file or directory to search, relative to the workspace root (default `.`).
      glob: optional file filter such as `*.py` or `src/**/*.ts` (up to 200 chars).
    """
    answer, envelope = call_runner(ctx, "search", {"pattern": pattern, "path": path, "glob": glob})
    return Outcome(answer["text"], envelope)


def _patch_targets(args: Any) -> list[str]:
    if args.diff:
        if args.old_text is not None or args.new_text is not None:
            raise ToolError("invalid_arguments", "give either diff or old_text/new_text, not both")
        try:
            return fileops.diff_paths(args.diff)
        except pathguard.Failure as failure:
            raise ToolError(failure.kind, failure.text) from None
    if args.path is None or args.old_text is None or args.new_text is None:
        raise ToolError("invalid_arguments", "apply_patch needs path, old_text and new_text (or a unified diff)")
    return []


@tool("write", paths=("path",), targets=_patch_targets)
def apply_patch(
    ctx: ToolContext,
    path: str | None = None,
    old_text: str | None = None,
    new_text: str | None = None,
    diff: Annotated[str | None, Field(max_length=500_000)] = None,
) -> Outcome:
    """Edit an existing file by replacing one exact piece of text, or apply a unified diff.

    With path/old_text/new_text: old_text must occur exactly once in the file (whitespace and
    indentation included); zero matches and several matches are different errors. With diff: a
    unified diff (`--- a/f`, `+++ b/f`, `@@` hunks) for multi-hunk or multi-file edits; it may also
    create (`--- /dev/null`), delete (`+++ /dev/null`, every line removed) or rename (git's
    `rename from`/`rename to`) files; a hunk must match the file exactly; all files change or none.
    Use it for every change to an existing file. Do NOT use it to create a lone new file (use
    write_file) or to rewrite a file wholesale (use write_file with overwrite=true).

    Args:
      path: the file to edit, relative to the workspace root (not used with diff).
      old_text: the exact current text to replace; include enough lines to be unique.
      new_text: the replacement text (may be empty to delete old_text).
      diff: a unified diff instead of path/old_text/new_text (up to 500 kB).
    """
    args = {"diff": diff} if diff else {"path": path, "old_text": old_text, "new_text": new_text}
    answer, envelope = call_runner(ctx, "apply_patch", args)
    return Outcome(answer["text"], envelope, wrote=True)


@tool("write", paths=("path",))
def write_file(
    ctx: ToolContext, path: str, content: Annotated[str, Field(max_length=1_000_000)], overwrite: bool = False
) -> Outcome:
    """Create a new file with the given content (missing parent directories are created).

    Refuses to replace an existing file unless overwrite is true.
    Use it for new files. Do NOT use it to change part of an existing file (use apply_patch: it
    cannot clobber text you have not seen).

    Args:
      path: the new file, relative to the workspace root.
      content: the complete file content, UTF-8 text up to 1,000,000 characters.
      overwrite: replace the file if it already exists (default false).
    """
    answer, envelope = call_runner(ctx, "write_file", {"path": path, "content": content, "overwrite": overwrite})
    return Outcome(answer["text"], envelope, wrote=True)
