"""The README and docs/ stay true: their commands exist, their links resolve, their cheap examples
print what they show.

* Every ``stackedheads ...`` command in a fenced block of README.md or docs/*.md names an
  existing verb and only options that verb has: it is parsed by the typer app's click command
  (the verb's own option parser, so values are not converted and no folder is needed, but an
  unknown option, a missing verb or an extra argument fails). In a ``console``
  block a command is a line that starts with ``$ ``; elsewhere a line that starts with the
  program. A ``...`` argument stands for elided ones.
* ``make TARGET`` names a Makefile target; ``python SCRIPT.py`` and ``pytest tests/...`` name
  files that exist.
* Every relative link (``[text](path)``, ``![alt](path)``, a reference ``[name]: path``, an HTML
  ``href="path"`` or ``src="path"``; with or without ``#anchor``) of every tracked Markdown file
  (README.md, docs/, docs/notes/, results/, studies/, tools/, ...) points to a file that exists,
  and its anchor to a heading of that file (GitHub's slugs).
* Every verb of the command line appears in the README's table of verbs.
* The cheap examples whose output a page shows (``prompts``, ``theory`` without ``--out``) are run
  in-process and must print exactly the lines shown (docs/extending.md is left out: its examples
  use a formulation the page itself adds).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def markdown_files() -> list[Path]:
    """Every Markdown file of the repository: git's tracked ones, or (no git: an unpacked copy)
    every one outside the virtual environment, runs and caches."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, capture_output=True, check=True)
        tracked = [ROOT / name for name in out.stdout.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        tracked = []
    if tracked:
        return [p for p in tracked if p.is_file()]
    skip = {".venv", "runs", ".git", ".pytest_cache", "node_modules"}
    return sorted(p for p in ROOT.rglob("*.md") if not skip & set(p.relative_to(ROOT).parts))
RUN_VERBS = ("prompts", "theory", "seeds")  # cheap, deterministic, reading tracked files at most: run for real
NOT_RUN_PAGES = ("extending.md",)  # examples of a formulation the page adds itself
SEPARATORS = {"&&", "||", "|", ";", "&"}


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# --- reading the pages ---------------------------------------------------------------------------


def blocks(text: str):
    """Fenced code blocks: ``(language, first line number, lines)``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        lang, start, body = m.group(2), i + 2, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        yield lang, start, body


def prose(text: str) -> str:
    """The page without its fenced blocks and inline code spans (links are read from this)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)


def joined(body: list[str], start: int):
    """Lines with backslash continuations joined: ``(line number, text)``."""
    i = 0
    while i < len(body):
        n, text = start + i, body[i]
        while text.rstrip().endswith("\\") and i + 1 < len(body):
            i += 1
            text = text.rstrip()[:-1] + " " + body[i].strip()
        yield n, text
        i += 1


def examples():
    """Every command of every page: ``(page, line, command, documented output lines, lang)``."""
    found = []
    for page in PAGES:
        for lang, start, body in blocks(page.read_text(encoding="utf-8")):
            if lang in ("python", "py", "json", "yaml", "toml"):
                continue
            lines = list(joined(body, start))
            if lang == "console":
                for k, (n, text) in enumerate(lines):
                    if text.startswith("$ "):
                        output = []
                        for _, after in lines[k + 1:]:
                            if after.startswith("$ "):
                                break
                            output.append(after)
                        found.append((page, n, text[2:], output, lang))
            else:
                for n, text in lines:
                    if text.strip() and not text.lstrip().startswith("#"):
                        found.append((page, n, text.strip().removeprefix("$ "), [], lang))
    return found


