"""Histories the mining bench builds (with dulwich, harness.history.writer): one small project per
language, each with what real projects land: a fix with its test, a pull request merged with its
own commits, a squashed pull request, a refactor whose tests pass either way, and in Python a
dependency the image lacks and a commit made for an older interpreter than the image's.

They are made to look like real work, not to pass: each repository's unsound tasks are the kinds
the check must name (passes already, a missing module, an interpreter mismatch, a Go commit from
before Go modules that today's toolchain refuses at both ends), and a JavaScript test pinned to the
runtime of its day is left out by name where it breaks a task that is otherwise sound."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.history.writer import HistoryWriter

AREA = """def square(side):
    return side * side


def rect(width, height):
    return width + height
"""


def python_history(path: Path) -> None:
    w = HistoryWriter(path)
    w.commit(
        "Start shapes",
        {
            "pyproject.toml": '[project]\nname = "shapes"\nversion = "0.1"\nrequires-python = ">=3.8"\n',
            "shapes/__init__.py": "",
            "shapes/area.py": AREA,
            "tests/test_area.py": "from shapes.area import square\n\n\ndef test_square():\n    assert square(3) == 9\n",
        },
    )
    fixed = AREA.replace("width + height", "width * height")
    w.commit(
        "Fix rect() adding its sides\n\nrect(2, 3) gave 5; an area is the product.",
        {
            "shapes/area.py": fixed,
            "tests/test_area.py": "from shapes.area import rect, square\n\n\ndef test_square():\n"
            "    assert square(3) == 9\n\n\ndef test_rect():\n    assert rect(2, 3) == 6\n",
        },
    )
    w.checkout("perimeter", new=True)
    w.commit(
        "Add perimeter()",
        {"shapes/perimeter.py": "def perimeter(width, height=None):\n    height = width if height is None else height\n"
         "    return 2 * (width + height)\n"},
    )  # fmt: skip
    w.commit(
        "Test perimeter()",
        {"tests/test_perimeter.py": "from shapes.perimeter import perimeter\n\n\ndef test_perimeter():\n"
         "    assert perimeter(2, 3) == 10\n    assert perimeter(2) == 8\n"},
    )  # fmt: skip
    w.checkout("main")
    w.merge("perimeter", "Merge pull request #4 from ada/perimeter\n\nperimeter() of squares and rectangles")
    w.commit(
        "Add circle() (#5)\n\n* circle() is pi r squared\n* test it",
        {
            "shapes/area.py": fixed + "\n\ndef circle(radius):\n    import math\n\n    return math.pi * radius**2\n",
            "tests/test_circle.py": "import math\n\nfrom shapes.area import circle\n\n\ndef test_circle():\n"
            "    assert math.isclose(circle(2), 4 * math.pi)\n",
        },
    )
    w.commit("Document the shapes", {"README.md": "# shapes\n\nAreas and perimeters.\n"})
    w.commit(
        "Name rect()'s sides for what they are",
        {
            "shapes/area.py": fixed.replace("width", "w").replace("height", "h")
            + "\n\ndef circle(radius):\n    import math\n\n    return math.pi * radius**2\n",
            "tests/test_area.py": "from shapes.area import rect, square\n\n\ndef test_square():\n"
            "    assert square(3) == 9\n\n\ndef test_rect():\n    assert rect(2, 3) == 6\n    assert rect(1, 1) == 1\n",
        },
    )
    w.commit(
        "scale() grows any shape's sides\n\nA cross-file change: a helper and its use.",
        {
            "shapes/scale.py": "from shapes.area import rect\n\n\ndef scaled_rect(width, height, factor):\n"
            "    return rect(width * factor, height * factor)\n",
            "shapes/__init__.py": "from shapes.scale import scaled_rect\n\n__all__ = ['scaled_rect']\n",
            "tests/test_scale.py": "from shapes import scaled_rect\n\n\ndef test_scaled():\n"
            "    assert scaled_rect(1, 2, 3) == 18\n",
        },
    )
    w.commit(
        "Refuse negative sides\n\nsquare(-1) should raise ValueError, not return 1.",
        {
            "shapes/validate.py": "def checked(*sides):\n    for side in sides:\n        if side < 0:\n"
            "            raise ValueError(f'negative side {side}')\n    return sides\n",
            "tests/test_validate.py": "import pytest\n\nfrom shapes.validate import checked\n\n\ndef test_negative():\n"
            "    with pytest.raises(ValueError):\n        checked(1, -1)\n\n\ndef test_fine():\n"
            "    assert checked(1, 2) == (1, 2)\n",
        },
    )
    w.checkout("triangle", new=True)
    w.commit(
        "Heron's formula",
        {"shapes/triangle.py": "def triangle(a, b, c):\n    s = (a + b + c) / 2\n"
         "    return (s * (s - a) * (s - b) * (s - c)) ** 0.5\n"},
    )  # fmt: skip
    w.commit(
        "Test triangle()",
        {"tests/test_triangle.py": "from shapes.triangle import triangle\n\n\ndef test_triangle():\n"
         "    assert triangle(3, 4, 5) == 6\n"},
    )  # fmt: skip
    w.checkout("main")
    w.merge("triangle", "Merge pull request #9 from ada/triangle\n\ntriangle() by Heron's formula")
    w.commit(
        "Read shapes from the native reader",
        {
            "shapes/native.py": "import shapes_native\n\n\ndef load(path):\n    return shapes_native.read(path)\n",
            "tests/test_native.py": "from shapes.native import load\n\n\ndef test_load():\n    assert load\n",
        },
    )
    w.commit(
        "Support the interpreters of the day",
        {"pyproject.toml": '[project]\nname = "shapes"\nversion = "0.2"\nrequires-python = ">=3.7,<3.10"\n'},
    )
    w.commit(
        "from_dict() takes any mapping",
        {
            "shapes/build.py": "from collections import Mapping\n\n\ndef from_dict(data):\n"
            "    if not isinstance(data, Mapping):\n        raise TypeError('a mapping')\n    return dict(data)\n",
            "tests/test_build.py": "from shapes.build import from_dict\n\n\ndef test_from_dict():\n"
            "    assert from_dict({'a': 1}) == {'a': 1}\n",
        },
    )
    w.close()


STACK = """package stack

