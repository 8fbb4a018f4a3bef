"""The run_tests operation, INSIDE the container (stdlib only): the test command in the workspace, its
output capped, and the failing tests read from the JUnit XML the runners write (pytest's `--junitxml`)
or from its traceback lines. Mounted read-only beside `runner`.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import os

if __package__:  # on the host, as harness.tools.testrun
    from harness.tools.pathguard import Space
else:  # in the container (/opt/harness is first on sys.path), or run as a script
    from pathguard import Space  # type: ignore[import-not-found,no-redef]


# --- tests ------------------------------------------------------------------------------------


def op_run_tests(space: Space, args: dict, max_bytes: int) -> dict:
    import re
    import subprocess

    # the call's own report: a fixed name would be another run's when two share a /tmp (the host's, in tests)
    argv, junit = list(args["argv"]), f"/tmp/harness-junit-{os.getpid()}.xml"
    is_pytest = any(tok == "pytest" or tok.endswith("/pytest") for a in argv for tok in a.split())
    if is_pytest:
        argv += [
            "-rfE",
            "--tb=line",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit1",
        ]
    argv += args.get("selectors") or []
    if os.path.exists(junit):
        os.unlink(junit)
    proc = subprocess.run(
        argv, cwd=space.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    output = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", proc.stdout.decode("utf-8", "replace"))  # colour codes
    lines = [line.rsplit("\r", 1)[-1] for line in output.split("\n")]  # a progress bar's last state only
    lines = [line for line in lines if line.strip() and f"generated xml file: {junit}" not in line]  # ours
    summary = next(
        (
            line.strip("= ")
            for line in reversed(lines)
            if re.search(r"\b(passed|failed|errors?|skipped|no tests ran|deselected)\b", line)
        ),
        None,
    )
    if summary is not None:  # the same result reads the same every time: no timing
        summary = re.sub(r"\s+in\s+[\d.]+s(\s*\(\d+:\d\d:\d\d\))?", "", summary)
    failures = _junit_failures(junit, lines, space.root) if is_pytest and os.path.exists(junit) else None
    if os.path.exists(junit):
        os.unlink(junit)
    if failures is None or summary is None:
        tail = lines[-40:]
        text = "\n".join(["test output (last lines):", *tail]) if tail else "(no output)"
    else:
        text = "\n".join([*failures, summary]) if failures else summary
    return {"ok": True, "text": text, "exit_code": proc.returncode}


_TB_LINE = r"^(\S+?\.py):(\d+): (.*)$"


def _junit_failures(path: str, output: list[str], root: str) -> list[str]:
    """One line per failing test: id, assertion location (from --tb=line output), short message."""
    import re
    import xml.etree.ElementTree as ET

    summary_at = next((k for k, line in enumerate(output) if "short test summary info" in line), len(output))
    locations = [m for m in (re.match(_TB_LINE, line) for line in output[:summary_at]) if m]
    cases = [
        (case, bad)
        for case in ET.parse(path).getroot().iter("testcase")
        for bad in [next((c for c in case if c.tag in ("failure", "error")), None)]
        if bad is not None
    ]
    out = []
    for number, (case, bad) in enumerate(cases):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        module, classname = file[:-3].replace("/", "."), case.get("classname", "")
        cls = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
        node = "::".join(x for x in (file, cls, case.get("name", "")) if x)
        loc = locations[number] if len(locations) == len(cases) else None
        if loc:
            where = f"{os.path.relpath(loc.group(1), root) if loc.group(1).startswith('/') else loc.group(1)}:{loc.group(2)}"
        else:
            where = f"{file}:{int(case.get('line', '-1')) + 1}"
        message = (bad.get("message") or (loc.group(3) if loc else "") or bad.text or "").strip().splitlines()
        label = "ERROR" if bad.tag == "error" else "FAILED"
        out.append(f"{label} {node} at {where}: {(message[0] if message else '')[:300]}")
    return out