def segments(command: str):
    """A shell line's simple commands as token lists (comments, ``&&``, pipes dropped; leading
    ``VAR=value`` assignments removed)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    current: list[str] = []
    out = []
    for tok in lexer:
        if tok in SEPARATORS:
            out.append(current)
            current = []
        else:
            current.append(tok)
    out.append(current)
    cleaned = []
    for seg in out:
        while seg and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", seg[0]):
            seg = seg[1:]
        if seg:
            cleaned.append(seg)
    return cleaned


def is_cli(program: str) -> bool:
    return program == "stackedheads" or program.endswith("/stackedheads")


EXAMPLES = examples()
CLI_EXAMPLES = [
    (page, n, seg)
    for page, n, command, _, _ in EXAMPLES
    for seg in segments(command)
    if is_cli(seg[0])
]


# --- the command line ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_command():
    from stackedheads.cli import app

    return typer.main.get_command(app)


def check_cli(root, args: list[str]) -> None:
    """Parse ``stackedheads ARGS`` as the CLI would, without running it; raise AssertionError
    (or click's usage error) naming what does not exist."""
    args = [a for a in args if a != "..."]
    cmd, path = root, ["stackedheads"]
    while hasattr(cmd, "commands"):  # a group: the next word must be one of its verbs
        if not args or args[0] == "--help":
            assert args or cmd.invoke_without_command, f"`{' '.join(path)}` needs a verb: one of {sorted(cmd.commands)}"
            return
        verb = args.pop(0)
        assert verb in cmd.commands, f"`{' '.join(path)} {verb}`: no such verb (the verbs are {sorted(cmd.commands)})"
        cmd = cmd.commands[verb]
        path.append(verb)
    # The command's own option parser: tokens to options and arguments, no value converted and no
    # callback run (make_context's resilient_parsing would also swallow an unknown option).
    parser = cmd.make_parser(cmd.context_class(cmd, info_name=" ".join(path)))
    _, extra, _ = parser.parse_args(args=list(args))
    assert not extra, f"`{' '.join(path)}`: unexpected arguments {extra}"


def test_the_checker_catches_mistakes(root_command):
    """A renamed option, a missing verb or an extra argument fails the check (else the
    examples' test proves nothing)."""
    check_cli(root_command, ["theory", "--max-depth", "2", "--json"])
    check_cli(root_command, ["sweep", "figure4", "--preset", "quick", "--out", "x"])
    check_cli(root_command, ["models"])
    for bad in (["theory", "--max-dpeth", "2"], ["sweep", "figure5"], ["sweep"], ["claims", "a", "b"]):
        with pytest.raises(Exception):
            check_cli(root_command, bad)


def test_the_pages_have_examples():
    assert len(CLI_EXAMPLES) >= 30, "the examples were not found: did the fence syntax change?"
    assert any(page.name == "README.md" for page, _, _ in CLI_EXAMPLES)


@pytest.mark.parametrize(
    "page,line,args", CLI_EXAMPLES, ids=[f"{rel(p)}:{n}" for p, n, _ in CLI_EXAMPLES]
)
def test_every_documented_command_parses(root_command, page, line, args):
    try:
        check_cli(root_command, list(args[1:]))
    except AssertionError:
        raise
    except Exception as e:  # click's usage errors: no such option, a missing value
        pytest.fail(f"{rel(page)}:{line}: `{' '.join(args)}`: {type(e).__name__}: {getattr(e, 'message', e)}")


def test_every_verb_is_in_the_readme_table(root_command):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    def leaves(cmd, path):
        if hasattr(cmd, "commands"):
            if getattr(cmd, "invoke_without_command", False):
                yield path
            for name, sub in cmd.commands.items():
                yield from leaves(sub, [*path, name])
        else:
            yield path

    missing = [" ".join(p) for p in leaves(root_command, []) if f"| `stackedheads {' '.join(p)}` |" not in readme]
    assert not missing, f"verbs missing from the README's table: {missing}"


# --- other programs the pages name ---------------------------------------------------------------


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, re.M)}


def test_make_targets_and_scripts_exist():
    targets = make_targets()
    problems = []
    for page, n, command, _, _ in EXAMPLES:
        for seg in segments(command):
            where = f"{rel(page)}:{n}"
            if seg[0] == "make":
                for tok in seg[1:]:
                    if not tok.startswith("-") and "=" not in tok and tok not in targets:
                        problems.append(f"{where}: no make target {tok!r}")
            elif re.search(r"(^|/)python3?$", seg[0]) and len(seg) > 1:
                rest = seg[1:]
                if rest[:2] == ["-m", "pytest"]:
                    files = [t.split("::")[0] for t in rest[2:] if t.startswith("tests/")]
                elif rest[0].endswith(".py") and not rest[0].startswith("runs/"):
                    files = [rest[0]]
                else:
                    files = []
                problems += [f"{where}: {f} does not exist" for f in files if not (ROOT / f).exists()]
    assert not problems, "\n".join(problems)


