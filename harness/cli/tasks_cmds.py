"""`harness tasks mine REPO -o tasks.yaml` and `harness tasks check tasks.yaml`: benchmarks from a
repository's own history, and only the sound ones kept."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import typer

from harness.cli.app import CA_BUNDLE, ExitCode, app, console, docker_host, err_console, fail, group, reported
from harness.environment.detect import AUTO

tasks_app = group("Benchmark tasks from a repository's history (mine), kept only when sound (check).")
app.add_typer(tasks_app, name="tasks")


SETUP = typer.Option(
    [],
    "--setup",
    help="Each task's setup: auto (its start state's devcontainer.json when it has one, else what it declares "
    "for its language: pip, npm ci / npm install, go mod download), devcontainer (the same), none, or commands "
    "(repeatable) [default: auto]; it runs through --allow-net with the language's registry preset (pypi, npm, "
    "go, crates).",
)
SETUP_NET = typer.Option(
    [], "--allow-net", help="Another host a task's setup may reach (repeatable): a registry's address behind split DNS."
)
SETUP_TIMEOUT = typer.Option(
    None, "--setup-timeout", min=1, max=24 * 3600, help="Seconds a task's setup commands together may take [900]."
)


def setup_policy(setup: list[str], allow_net: list[str], ca_bundle: Path | None, timeout: float | None) -> Any:
    """The flags' setup policy; one line and exit 64 for a combination that cannot be."""
    from harness.history.prepare import NONE, SetupPolicy

    if NONE in setup and len(setup) > 1:
        fail("--setup none stands alone (no other --setup with it)", ExitCode.USAGE)
    if NONE in setup and (allow_net or ca_bundle):
        fail("--allow-net and --ca-bundle are for a setup: drop --setup none", ExitCode.USAGE)
    if ca_bundle is not None:
        from sandbox.named import NamedFileError, check_named

        try:
            check_named(ca_bundle, what="--ca-bundle", limit=16 * 1024**2)
        except NamedFileError as error:
            fail(str(error), ExitCode.USAGE)
    bundle = ca_bundle.expanduser().absolute() if ca_bundle is not None else None
    return SetupPolicy(commands=list(setup), allow_net=list(allow_net), ca_bundle=bundle, timeout_s=timeout)


