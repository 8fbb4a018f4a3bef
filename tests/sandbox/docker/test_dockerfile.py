"""A repository's Dockerfile read as the builder reads it, before any build: what it asks of the engine
beyond its context (the images of FROM and COPY --from, substituted) and what no build may ask (an ADD
of a URL, a RUN flag reaching past the build, an image named through a variable nobody gave)."""

from __future__ import annotations

import pytest

from sandbox.docker.dockerfile import DockerfileRefused, instructions, read


def test_images_are_read_with_build_arguments_as_the_builder_substitutes_them() -> None:
    text = (
        "# escape=`\n"
        "ARG BASE=local/base:1\n"
        "ARG TOOLS\n"
        "FROM ${BASE} AS build\n"
        "ARG BASE\n"
        "RUN echo one `\n"
        "    two\n"
        "FROM ${TOOLS:-local/tools:2} AS tools\n"
        "FROM build\n"
        "COPY --from=tools /a /a\n"
        "COPY --from=0 /b /b\n"
        "COPY --from=other/image:3 /c /c\n"
    )
    assert read(text).bases == ["local/base:1", "local/tools:2"]
    assert read(text).copied_from == ["other/image:3"]
    given = read(text, {"BASE": "registry.invalid/team/base:9", "TOOLS": "registry.invalid/tools:1"})
    assert given.images == ["registry.invalid/team/base:9", "registry.invalid/tools:1", "other/image:3"]
    assert [keyword for _, keyword, _ in instructions(text)][:4] == ["ARG", "ARG", "FROM", "ARG"]
    assert instructions(text)[4] == (6, "RUN", "echo one two")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("FROM a\nADD http://127.0.0.1:8080/x /x\n", "is fetched by the engine itself"),
        ('FROM a\nADD --chown=1 ["https://example.invalid/x", "/x"]\n', "is fetched by the engine itself"),
        ("FROM a\nARG U=http://169.254.169.254/latest\nADD $U /x\n", "is fetched by the engine itself"),
        ("FROM a\nADD git@example.invalid:x/y.git /y\n", "is fetched by the engine itself"),
        ("FROM a\nADD \\\n  http://10.0.0.1/x \\\n  /x\n", "line 2: ADD"),
        ("FROM ${NOBODY}\n", "through a variable no ARG default or build argument gives"),
        ("FROM a\nCOPY --from=$IMG /x /x\n", "through a variable"),
        ("FROM a\nRUN --network=host curl x\n", "reaches past the build's sandbox"),
        ("FROM a\nRUN --mount=type=bind,from=other,target=/o true\n", "reaches past the build's sandbox"),
        ("FROM a\nONBUILD ADD http://127.0.0.1/x /x\n", "ONBUILD"),
    ],
)
def test_what_no_build_may_ask_is_refused_naming_the_line(text: str, says: str) -> None:
    with pytest.raises(DockerfileRefused, match=says):
        read(text, what="the devcontainer's Dockerfile")


def test_plain_dockerfiles_pass() -> None:
    text = "FROM local/py:1\nADD archive.tar.gz /opt/\nCOPY . /src\nRUN pip install -e /src\nENV A=1\n"
    assert read(text).images == ["local/py:1"]