# --- links ---------------------------------------------------------------------------------------


def slugs(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -1, -2 for
    repeats."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# The other ways Markdown links a file: a reference definition, an HTML tag's href or src.
OTHER_LINKS = (re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", re.M), re.compile(r"\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']"))


def link_targets(text: str) -> list[str]:
    """Every link target of a Markdown page's prose (not its code)."""
    body = prose(text)
    return [m.group(1) for pattern in (LINK, *OTHER_LINKS) for m in pattern.finditer(body)]


def broken_links(pages: list[Path]) -> tuple[list[str], int]:
    """Each relative link of ``pages`` whose file or anchor does not exist, and how many were read."""
    problems, checked = [], 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in link_targets(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            checked += 1
            path_part, _, anchor = target.partition("#")
            dest = (page.parent / path_part).resolve() if path_part else page
            if not dest.exists():
                problems.append(f"{rel(page)}: link to {target}: {path_part} does not exist")
                continue
            if anchor and dest.suffix == ".md" and anchor not in slugs(dest.read_text(encoding="utf-8")):
                problems.append(f"{rel(page)}: link to {target}: no heading with anchor #{anchor} in {rel(dest)}")
    return problems, checked


def test_every_relative_link_resolves():
    """Every tracked Markdown file's relative links, docs/notes/ and results/ included."""
    pages = markdown_files()
    assert {ROOT / name for name in ("README.md", "docs/notes/README.md", "studies/README.md", "tools/gpu/README.md",
                                     "tools/maintenance/README.md", "benchmarks/README.md", "results/README.md")} <= set(pages)
    problems, checked = broken_links(pages)
    assert checked >= 30, "the links were not found"
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_a_broken_link(tmp_path):
    """A missing file, a missing anchor and a folder's link are told apart (else the test above
    proves nothing)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "b.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "sub" / "a.md"
    page.write_text("[ok](../b.md#a-heading) [dir](../sub/) [gone](../c.md) [anchor](../b.md#no-such) "
                    "`[code](x.md)` [web](https://example.org/x.md)\n\n"
                    '<img src="../d.png"> <a href="../b.md">b</a>\n\n[ref]: ../e.md\n', encoding="utf-8")
    problems, checked = broken_links([page])
    assert checked == 7
    assert len(problems) == 4 and "c.md does not exist" in problems[0] and "#no-such" in problems[1], problems
    assert {"d.png does not exist", "e.md does not exist"} == {p.rsplit("../", 1)[1] for p in problems[2:]}, problems


PATH_SPAN = re.compile(r"`((?:src|tests|docs|tools|benchmarks|studies|results|data)/[^`\s]*)`")
ADDS_FILES = ("docs/extending.md",)  # names the files its walk-throughs add


def test_every_path_a_page_names_exists():
    """A repository path in a code span (`src/...`, `tests/...`, `tools/...`, ...) of a tracked
    Markdown file outside docs/notes/ (history, whose paths may be gone) and results/ exists;
    a pattern (``<recipe>``, ``*``, ``NAME``, ``...``) stands for any."""
    problems, checked = [], 0
    for page in markdown_files():
        name = rel(page)
        if name.startswith(("docs/notes/", "results/")) or name in ADDS_FILES:
            continue
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for m in PATH_SPAN.finditer(line):
                path = m.group(1).split("::")[0].rstrip("/")
                if re.search(r"[<>*{}]|\.\.\.|[A-Z]{3,}", path):
                    continue
                checked += 1
                if not (ROOT / path).exists():
                    problems.append(f"{name}:{n}: {path} does not exist")
    assert checked >= 30, "the paths were not found"
    assert not problems, "\n".join(problems)


def test_every_docs_page_is_linked_from_the_readme():
    readme = prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {m.group(1).partition("#")[0] for m in LINK.finditer(readme)}
    missing = [rel(p) for p in PAGES[1:] if rel(p) not in linked]
    assert not missing, f"docs pages the README does not link: {missing}"


# --- rules, not history -------------------------------------------------------------------------

ISSUE_N = re.compile(r"issues?\s*#?\d+", re.I)  # inside a name too (test_ then the word and a number)
DATE = re.compile(r"\b(?:19|20)\d\d-\d\d-\d\d\b")
RULE_TREES = ("src", "tests", "benchmarks", "tools", "studies")


def python_prose(text: str) -> str:
    """A Python file's comments and docstrings (where a date would be history; in a string it is
    data)."""
    import ast
    import io
    import tokenize

    out = [tok.string for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            out.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(out)


def history_in(name: str, text: str) -> list[str]:
    """What in a file is history rather than a rule: "issue N" anywhere, a date in its prose
    (comments and docstrings of Python, comments of a Makefile or shell script, Markdown; a file
    of another kind, a template or a notebook, is checked for "issue N" only)."""
    found = [f"{name}: {m.group(0)!r}" for m in ISSUE_N.finditer(text)]
    if not (name.endswith((".py", ".md", ".sh")) or name == "Makefile"):
        return found
    if name.endswith(".py"):
        prose_text = python_prose(text)
    elif name.endswith(".md"):
        prose_text = text
    else:
        prose_text = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    return found + [f"{name}: date {m.group(0)}" for m in DATE.finditer(prose_text)]


def tracked_text(*where: str) -> dict[str, str]:
    """Every tracked file under ``where`` that is text (UTF-8), by name."""
    import subprocess

    names = subprocess.run(["git", "ls-files", "-z", "--", *where], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    out = {}
    for name in filter(None, names):
        try:
            out[name] = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # a figure, a deleted file not yet committed
    return out


def test_code_tests_and_docs_state_rules_not_history():
    """Every tracked text file of src/, tests/, benchmarks/, tools/, studies/ (templates
    included), the Makefile, pyproject.toml, README.md and docs/ outside docs/notes/ (which keeps
    the dated history) names no issue number (``issue N``, ``issue #N``) and carries no dates."""
    files = tracked_text(*RULE_TREES, "Makefile", "pyproject.toml", "README.md", "docs")
    files = {n: text for n, text in files.items() if not n.startswith("docs/notes/")}
    assert len(files) > 100 and "Makefile" in files and any(n.endswith(".j2") for n in files), "the files were not found"
    problems = [p for n, text in files.items() for p in history_in(n, text)]
    assert not problems, "history where rules belong:\n" + "\n".join(problems)


def test_the_history_check_catches_issue_numbers_and_dates():
    word = "issue"  # spelled apart, so that this file passes the check itself
    code = f'"""Rule ({word} 42)."""\nx = "2025-01-01"  # measured 2026-11-22\ndef f():\n    """Since 2026-11-27."""\n'
    found = history_in("a.py", code)
    assert found == [f"a.py: '{word} 42'", "a.py: date 2026-11-22", "a.py: date 2026-11-27"], found
    assert history_in("Makefile", f"# budget ({word.title()} #7)\nX = 2025-01-01\n") == [f"Makefile: '{word.title()} #7'"]
    assert history_in("a.py", 'x = "2025-01-01"  # a rule\n') == []
    assert history_in("t.py", f"def test_{word}42():\n    pass\n") == [f"t.py: '{word}42'"]
    assert history_in("page.html.j2", f"<!-- {word} #3, 2025-01-01 -->") == [f"page.html.j2: '{word} #3'"]


# --- cheap examples, run ------------------------------------------------------------------------

RUNNABLE = [
    (page, n, segments(command)[0], output)
    for page, n, command, output, lang in EXAMPLES
    if lang == "console" and output and page.name not in NOT_RUN_PAGES
    and len(segments(command)) == 1 and is_cli(segments(command)[0][0])
    and segments(command)[0][1] in RUN_VERBS
    and not {"--out", "-o", "--export"} & set(segments(command)[0])
]


def test_there_are_runnable_examples():
    assert any(page.name == "README.md" for page, *_ in RUNNABLE)
    assert {args[1] for _, _, args, _ in RUNNABLE} == set(RUN_VERBS)


@pytest.mark.parametrize("page,line,args,output", RUNNABLE, ids=[f"{rel(p)}:{n}" for p, n, *_ in RUNNABLE])
def test_cheap_examples_print_what_the_docs_show(cli, monkeypatch, page, line, args, output):
    monkeypatch.setenv("COLUMNS", "120")  # rich tables at their natural width
    monkeypatch.chdir(ROOT)  # examples name tracked folders (results/...) from the project's root
    r = cli(*args[1:])
    assert r.code == 0, r.err
    got = [s.rstrip() for s in r.out.splitlines()]
    want = [s.rstrip() for s in output]
    assert got == want, f"{rel(page)}:{line}: `{' '.join(args)}` prints other lines than the page shows"


# --- the README as a front page ------------------------------------------------------------------

README_MAX_LINES = 220
FIRST_SCREEN = 30  # what it is, the three commands and the verdicts in short
SECTIONS = ("Sec. 3", "Sec. 4", "Sec. 5", "Sec. 7", "Sec. 8", "Sec. 9", "beyond")
SUMMARY = {"reproduces": "reproduces", "does not reproduce": "does not", "undecided": "undecided"}
CLAIM_ID = re.compile(r"\b([A-Z])(\d)(?:\s*-\s*\1?(\d))?\b")


def claim_ids(text: str) -> set[str]:
    """Claim ids named in ``text``, ranges spelled out: "T1-T3, A5" -> T1, T2, T3, A5."""
    return {f"{m.group(1)}{i}" for m in CLAIM_ID.finditer(text)
            for i in range(int(m.group(2)), int(m.group(3) or m.group(2)) + 1)}


def verdict_tables(lines: list[str]) -> list[tuple[int, list[list[str]], int, int]]:
    """README's tables of claims (the sections' table, and the Sections 8-9 table `results-index`
    writes from the published claims): each header's line, its rows' cells, the claim and verdict
    columns."""
    found = []
    for header, line in enumerate(lines):
        if not (line.startswith("|") and "| verdict" in line and "| claim |" in line):
            continue
        head = [c.strip() for c in line.strip().strip("|").split("|")]
        rows = []
        for s in lines[header + 2:]:
            if not s.startswith("|"):
                break
            rows.append([c.strip() for c in s.strip().strip("|").split("|")])
        found.append((header, rows, head.index("claim"), next(i for i, h in enumerate(head) if h.startswith("verdict"))))
    assert found, "README.md has no table with a 'verdict' column"
    return found


def summary_kind(verdict_cell: str) -> str:
    """The short summary's word for a claim from its verdicts over every reference: any FAIL does
    not reproduce; else any INCONCLUSIVE (or a verdict that depends on the reading) is undecided;
    else PASS reproduces. Text in parentheses (a seed's verdict, another reading's) is not a
    headline verdict."""
    while re.search(r"\([^()]*\)", verdict_cell):
        verdict_cell = re.sub(r"\([^()]*\)", "", verdict_cell)
    if re.search(r"\bFAIL\b", verdict_cell):
        return "does not"
    if re.search(r"\bINCONCLUSIVE\b|DEPENDS ON READING", verdict_cell):
        return "undecided"
    assert re.search(r"\bPASS\b", verdict_cell), f"no verdict in {verdict_cell!r}"
    return "reproduces"


def test_the_readme_is_a_front_page():
    """README.md is short; its first screen says what it is, gives the three commands with their
    times (the llama.cpp build included), the verdicts in short and the tutorial's link; the full
    table of the paper's sections, each with a verdict and its robustness, follows."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"
    top = lines[:FIRST_SCREEN]
    for command in ("make install", "make demo", "make test"):
        at = next((i for i, s in enumerate(top) if s.startswith(command + " ")), None)
        assert at is not None, f"`{command}` is not in README.md's first {FIRST_SCREEN} lines"
        said = top[at] + " " + (top[at + 1] if at + 1 < len(top) and top[at + 1].startswith(" ") else "")
        assert re.search(r"\d+ minutes", said), f"`{command}` on the first screen says not how long it takes"
    assert any("llama.cpp" in s and "minutes" in s for s in top), "the llama.cpp build's time is not on the first screen"
    assert any("docs/tutorial.ipynb" in s for s in top), "the tutorial is not linked in README.md's first screen"
    assert any("](#what-reproduces)" in s for s in top), "the verdicts in short do not link to the full table"
    tables = verdict_tables(lines)
    assert "robustness" in lines[tables[0][0]], "the sections' table has no 'robustness' column"
    rows = [r for _, table_rows, _, _ in tables for r in table_rows]
    missing = [s for s in SECTIONS if not any(r[0].startswith(s) for r in rows)]
    assert not missing, f"the sections' table has no row for {missing}"


def test_the_verdicts_in_short_agree_with_the_full_table():
    """Every claim of the paper's sections in the full table is named once in the first screen's
    summary, under the word its verdicts over every reference give (:func:`summary_kind`)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    said: dict[str, str] = {}
    for s in " ".join(lines[:FIRST_SCREEN]).split("- **")[1:]:
        word, _, rest = s.partition("**")
        assert word in SUMMARY, f"the summary's words are {sorted(SUMMARY)}, not {word!r}"
        for cid in claim_ids(rest):
            assert cid not in said, f"{cid} is named twice in the summary"
            said[cid] = SUMMARY[word]
    want = {cid: summary_kind(r[verdict_col]) for _, rows, claim_col, verdict_col in verdict_tables(lines)
            for r in rows if r[0].startswith("Sec.") for cid in claim_ids(r[claim_col].split(" ", 1)[0] if r[0] in ("Sec. 8", "Sec. 9") else r[claim_col])}
    assert want, "no claim ids in the full table"
    wrong = {cid: (said.get(cid), kind) for cid, kind in want.items() if said.get(cid) != kind}
    assert not wrong, f"the summary (said, the table's) differs: {wrong}"
    assert not set(said) - set(want), f"the summary names claims the table does not: {sorted(set(said) - set(want))}"


def test_the_summary_rule():
    assert summary_kind("`gpt2`: INCONCLUSIVE; `tl-stack`: FAIL") == "does not"
    assert summary_kind("`gpt2`: INCONCLUSIVE; `tl-stack`: PASS (3 of 12)") == "undecided"
    assert summary_kind("reproduces: T1-T3 PASS") == "reproduces"
    assert summary_kind("`a`: DEPENDS ON READING (FAIL by paths (x1)); `b`: PASS (seed 1 FAIL)") == "undecided"
    assert claim_ids("L1-L2, A1 and T1-T3; C0-C3 at N = 4") == {"L1", "L2", "A1", "T1", "T2", "T3", "C0", "C1", "C2", "C3"}


def test_the_results_folders_the_readme_names_exist():
    """Every ``results/...`` path the README names in a code span exists: a published reference,
    a folder of them, or results/README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(results/[\w./*+<>-]+?)/?`", text))
    assert named, "the README names no results/ folder"
    problems = []
    for name in sorted(named):
        if "<" in name:  # a pattern in words, e.g. results/sec9/<recipe>
            name = name.split("<")[0].rstrip("/")
        if name.endswith(".md"):
            if not (ROOT / name).is_file():
                problems.append(name)
            continue
        if not [p for p in ROOT.glob(name) if p.is_dir()]:
            problems.append(name)
    assert not problems, f"README.md names results folders that do not exist: {problems}"


def test_every_test_file_is_in_the_developers_table():
    """docs/development.md's "Tests by feature" has one line per test file as they are now."""
    table = (ROOT / "docs" / "development.md").read_text()
    missing = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if f"`{p.name}`" not in table)
    assert not missing, f"docs/development.md's 'Tests by feature' lacks {missing}"