@tasks_app.command("mine")
def mine_command(
    repo: Path = typer.Argument(..., metavar="REPO", help="A working copy, a bare repository or a git bundle."),
    output: Path = typer.Option(..., "-o", "--output", help="The tasks file to write (states go beside it)."),
    since: str | None = typer.Option(None, "--since", help="Only commits after this ref or commit."),
    max_tasks: int = typer.Option(50, "--max", min=1, max=10_000, help="At most this many tasks (newest first)."),
    paths: list[str] = typer.Option([], "--paths", help="Only commits touching these paths (gitignore-style)."),
    tests: list[str] = typer.Option(
        [], "--tests", help="What counts as a test path (gitignore-style; default: Python, JS/TS, Go, Rust layouts)."
    ),
    verify: str | None = typer.Option(
        None,
        "--verify",
        help="Verify template; {tests} is the changed test files (Go: their packages; Rust: --test targets).",
    ),
    image: str | None = typer.Option(
        None, "--image", help="The image every task runs in [default: by language: py311, go, node, rust]."
    ),
    first_parent: bool = typer.Option(
        False, "--first-parent", help="Skip merges: only the first-parent line's own commits make tasks."
    ),
    setup: list[str] = SETUP,
    allow_net: list[str] = SETUP_NET,
    ca_bundle: Path | None = CA_BUNDLE,
    setup_timeout: float | None = SETUP_TIMEOUT,
    as_json: bool = typer.Option(False, "--json", help="Print tasks, skipped commits and the yield as JSON."),
) -> None:
    """Turn changes that touch code and tests into tasks (each commit of the first-parent line, and
    each merged pull request as one): start at the parent plus the new tests, the message as the
    task, the changed tests as verify in the language's runner, the rest kept as the reference."""
    from harness.history import materialize
    from harness.history.mine import MineOptions, mine
    from harness.history.reader import History

    if output.suffix.lower() not in (".yaml", ".yml"):
        fail(f"-o must name a .yaml file, not {output}", ExitCode.USAGE)
    if verify is not None and "{tests}" not in verify:
        fail("--verify must contain {tests} (where the changed test files go)", ExitCode.USAGE)
    with reported(), History.open(repo) as history:
        options = MineOptions(
            since=since,
            max_tasks=max_tasks,
            paths=paths,
            tests=tests or None,
            verify=verify,
            image=image,
            first_parent=first_parent,
        )
        mined = mine(history, options)
        summary = mined.yield_summary(str(history.source))
        if not mined.tasks:
            reasons = "; ".join(
                f"{reason} x{count}" for reason, count in list(summary["skipped_by_reason"].items())[:5]
            )
            fail(f"no commit of {repo} makes a task ({reasons or 'no commits'})", ExitCode.NOT_FOUND)
        output.parent.mkdir(parents=True, exist_ok=True)
        policy = setup_policy(setup or [AUTO], allow_net, ca_bundle, setup_timeout)
        states = materialize.write(mined, history, output, image=image, setup=policy)
    if as_json:
        print(
            json.dumps(
                {
                    "tasks": [
                        {
                            "id": t.id,
                            "commit": t.commit,
                            "category": t.category,
                            "language": t.language,
                            "source": t.source,
                            "image": t.image,
                            "verify": t.verify,
                            "environment": t.environment,
                        }
                        for t in mined.tasks
                    ],
                    "skipped": [{"commit": s.commit, "subject": s.subject, "reason": s.reason} for s in mined.skipped],
                    "yield": summary,
                    "output": str(output),
                    "states": str(states),
                }
            )
        )
        return
    for task in mined.tasks:
        console.print(
            f"task    {task.commit[:8]}  {task.language:<10} {task.source:<6} {task.category:<22} {task.subject}",
            soft_wrap=True,
            markup=False,
        )
    for skipped in mined.skipped:
        console.print(
            f"skipped {skipped.commit[:8]}  {skipped.reason}: {skipped.subject}", soft_wrap=True, markup=False
        )
    print_mine_yield(summary)
    from harness.environment.devcontainer import find

    declaring = [task.id for task in mined.tasks if find(states / task.id / "repo") is not None]
    if declaring and any(word in policy.commands for word in (AUTO, "devcontainer")):
        console.print(
            f"setup: {len(declaring)} task(s) take their start state's devcontainer.json (its image is built, never "
            "pulled; --setup none or your own commands instead)",
            soft_wrap=True,
            markup=False,
        )
    console.print(f"wrote {output}; states in {states}", soft_wrap=True, markup=False)


def print_mine_yield(summary: dict) -> None:
    """The mining half of the yield: scanned, made by language, skipped by reason."""
    languages = ", ".join(f"{name} {count}" for name, count in summary["by_language"].items()) or "none"
    console.print(
        f"yield: {summary['scanned']} commit(s) scanned ({summary['merges']} merges), {summary['tasks']} task(s) "
        f"({languages}), {summary['skipped']} skipped",
        soft_wrap=True,
        markup=False,
    )
    for reason, count in summary["skipped_by_reason"].items():
        console.print(f"  skipped {count:>4}  {reason}", soft_wrap=True, markup=False)


def sound_path(tasks_file: Path) -> Path:
    """Where `tasks check` writes the sound tasks by default: beside the file, never over it."""
    name = tasks_file.name
    for suffix in (".yaml", ".yml", ".jsonl", ".json"):
        if name.endswith(suffix):
            return tasks_file.with_name(name[: -len(suffix)] + ".sound" + (suffix if suffix != ".jsonl" else ".yaml"))
    return tasks_file.with_name(name + ".sound.yaml")


