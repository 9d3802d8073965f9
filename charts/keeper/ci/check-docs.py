#!/usr/bin/env python3
"""Checks the links of keeper's documentation (run by `make chart`; the standard library only).

- Every relative link in README.md, CHANGELOG.md and docs/*.md names a file or directory of the
  repository, and its #anchor, if any, is a heading of the Markdown file it points to (anchors
  as GitHub makes them: lower case, punctuation dropped, spaces as hyphens, -1, -2 for repeats).
- Every runbook_url of the chart's alerts (templates/_alerts.tpl, files/alerts.yaml and the
  expectations in ci/alerts-test.yaml) points at this repository's main branch on GitHub, at a
  Markdown file that exists here, and at a heading of that file named after the alert.
- Every path of the repository named in a tracked text file (docs, comments, scripts, the chart:
  `src/cluster/api.rs`, `e2e/kube/build.sh`) exists: relative to the repository, to `src/`, or to
  a directory above the file that names it (a crate's README naming its own `src/lib.rs`). A file
  that moves leaves no reference to its old place. CHANGELOG.md and bench/results.md are history
  and keep the paths of their day.

    charts/keeper/ci/check-docs.py          no arguments; exits 1 and lists every broken link
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUNBOOK_BASE = "https://github.com/keeper-dev/keeper/blob/main/"
ALERT_FILES = [
    "charts/keeper/templates/_alerts.tpl",
    "charts/keeper/files/alerts.yaml",
    "charts/keeper/ci/alerts-test.yaml",
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A path of the repository as prose and comments name it: a top-level directory, then a file.
REPO_PATH = re.compile(
    r"(?<![\w/.$-])((?:src|e2e|charts|config|docs|crds|tests|bench)/[\w./-]*?\w"
    r"\.(?:rs|py|sh|yaml|yml|md|toml|txt|json|tpl))(?![\w/-])"
)
HISTORY = {"CHANGELOG.md", "bench/results.md"}
TEXT = (".rs", ".md", ".py", ".sh", ".yaml", ".yml", ".toml", ".txt", ".tpl", "Makefile", "run")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def prose_lines(path):
    """(line number, line) outside fenced code blocks."""
    fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield number, line


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, found = {}, set()
        for _, line in prose_lines(path):
            match = re.match(r"^#{1,6} +(.*?)#*\s*$", line)
            if match:
                base = slug(match.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        _anchors[path] = found
    return _anchors[path]


def check_target(source, target, errors, where):
    """A relative link `target` (path and/or #anchor) written in file `source`."""
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    if not resolved.exists():
        errors.append(f"{where}: {target}: no such file")
    elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        errors.append(f"{where}: {target}: no heading with that anchor in {resolved.relative_to(ROOT)}")


def check_docs(errors):
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    count = 0
    for source in files:
        if not source.exists():
            continue
        for number, line in prose_lines(source):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                count += 1
                check_target(source, target, errors, f"{source.relative_to(ROOT)}:{number}")
    return count


def check_runbooks(errors):
    count = 0
    for name in ALERT_FILES:
        source = ROOT / name
        text = source.read_text(encoding="utf-8")
        alerts = re.findall(r"alert: (\w+)", text)
        for number, line in enumerate(text.split("\n"), 1):
            match = re.search(r"runbook_url: (\S+)", line)
            if not match:
                continue
            count += 1
            url, where = match.group(1), f"{name}:{number}"
            if not url.startswith(RUNBOOK_BASE):
                errors.append(f"{where}: {url}: not under {RUNBOOK_BASE}")
                continue
            path, _, anchor = url[len(RUNBOOK_BASE):].partition("#")
            if not anchor or not path.endswith(".md"):
                errors.append(f"{where}: {url}: not a Markdown file with an #anchor")
                continue
            check_target(ROOT / "README.md", path + "#" + anchor, errors, where)
            if alerts and anchor not in {slug(a) for a in alerts}:
                errors.append(f"{where}: {url}: the anchor names no alert of {name}")
    if count == 0:
        errors.append("no runbook_url found in " + ", ".join(ALERT_FILES))
    return count


def tracked_files():
    """The text files git tracks; outside a git checkout (an unpacked archive), every text file
    of the tree but build output and local stacks."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", "target", ".keeper-dev", "node_modules"}
        listed = [
            str(path.relative_to(ROOT))
            for path in ROOT.rglob("*")
            if path.is_file() and not skip & set(path.relative_to(ROOT).parts)
        ]
    return [name for name in listed if name.endswith(TEXT)]


def check_paths(errors):
    """Every repository path named in a tracked text file exists (see the module's doc)."""
    count = 0
    for name in tracked_files():
        if name in HISTORY:
            continue
        source = ROOT / name
        if not source.is_file():
            continue
        places = [ROOT, ROOT / "src", *[d for d in source.parents if ROOT in d.parents]]
        for number, line in enumerate(source.read_text(encoding="utf-8", errors="replace").split("\n"), 1):
            for path in REPO_PATH.findall(line):
                count += 1
                if not any((place / path).exists() for place in places):
                    errors.append(f"{name}:{number}: {path}: no such file")
    if count < 100:
        errors.append(f"only {count} repository paths found in tracked files: the check reads too little")
    return count


def main():
    errors = []
    links = check_docs(errors)
    runbooks = check_runbooks(errors)
    paths = check_paths(errors)
    if errors:
        print("check-docs: broken links:", *errors, sep="\n  ", file=sys.stderr)
        return 1
    print(
        f"docs: {links} relative links and anchors resolve; {runbooks} runbook_url point at headings;"
        f" {paths} repository paths named in tracked files exist"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
