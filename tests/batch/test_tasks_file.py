"""The tasks file: validated whole before anything starts; an error names the file, the line, the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harness.batch.tasks import load_tasks
from harness.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_apply_and_repos_resolve_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "repos").mkdir()
    (tmp_path / "repos" / "calc").symlink_to(EXAMPLE)
    path = write(
        tmp_path,
        "tasks.yaml",
        """
defaults:
  verify: python3 -m pytest -q
  runs: 2
  limits: {max_steps: 12}
tasks:
  - {id: a, repo: repos/calc, task: Fix it., tags: {category: bugfix, long_context: true}, first_tools: [run_tests]}
  - {id: b, repo: repos/calc, task: Fix it too., runs: 1, limits: {max_steps: 3}}
""",
    )
    tasks = load_tasks(path)
    assert [t.id for t in tasks.tasks] == ["a", "b"] and tasks.defaults.runs == 2
    assert tasks.tasks[0].repo == EXAMPLE.resolve() and tasks.tasks[0].tags.long_context
    assert tasks.tasks[1].limits.max_steps == 3 and tasks.tasks[0].line == 7


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("tasks:\n  - {id: a, repo: %s, task: x}\n  - {id: a, repo: %s, task: y}\n", ":3: id: 'a' is already"),
        ("tasks:\n  - {id: a, repo: %s, task: x}\n  - {id: b, repo: %s, task: y, runs: 0}\n", ":3: runs:"),
        ("tasks:\n  - {id: a, repo: %s, task: x, limits: {max_stepz: 3}}\n", ":2: limits.max_stepz:"),
        ("tasks:\n  - {id: a, repo: nowhere, task: x}\n", ":2: repo: nowhere is not a directory"),
        ("tasks:\n  - {id: 'a b', repo: %s, task: x}\n", ":2: id:"),
        ("tasks:\n  - {id: a, repo: %s}\n", ":2: task:"),
        ("defaults:\n  runs: many\ntasks:\n  - {id: a, repo: %s, task: x}\n", ":2: runs:"),
        ("task:\n  - {id: a}\n", "unknown key 'task'"),
        ("tasks: [\n", "invalid YAML"),
        ("tasks: []\n", "holds no task"),
    ],
)
def test_a_broken_file_fails_with_the_line_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, "tasks.yaml", text.replace("%s", str(EXAMPLE)))
    with pytest.raises(ConfigError) as raised:
        load_tasks(path)
    assert str(raised.value).startswith(str(path)) and where in str(raised.value), str(raised.value)


def test_jsonl_names_the_line(tmp_path: Path) -> None:
    good = f'{{"id": "a", "repo": "{EXAMPLE}", "task": "x"}}'
    path = write(tmp_path, "tasks.jsonl", f'{good}\n\n{{"id": "b", "repo": "{EXAMPLE}", "task": 1}}\n')
    with pytest.raises(ConfigError, match=r"tasks\.jsonl:3: task:"):
        load_tasks(path)
    write(tmp_path, "ok.jsonl", good + "\n")
    assert [t.id for t in load_tasks(tmp_path / "ok.jsonl").tasks] == ["a"]


def test_session_settings_are_the_defaults_with_what_each_task_gives(tmp_path: Path) -> None:
    """One sub-model: setup's CA, proxy and mounts are task keys too, a task's keys go over the
    defaults' one by one, and a relative CA bundle is the file's neighbour."""
    (tmp_path / "corp.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    path = write(
        tmp_path,
        "tasks.yaml",
        f"""
defaults:
  setup: [python3 -m pip install -e .]
  workspace_quota: 2g
tasks:
  - {{id: plain, repo: {EXAMPLE}, task: x}}
  - id: proxied
    repo: {EXAMPLE}
    task: x
    setup_network: true
    setup_ca: corp.pem
    setup_proxy: http://me:s3cret@proxy.invalid:3128
    setup_mounts: ["/srv/wheels:/wheels"]
  - {{id: nested, repo: {EXAMPLE}, task: x, session: {{setup: [npm ci], workspace_quota: 1g}}}}