@tasks_app.command("check")
def check_command(
    tasks_file: Path = typer.Argument(..., metavar="TASKS", help="A tasks file (from harness tasks mine)."),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write the sound tasks here [default: TASKS.sound.yaml beside it; TASKS is kept]."
    ),
    workers: int = typer.Option(2, "--workers", min=1, max=64, help="Tasks checked at once."),
    env_images: list[str] = typer.Option(
        [],
        "--env-images",
        help="Images to pick from when a task's own does not meet the interpreter or toolchain its commit "
        "declares (requires-python, go.mod, engines.node, rust-version); repeatable.",
    ),
    build_envs: bool = typer.Option(
        False,
        "--build-envs",
        help="When no image meets a declaration, build one from the Debian release that has it (bullseye: "
        "Python 3.9, Node 12, Go 1.15; trixie: Python 3.13, Node 20, Go 1.24, Rust 1.85); kept and found later.",
    ),
    setup: list[str] = typer.Option(
        [],
        "--setup",
        help="Give every task this setup (auto: its devcontainer.json, else what its start state declares; none; "
        "or commands), instead of its own [default: each task's own].",
    ),
    allow_net: list[str] = SETUP_NET,
    ca_bundle: Path | None = CA_BUNDLE,
    setup_timeout: float | None = SETUP_TIMEOUT,
    as_json: bool = typer.Option(False, "--json", help="Print the verdicts and the yield as JSON."),
) -> None:
    """Keep the tasks whose verify fails at the start and passes with the reference change (both in
    the real sandbox); list the others with why, and the yield per repository and language. The
    setup flags change the tasks' setup for the check and in the sound file."""
    import yaml

    from harness.assembly import Runtime
    from harness.batch.tasks import load_tasks, read_tasks_text
    from harness.cli.environment import run_id
    from harness.config import load_config
    from harness.history import check, materialize

    with reported():
        tasks = load_tasks(tasks_file)
        user = load_config(None)  # what a task's devcontainer may install and pull
        tasks.defaults.devcontainer_features = {**user.devcontainer_features, **tasks.defaults.devcontainer_features}
        tasks.defaults.devcontainer_pull = [*user.devcontainer_pull, *tasks.defaults.devcontainer_pull]
        raw = yaml.safe_load(read_tasks_text(tasks_file))
        if setup or allow_net or ca_bundle or setup_timeout:
            policy = setup_policy(setup, allow_net, ca_bundle, setup_timeout)
            tasks = with_setup(tasks, raw, policy, given=bool(setup))
        runtime = Runtime(run_id=run_id("check"), docker_host=docker_host())

        def said(verdict: check.Verdict) -> None:
            if not as_json:
                mark = "sound  " if verdict.sound else "unsound"
                err_console.print(f"{mark} {verdict.task_id}: {verdict.reason}", soft_wrap=True, markup=False)

        verdicts = check.check(
            tasks,
            runtime,
            workers=workers,
            env_images=env_images,
            build_envs=build_envs,
            on_verdict=said,
            log=lambda text: err_console.print(text, soft_wrap=True, markup=False),
        )
        sound = {v.task_id: v for v in verdicts if v.sound}
        kept = [entry for entry in raw.get("tasks", []) if entry.get("id") in sound]
        default_image = (raw.get("defaults") or {}).get("image", tasks.defaults.image)
        for entry in kept:  # an image picked for what the commit declares goes with the task
            picked = sound[entry["id"]].image
            if picked and picked != entry.get("image", default_image):
                entry["image"] = picked
            if sound[entry["id"]].verify:  # the tests broken either way left out
                entry["verify"] = sound[entry["id"]].verify
        target = output or sound_path(tasks_file)
        if target.resolve().parent != tasks_file.resolve().parent:
            fail("-o must be in the same directory as TASKS (its repo paths are relative to it)", ExitCode.USAGE)
        if target.resolve() == tasks_file.resolve():
            fail(f"-o {target} is TASKS itself: the sound tasks go beside it, never over it", ExitCode.USAGE)
        dropped = [f"  {v.task_id}: {v.reason}" for v in verdicts if not v.sound]
        header = [f"Checked by `harness tasks check`: {len(kept)} of {len(verdicts)} task(s) sound."]
        header += ["Dropped:", *dropped] if dropped else []
        materialize.dump(target, header, raw.get("defaults") or {}, kept)
    by_kind = dict(Counter(v.kind for v in verdicts).most_common())
    report = check.yield_report(tasks, verdicts)
    if as_json:
        print(
            json.dumps(
                {"verdicts": [v.__dict__ for v in verdicts], "by_kind": by_kind, "yield": report, "output": str(target)}
            )
        )
    else:
        console.print("by reason: " + ", ".join(f"{kind} {count}" for kind, count in by_kind.items()), markup=False)
        print_check_yield(report)
        console.print(
            f"{len(kept)} of {len(verdicts)} task(s) sound: wrote them to {target}; {tasks_file} is kept as it was",
            soft_wrap=True,
            markup=False,
        )
    if not kept:
        raise typer.Exit(int(ExitCode.FAILED_VERIFICATION))