type Stack struct{ items []int }

func (s *Stack) Push(v int) { s.items = append(s.items, v) }

func (s *Stack) Pop() (int, bool) {
	if len(s.items) == 0 {
		return 0, false
	}
	v := s.items[0]
	s.items = s.items[1:]
	return v, true
}
"""


def go_history(path: Path) -> None:
    w = HistoryWriter(path)
    push_test = (
        'package stack\n\nimport "testing"\n\nfunc TestPush(t *testing.T) {\n\tvar s Stack\n\ts.Push(1)\n'
        '\tif len(s.items) != 1 {\n\t\tt.Fatal("push")\n\t}\n}\n'
    )
    # Its first commits are from before Go modules (no go.mod): today's `go test` refuses them at both
    # ends of a task, which the check names as such, not as a change that fails.
    push_only = STACK[: STACK.index("func (s *Stack) Pop()")]
    w.commit("Start a stack", {"stack.go": push_only, "stack_test.go": push_test})
    push_test += (
        '\nfunc TestPopEmpty(t *testing.T) {\n\tvar s Stack\n\tif _, ok := s.Pop(); ok {\n\t\tt.Fatal("empty")\n'
        "\t}\n}\n"
    )
    w.commit("Pop, and say when the stack is empty", {"stack.go": STACK, "stack_test.go": push_test})
    w.commit("Use Go modules", {"go.mod": "module example.com/stack\n\ngo 1.18\n"})
    fixed = STACK.replace("v := s.items[0]\n\ts.items = s.items[1:]", "v := s.items[len(s.items)-1]\n"
                          "\ts.items = s.items[:len(s.items)-1]")  # fmt: skip
    pop_test = push_test + (
        "\nfunc TestPopIsLastIn(t *testing.T) {\n\tvar s Stack\n\ts.Push(1)\n\ts.Push(2)\n"
        '\tif v, ok := s.Pop(); !ok || v != 2 {\n\t\tt.Fatalf("got %d", v)\n\t}\n}\n'
    )
    w.commit("Pop takes the last item pushed", {"stack.go": fixed, "stack_test.go": pop_test})
    w.checkout("queue", new=True)
    w.commit(
        "Add a queue",
        {"queue/queue.go": "package queue\n\ntype Queue struct{ items []int }\n\nfunc (q *Queue) Put(v int) "
         "{ q.items = append(q.items, v) }\n\nfunc (q *Queue) Len() int { return len(q.items) }\n"},
    )  # fmt: skip
    w.commit(
        "Test the queue",
        {"queue/queue_test.go": 'package queue\n\nimport "testing"\n\nfunc TestLen(t *testing.T) {\n\tvar q Queue\n'
         '\tq.Put(1)\n\tif q.Len() != 1 {\n\t\tt.Fatal("len")\n\t}\n}\n'},
    )  # fmt: skip
    w.checkout("main")
    w.merge("queue", "Merge pull request #2 from ada/queue\n\nA FIFO queue beside the stack")
    peek = fixed + "\nfunc (s *Stack) Peek() (int, bool) {\n\tif len(s.items) == 0 {\n\t\treturn 0, false\n\t}\n" \
        "\treturn s.items[len(s.items)-1], true\n}\n"  # fmt: skip
    peek_test = pop_test + (
        '\nfunc TestPeek(t *testing.T) {\n\tvar s Stack\n\tif _, ok := s.Peek(); ok {\n\t\tt.Fatal("empty")\n\t}\n'
        '\ts.Push(3)\n\tif v, _ := s.Peek(); v != 3 {\n\t\tt.Fatal("peek")\n\t}\n}\n'
    )
    w.commit("Peek at the top without popping (#3)", {"stack.go": peek, "stack_test.go": peek_test})
    w.commit(
        "Name the receiver's items",
        {"stack.go": peek.replace("func (s *Stack) Push(v int) { s.items = append(s.items, v) }",
                                  "func (s *Stack) Push(item int) { s.items = append(s.items, item) }"),
         "stack_test.go": peek_test + '\nfunc TestPushTwo(t *testing.T) {\n\tvar s Stack\n\ts.Push(1)\n\ts.Push(1)\n'
         '\tif len(s.items) != 2 {\n\t\tt.Fatal("two")\n\t}\n}\n'},
    )  # fmt: skip
    w.close()


def javascript_history(path: Path) -> None:
    w = HistoryWriter(path)
    index = "function cap(word) {\n  return word.toUpperCase();\n}\n\nmodule.exports = { cap };\n"
    w.commit(
        "Start strs",
        {
            "package.json": '{"name": "strs", "version": "1.0.0", "engines": {"node": ">=16"}}\n',
            "index.js": index,
            "test.js": "const assert = require('node:assert');\nconst { cap } = require('./index');\n\n"
            "assert.strictEqual(typeof cap, 'function');\n",
        },
    )
    fixed = index.replace("return word.toUpperCase();", "return word.charAt(0).toUpperCase() + word.slice(1);")
    w.commit(
        "cap() capitalises the first letter only",
        {
            "index.js": fixed,
            "test.js": "const assert = require('node:assert');\nconst { cap } = require('./index');\n\n"
            "assert.strictEqual(cap('hello'), 'Hello');\n",
        },
    )
    w.checkout("slug", new=True)
    w.commit(
        "slug() for URLs",
        {"lib/slug.js": "function slug(text) {\n  return text.trim().toLowerCase().replace(/[^a-z0-9]+/g, '-')"
         ".replace(/^-|-$/g, '');\n}\n\nmodule.exports = { slug };\n"},
    )  # fmt: skip
    w.commit(
        "Test slug()",
        {"test/slug.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
         "const { slug } = require('../lib/slug');\n\ntest('slug', () => {\n"
         "  assert.strictEqual(slug(' Hello, World! '), 'hello-world');\n});\n"},
    )  # fmt: skip
    w.checkout("main")
    w.merge("slug", "Merge pull request #6 from ada/slug\n\nslug() turns titles into URL parts")
    w.commit(
        "words() splits on any space (#7)",
        {
            "lib/words.js": "function words(text) {\n  return text.split(/\\s+/).filter(Boolean);\n}\n\n"
            "module.exports = { words };\n",
            "test/words.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
            "const { words } = require('../lib/words');\n\ntest('words', () => {\n"
            "  assert.deepStrictEqual(words(' a  b\\tc '), ['a', 'b', 'c']);\n});\n",
        },
    )
    runtime_test = "\ntest('words on the runtime we ship', () => {\n  assert.strictEqual(process.versions.node.split('.')[0], '16');\n});\n"
    words_test = (
        "const test = require('node:test');\nconst assert = require('node:assert');\n"
        "const { words } = require('../lib/words');\n\ntest('words', () => {\n"
        "  assert.deepStrictEqual(words(' a  b\\tc '), ['a', 'b', 'c']);\n});\n"
    )
    # a test pinned to the Node of its day: it fails on today's at both ends of the next task, which is
    # sound without it (node --test, by the names of the tests it ran)
    w.commit("Pin the runtime in the tests", {"test/words.test.js": words_test + runtime_test})
    w.commit(
        "words() drops punctuation (#8)",
        {
            "lib/words.js": "function words(text) {\n  return text.split(/[\\s,.;!?]+/).filter(Boolean);\n}\n\n"
            "module.exports = { words };\n",
            "test/words.test.js": words_test + runtime_test + "\ntest('words drop punctuation', () => {\n"
            "  assert.deepStrictEqual(words('a, b.'), ['a', 'b']);\n});\n",
        },
    )
    w.commit(
        "Spell out the parameter",
        {
            "index.js": fixed.replace("word", "text"),
            "test.js": "const assert = require('node:assert');\nconst { cap } = require('./index');\n\n"
            "assert.strictEqual(cap('hello'), 'Hello');\nassert.strictEqual(cap('a'), 'A');\n",
        },
    )
    w.close()


def rust_history(path: Path) -> None:
    w = HistoryWriter(path)
    lib = "pub fn double(x: i64) -> i64 {\n    x + 2\n}\n"
    w.commit(
        "Start rsmath",
        {
            "Cargo.toml": '[package]\nname = "rsmath"\nversion = "0.1.0"\nedition = "2018"\nrust-version = "1.56"\n',
            "src/lib.rs": lib,
            "tests/basic.rs": "#[test]\nfn links() {\n    let _ = rsmath::double;\n}\n",
        },
    )
    fixed = lib.replace("x + 2", "x * 2")
    w.commit(
        "double() doubles",
        {"src/lib.rs": fixed, "tests/basic.rs": "#[test]\nfn doubles() {\n    assert_eq!(rsmath::double(5), 10);\n}\n"},
    )
    w.checkout("halve", new=True)
    w.commit("halve()", {"src/lib.rs": fixed + "\npub fn halve(x: i64) -> i64 {\n    x / 2\n}\n"})
    w.commit("Test halve()", {"tests/halve.rs": "#[test]\nfn halves() {\n    assert_eq!(rsmath::halve(10), 5);\n}\n"})
    w.checkout("main")
    w.merge("halve", "Merge pull request #3 from ada/halve\n\nhalve() beside double()")
    w.close()


HISTORIES: dict[str, Callable[[Path], None]] = {
    "python": python_history,
    "go": go_history,
    "javascript": javascript_history,
    "rust": rust_history,
}
