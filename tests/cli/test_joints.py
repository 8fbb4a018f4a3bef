"""What a user meets between commands: flags that say what is wrong in harness's words (never the
validation library's), the help of a bare command and the version, refusals that name the range an
address is in and the flags that fit, one CA bundle the whole session trusts, and the network of a
session that never ran a model shown wherever its steps are."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.network.allow import Allowlist, parse
from tests.cli_process import run_cli
from tests.sandbox.network.servers import Server, make_ca

HARNESS = str(Path(sys.executable).parent / "harness")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


def harness(*args: str, state: Path | None = None, run_label: str = "joints-test") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": run_label, "COLUMNS": "200"}
    if state is not None:
        env["HARNESS_STATE_DIR"] = str(state)
    return run_cli(args, env=env, timeout=200, cwd=ROOT, console=True)


def test_a_bad_flag_is_one_line_in_harness_words_and_a_bare_command_helps(tmp_path: Path) -> None:
    bare = harness()
    assert bare.returncode == 0 and bare.stdout.startswith("Usage: harness") and "error" not in bare.stderr
    tasks = harness("tasks")
    assert tasks.returncode == 0 and "mine" in tasks.stdout
    version = harness("--version")
    assert version.returncode == 0 and version.stdout.startswith("harness ")
    run = [
        "run",
        "examples/calc",
        "--task",
        "x",
        "--model",
        "scripted:examples/calc-fix.yaml",
        "--state-dir",
        str(tmp_path),
    ]
    said = {
        ("--allow-net", "http://pypi.org/simple"): "give a host, not a URL (try --allow-net pypi.org)",
        ("--secret", "FOO"): "--secret 'FOO': write NAME=ENV_VAR@HOST",
        ("--thinking", "bogus"): "--thinking 'bogus': input should be 'low', 'medium' or 'high'",
        ("--ca-bundle", "/etc/hosts"): "--ca-bundle is for a session with network",
        ("--api-key-env", "sk-not a name"): "give the name of an environment variable",
    }
    for flag, words in said.items():
        done = harness(*run, *flag)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 64 and len(lines) == 1 and words in lines[0], (flag, done.stderr)
        assert "Value error" not in done.stderr and "Input should" not in done.stderr
    assert not list(tmp_path.iterdir()), "nothing was made"


def test_a_refusal_names_the_range_and_the_flags_that_fit() -> None:
    # imported here: a command module imported while tests are collected would rebind `harness.cli.app`
    # (the Typer object other tests import) to the submodule of that name
    from harness.cli.sandbox_cmds import registry_line

    allowed = Allowlist(parse(["pypi"]))
    said = allowed.address_refusal("pypi.org", ipaddress.ip_address("203.0.113.80"), 443)
    assert said is not None and "a documentation range (TEST-NET-3, RFC 5737)" in said
    assert "--allow-net 203.0.113.80" in said and "--ca-bundle FILE" in said and "private" not in said
    inside = allowed.address_refusal("pypi.org", ipaddress.ip_address("10.1.2.3"), 443)
    assert inside is not None and "a private range (RFC 1918)" in inside and "--ca-bundle" not in inside
    assert allowed.address_refusal("pypi.org", ipaddress.ip_address("151.101.0.223"), 443) is None
    line = registry_line("pypi", resolve=lambda host: ["203.0.113.80"])
    assert "--allow-net pypi --allow-net 203.0.113.80 --ca-bundle" in line
    assert "is enough" in registry_line("npm", resolve=lambda host: ["104.16.0.1"])
    gone = registry_line("go", resolve=lambda host: (_ for _ in ()).throw(OSError("no such host")))
    assert "does not resolve here" in gone and "cannot fetch" in gone


@pytest.mark.docker
def test_the_session_trusts_one_ca_bundle_and_its_network_is_shown(tmp_path: Path, run_label: str) -> None:
    """An HTTPS server on 127.0.0.2 whose certificate a CA made here signs (an intercepting proxy's, as
    far as the calls can tell): with --ca-bundle a call reaches it; without, TLS refuses it. The
    requests of `exec --session` are in show, session show and view; a client's retries of a refused
    request are one line each there, saying how many."""
    ca, cert, key = make_ca(tmp_path / "tls", addresses=("127.0.0.2",))
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("a repository\n")
    with Server(cert=(cert, key), host="127.0.0.2") as server:
        fetch = (
            "import urllib.request as u; "
            f"print(u.urlopen('https://127.0.0.2:{server.port}/hello', timeout=20).read().decode())"
        )
        net = ["--allow-net", f"127.0.0.2:{server.port}"]
        trusted = harness(
            "exec", str(repo), *net, "--ca-bundle", str(ca), "--", "python3", "-c", fetch, run_label=run_label
        )
        assert trusted.returncode == 0 and "hello from the test's own internet" in trusted.stdout, trusted.stderr
        refused = harness("exec", str(repo), *net, "--", "python3", "-c", fetch, run_label=run_label)
        assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stdout + refused.stderr
        state = tmp_path / "state"
        probe = "import urllib.request as u\nfor _ in range(3):\n  try:\n    u.urlopen('http://example.invalid/', timeout=20)\n  except Exception as e:\n    print(e)\n"
        made = harness("exec", str(repo), "--session", "s", *net, "--ca-bundle", str(ca), "--", "python3", "-c", probe,
                       state=state, run_label=run_label)  # fmt: skip
        assert made.returncode == 0, made.stderr
    shown = harness("show", "s", state=state, run_label=run_label)
    assert shown.returncode == 0 and "no model run" in shown.stdout
    assert "net GET example.invalid:80 ×3 refused" in " ".join(shown.stdout.split()), shown.stdout
    assert shown.stdout.count("net GET example.invalid") == 1, shown.stdout
    listed = harness("session", "show", "s", state=state, run_label=run_label)
    assert "network: 3 request(s), 3 refused" in listed.stdout and listed.stdout.count("example.invalid:80 ×3") == 1
    page = harness("view", "s", "--no-open", state=state, run_label=run_label)
    assert page.returncode == 0, page.stderr
    html = (state / "s" / "view.html").read_text(encoding="utf-8")
    assert "Network (3 request(s), 3 refused)" in html and "no model run" in html
    sessions = harness("session", "list", "--long", state=state, run_label=run_label)
    assert "s  no run" in sessions.stdout and str(repo) in sessions.stdout
    assert json.loads(harness("session", "list", "--json", state=state).stdout)[0]["outcome"] == ""


def test_text_from_outside_reaches_the_terminal_with_its_control_characters_spelled_out(tmp_path: Path) -> None:
    """A model's words, a tool's output, a path: printed, in a table's cell or in a panel, an escape
    from outside is shown as `\\x1b`, never sent (every command prints through the one console)."""
    import io

    from rich.panel import Panel
    from rich.table import Table

    from harness.cli.terminal import visible_console

    hostile = "clear\x1b[2Jtitle\x1b]0;owned\x07back\rover\u202eright"
    out = io.StringIO()
    console = visible_console(file=out, force_terminal=True, width=200)
    table = Table("cell")
    table.add_row(hostile)
    console.print(hostile, markup=False)
    console.print(table)
    console.print(Panel(hostile))
    console.out(hostile)
    written = out.getvalue()
    assert "\x1b[2J" not in written and "\x1b]0;" not in written and "\r" not in written and "\u202e" not in written
    assert written.count("\\x1b[2J") == 4 and written.count("\\u202e") == 4