def with_setup(tasks: Any, raw: dict, policy: Any, *, given: bool) -> Any:
    """The tasks (and their raw entries, for the sound file) with the setup the flags ask for: a given
    `--setup` replaces each task's own; `--allow-net`, `--ca-bundle` and `--setup-timeout` join what
    each task's setup has."""
    from harness.errors import UsageError
    from harness.history.prepare import SETUP_KEYS, setup_keys, with_network
    from sandbox.settings import SessionSettings

    entries = {entry.get("id"): entry for entry in raw.get("tasks", []) if isinstance(entry, dict)}
    cleared = {key: SessionSettings.model_fields[key].get_default(call_default_factory=True) for key in SETUP_KEYS}
    changed = []
    for task in tasks.tasks:
        language = str((task.tags.model_extra or {}).get("language") or "python")
        own = {key: getattr(task.session, key) for key in SETUP_KEYS}
        keys = setup_keys(task.repo, language, policy) if given else with_network(own, policy)
        update = {**cleared, **keys} if given else keys  # a given --setup replaces what the task had
        try:
            session = SessionSettings(**{**dict(task.session), **update})
        except ValueError as error:
            raise UsageError(f"task {task.id}: {error}") from None
        changed.append(task.model_copy(update={"session": session}))
        entry = entries.get(task.id)
        if entry is None:
            continue
        nested = entry.get("session")
        table: dict[str, Any] = nested if isinstance(nested, dict) else entry
        for key in SETUP_KEYS:
            if key in keys:
                table[key] = keys[key]
            elif given:
                table.pop(key, None)
    return tasks.model_copy(update={"tasks": changed})


def print_check_yield(report: dict) -> None:
    """The yield per repository (scanned, mined, sound, rejected by reason) and per language."""
    for repository in report["repositories"]:
        scanned = f"{repository['scanned']} commit(s) scanned, " if repository["scanned"] is not None else ""
        mined = f"{repository['mined']} mined, " if repository["mined"] is not None else ""
        console.print(
            f"yield {repository['repository']}: {scanned}{mined}{repository['checked']} checked, "
            f"{repository['sound']} sound ({_percent(repository['sound_rate'])})",
            soft_wrap=True,
            markup=False,
        )
        for kind, count in repository["rejected_by_kind"].items():
            console.print(f"  rejected {count:>4}  {kind}", markup=False)
    for name, row in report["by_language"].items():
        console.print(
            f"  {name:<11} {row['sound']} of {row['checked']} sound ({_percent(row['sound_rate'])})", markup=False
        )


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"