""",
    )
    plain, proxied, nested = load_tasks(path).tasks
    assert plain.session.setup == ["python3 -m pip install -e ."] and plain.session.workspace_quota == 2 * 1024**3
    assert proxied.session.setup == plain.session.setup and proxied.session.setup_network
    assert proxied.session.setup_ca == (tmp_path / "corp.pem").resolve()
    assert proxied.session.setup_proxy == "http://me:s3cret@proxy.invalid:3128"
    assert "s3cret" not in proxied.model_dump_json(), "the proxy's password is never written out"
    assert nested.session.setup == ["npm ci"] and nested.session.workspace_quota == 1024**3


@pytest.mark.parametrize(
    ("task", "where"),
    [
        (
            "setup: [x]\n    setup_proxy: http://proxy.invalid:1",
            ":2: session: --setup-proxy is for a setup with network",
        ),
        (
            "setup: [x]\n    setup_ca: corp.pem",
            ":2: session: --setup-ca is for a setup with network: add --setup-network or --allow-net",
        ),
        ("allow_net_tools: true", ":2: session: --allow-net-tools gives tool calls the --allow-net hosts"),
        ("allow_net: ['foo bar']", ":2: session.allow_net: --allow-net 'foo bar': not a host name"),
        ("secrets: [TOKEN]", ":2: session.secrets: --secret 'TOKEN': write NAME=ENV_VAR@HOST"),
        (
            "allow_net: [pypi]\n    setup_network: true\n    setup: [x]",
            ":2: session: --allow-net and --setup-network contradict",
        ),
        ("setup_network: true", ":2: session: --setup-network, --setup-ca, --setup-proxy and --setup-mount need"),
        ("setup: [x]\n    session: {setup: [y]}", ":2: setup given both at the top level and in [session]"),
        ("setup_mounts: [wheels]", ":2: session.setup_mounts"),
    ],
)
def test_session_settings_that_do_not_go_together_name_the_task(tmp_path: Path, task: str, where: str) -> None:
    path = write(tmp_path, "tasks.yaml", f"tasks:\n  - id: a\n    repo: {EXAMPLE}\n    task: x\n    {task}\n")
    with pytest.raises(ConfigError) as raised:
        load_tasks(path)
    assert where in str(raised.value)


def test_a_tasks_project_tools_go_over_the_defaults_by_name(tmp_path: Path) -> None:
    from harness.batch.records import TaskRunKey
    from harness.batch.worker import TaskRunSpec, run_config

    tool = {"description": "d", "when": "w", "when_not": "n", "command": ["true"]}
    path = write(
        tmp_path,
        "tasks.yaml",
        yaml.safe_dump(
            {
                "defaults": {"tools": {"base": tool, "shared": {**tool, "description": "old"}}},
                "tasks": [
                    {"id": "a", "repo": str(EXAMPLE), "task": "x", "tools": {"shared": {**tool, "description": "new"}}}
                ],
            }
        ),
    )
    tasks = load_tasks(path)
    key = TaskRunKey(task_id="a", model="scripted:x", run_index=0)
    spec = TaskRunSpec(key=key, task=tasks.tasks[0], defaults=tasks.defaults, sessions=tmp_path, run_id="r")
    declared = run_config(spec).tools.declared
    assert sorted(declared) == ["base", "shared"] and declared["shared"].description == "new"


def test_a_task_may_name_its_own_model(tmp_path: Path) -> None:
    from harness.batch.runner import plan

    (tmp_path / "mine.yaml").write_text("turns: []\n")
    path = write(
        tmp_path,
        "tasks.yaml",
        f"tasks:\n  - id: own\n    repo: {EXAMPLE}\n    task: x\n    model: scripted:mine.yaml\n"
        f"  - id: shared\n    repo: {EXAMPLE}\n    task: y\n",
    )
    tasks = load_tasks(path)
    assert tasks.tasks[0].model == f"scripted:{(tmp_path / 'mine.yaml').resolve()}", "relative to the tasks file"
    planned = [(key.task_id, key.model) for key, _ in plan(tasks, ["openai:gpt-5"], None)]
    assert planned == [("own", f"scripted:{(tmp_path / 'mine.yaml').resolve()}"), ("shared", "openai:gpt-5")]
    bad = write(
        tmp_path, "bad.yaml", f"tasks:\n  - id: a\n    repo: {EXAMPLE}\n    task: x\n    model: scripted:none.yaml\n"
    )
    with pytest.raises(ConfigError, match=r"bad.yaml:2: model: none.yaml is not a file"):
        load_tasks(bad)


def test_mcp_servers_are_declared_per_task_over_the_defaults(tmp_path):
    from harness.batch.records import TaskRunKey
    from harness.batch.tasks import load_tasks
    from harness.batch.worker import TaskRunSpec, run_config

    (tmp_path / "repo").mkdir()
    path = tmp_path / "tasks.yaml"
    path.write_text(
        "defaults:\n  mcp:\n    docs: {command: [python3, /workspace/docs_server.py]}\n"
        "tasks:\n  - id: a\n    repo: repo\n    task: t\n"
        "  - id: b\n    repo: repo\n    task: t\n    mcp:\n      db: {command: [db-server], allow_net: [db.example], writable: true}\n"
        "    services:\n      web: {image: py311, command: [python3, -m, http.server], ports: [8000]}\n"
    )
    tasks = load_tasks(path)
    configs = {
        task.id: run_config(TaskRunSpec(key=TaskRunKey(task_id=task.id, model="scripted:x", run_index=0), task=task,
                                        defaults=tasks.defaults, sessions=tmp_path / "s", run_id="r"))
        for task in tasks.tasks
    }  # fmt: skip
    assert list(configs["a"].mcp) == ["docs"] and configs["a"].mcp["docs"].command == [
        "python3",
        "/workspace/docs_server.py",
    ]
    assert list(configs["b"].mcp) == ["docs", "db"] and configs["b"].mcp["db"].writable
    assert configs["b"].mcp["db"].allow_net == ["db.example"]
    assert configs["b"].services["web"].ports == [8000] and configs["a"].services == {}
    path.write_text("tasks:\n  - id: a\n    repo: repo\n    task: t\n    mcp:\n      docs: {cmd: [x]}\n")
    with pytest.raises(Exception, match="command"):
        load_tasks(path)
