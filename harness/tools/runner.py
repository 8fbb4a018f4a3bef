"""File tools, executed INSIDE the container (stdlib only; mounted read-only at /opt/harness/runner.py,
with its siblings `pathguard` (the path guard), `fileops` (one `op_*` per file tool), `testrun`
(run_tests) and `unified_diff` beside it).

Running here means a symlink in the repository resolves inside the container, never on the host.
Request: `runner.main()` with argv `key=value ...` (see `encode_request`; `key[]=v` repeats build a
list, `arg.x` are the tool's arguments), or `--stdin` with the request as JSON on stdin for payloads
too big (or not representable) as argv; `harness.tools.launch` imports it with its host-compiled
.pyc (it also runs as a script). Answer on stdout: line 1 `OK` or `ERROR <kind>`, line 2 the written
paths separated by tabs, then the text for the model; the exit code is the test command's for
run_tests, else 0. The read path imports neither json nor re: python's start-up is most of a
read_file call.

None of these modules can import harness (they run in the container): on the host they are
harness.tools modules, in the container top-level ones beside each other.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import os
import sys

if not __package__:  # run as a script (python -I leaves the script's folder off sys.path): the siblings are here
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __package__:  # on the host, as harness.tools.runner
    from harness.tools.pathguard import Failure, Space
else:  # in the container (/opt/harness is first on sys.path), or run as a script
    from pathguard import Failure, Space  # type: ignore[import-not-found,no-redef]
if __package__:  # on the host, as harness.tools.runner
    from harness.tools.fileops import op_apply_patch, op_list_dir, op_read_file, op_read_raw, op_search, op_write_file
else:  # in the container (/opt/harness is first on sys.path), or run as a script
    from fileops import op_apply_patch, op_list_dir, op_read_file, op_read_raw, op_search, op_write_file  # type: ignore[import-not-found,no-redef]
if __package__:  # on the host, as harness.tools.runner
    from harness.tools.testrun import op_run_tests
else:  # in the container (/opt/harness is first on sys.path), or run as a script
    from testrun import op_run_tests  # type: ignore[import-not-found,no-redef]


OPS = {
    "read_file": op_read_file,
    "read_raw": op_read_raw,
    "list_dir": op_list_dir,
    "apply_patch": op_apply_patch,
    "write_file": op_write_file,
    "run_tests": op_run_tests,
    "search": op_search,
}


def handle(req: dict) -> dict:
    """Run one request; every failure becomes data, never a traceback."""
    try:
        return {
            "ok": True,
            "kind": None,
            "wrote": [],
            **OPS[req["op"]](Space(req), req.get("args", {}), int(req.get("max_bytes", 24000))),
        }
    except Failure as failure:
        return {"ok": False, "kind": failure.kind, "text": failure.text, "wrote": []}
    except (OSError, UnicodeError, SyntaxError) as error:  # xml ParseError is a SyntaxError
        return {"ok": False, "kind": "execution_error", "text": f"{type(error).__name__}: {error}", "wrote": []}


def encode_request(request: dict) -> list:
    """argv items for a request dict (the inverse of decode_request); None and False are left out."""
    items: "list[str]" = []

    def put(key: str, value: object) -> None:
        if value is None or value is False:
            return
        if isinstance(value, (list, tuple)):
            items.extend(f"{key}[]={item}" for item in value)
        else:
            items.append(f"{key}={'1' if value is True else value}")

    for key, value in request.items():
        if key == "args":
            for name, arg in value.items():
                put(f"arg.{name}", arg)
        else:
            put(key, value)
    return items


def decode_request(items: list) -> dict:
    request: dict = {"args": {}}
    for item in items:
        key, _, value = item.partition("=")
        target = request["args"] if key.startswith("arg.") else request
        key = key[4:] if key.startswith("arg.") else key
        if key.endswith("[]"):
            target.setdefault(key[:-2], []).append(value)
        else:
            target[key] = value
    return request


def main() -> int:
    if sys.argv[1:] == ["--stdin"]:
        import json

        request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    else:
        request = decode_request(sys.argv[1:])
    answer = handle(request)
    head = "OK" if answer["ok"] else f"ERROR {answer['kind']}"
    out = f"{head}\n{chr(9).join(answer.get('wrote') or [])}\n{answer['text']}"
    sys.stdout.buffer.write(out.encode("utf-8", "replace"))
    sys.stdout.flush()
    return int(answer.get("exit_code", 0)) if answer["ok"] else 0


def parse_answer(stdout: str) -> dict | None:
    """The host's reading of main()'s output; None when it is not a runner answer."""
    head, sep, rest = stdout.partition("\n")
    wrote, _, text = rest.partition("\n")
    if not sep or not (head == "OK" or head.startswith("ERROR ")):
        return None
    return {
        "ok": head == "OK",
        "kind": head[6:] or None if head != "OK" else None,
        "text": text,
        "wrote": [w for w in wrote.split("\t") if w],
    }


if __name__ == "__main__":
    sys.exit(main())
