#!/usr/bin/env python3
"""Checks the include graph against the layers of docs/architecture.md.

The table between the `layers:begin` and `layers:end` markers of docs/architecture.md says,
for every folder of code, which other folders it may include. This check reads that table
and every source file, and fails (exit 1, one line per problem) when
  - a file includes a header of a folder its own folder may not include,
  - a folder of code is missing from the table, or the table names a folder that is gone,
  - the table itself is not a layering (a cycle),
  - a comment or a doc cites a file of the tree that does not exist,
  - any file of the repository (tracked, or untracked and not ignored; build outputs and
    .git aside) cites a file outside it: the team's notes one directory up, or the bare
    name of one of them, which a clone does not have. Facts the code stands on belong in
    docs/measurements/ (see its README.md); wire formats are cited by their public
    upstream document.
Test files (`*_test.cc`) may also include the shared test helpers in tests/.

Run by CTest (`layering` test) and by hand:  tools/check_layers.py [REPO_ROOT]
"""
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
DOC = "docs/architecture.md"
SOURCE_EXT = (".h", ".cc", ".cu", ".def")
# Generated from api/*.proto: included as "deviceplugin/..." and "podresources/...".
GENERATED = {"deviceplugin": "api", "podresources": "api"}
# Citations known to be stale, to be fixed in the citing file and removed here (each names
# the file that cites it). Keep this empty.
KNOWN_STALE = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A path of the tree cited in a comment or a doc: src/region/region.h, docs/enforcer.md, ...
CITED = re.compile(r"\b((?:src|docs|tests|tools|cmd|bench|deploy|scripts|cmake|api)/[A-Za-z0-9_./-]*"
                   r"\.(?:h|cc|def|md|py|sh|cmake|cu|proto|yaml))\b")
# Citations of notes kept outside the repository. The patterns are built from pieces so
# that this file, which is checked too, does not cite them itself.
_SHARED = "shared"
OUTSIDE_DIRS = re.compile(r"\.\./" + _SHARED + r"\b|\b" + _SHARED + r"/(?:reference|design)\b")
_OUTSIDE_NOTES = ("ARCHITECTURE", "STYLE", "real-gpu-h100", "real-kubernetes", "kubernetes-and-nvidia-apis",
                  "container-runtimes", "hami-compat-and-lessons")
# One of those notes by name, with whatever path leads to it: an outside citation unless
# that path names a file of the tree (from the root, or from the citing file's folder).
OUTSIDE_NOTE = re.compile(r"(?<![\w./-])((?:[\w.-]*/)*(?:" + "|".join(map(re.escape, _OUTSIDE_NOTES)) +
                          r")\.md)\b")


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def layer_table():
    text = read(DOC)
    m = re.search(r"<!-- layers:begin -->(.*?)<!-- layers:end -->", text, re.S)
    if not m:
        sys.exit(f"{DOC}: no layers:begin/layers:end table")
    allowed = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`")
        allowed[folder] = set(re.findall(r"`([^`]+)`", cells[1]))
    return allowed


def folder_of(path, folders):
    """The table's folder that holds `path` (the longest match), or None."""
    best = None
    for f in folders:
        if (path == f or path.startswith(f + "/")) and (best is None or len(f) > len(best)):
            best = f
    return best


def code_folders():
    """Folders that hold code: src/<part>, cmd/<binary>, tests, bench, fuzz."""
    out = set()
    for top in ("src", "cmd"):
        d = os.path.join(ROOT, top)
        if os.path.isdir(d):
            out |= {f"{top}/{e}" for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))}
    for top in ("tests", "bench", "fuzz"):
        if os.path.isdir(os.path.join(ROOT, top)):
            out.add(top)
    return out


def sources(folder):
    for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(files):
            if name.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(dirpath, name), ROOT)


def repository_files():
    """Every file of the repository: tracked, or untracked and not ignored (so a new file
    is checked before it is committed). Without git, every file but .git and build outputs."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        files = sorted({f for f in out.decode("utf-8", "replace").split("\0") if f})
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirs, names in os.walk(ROOT):
            top = dirpath == ROOT
            dirs[:] = sorted(d for d in dirs
                             if d != ".git" and not (top and (d.startswith("build") or d == ".cache")))
            files += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in sorted(names)]
    return [f for f in files if os.path.isfile(os.path.join(ROOT, f))]


def inside_tree(path, cited):
    """Whether `cited` names a file of the tree, from the root or from `path`'s folder."""
    if cited.startswith("/"):
        return False
    for base in (ROOT, os.path.join(ROOT, os.path.dirname(path))):
        target = os.path.normpath(os.path.join(base, cited))
        if target.startswith(ROOT + os.sep) and os.path.isfile(target):
            return True
    return False


def outside_citations():
    """One line per line of a repository file that cites a file outside the repository."""
    problems = []
    for path in repository_files():
        with open(os.path.join(ROOT, path), "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue  # binary (fuzz seeds)
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            cited = [m.group(0) for m in OUTSIDE_DIRS.finditer(line)]
            for m in OUTSIDE_NOTE.finditer(line):
                if line[:m.start()].endswith(":"):
                    continue  # a URL (https://...): a public document, not a local file
                if not inside_tree(path, m.group(1)):
                    cited.append(m.group(1))
            cited = [c for c in dict.fromkeys(cited) if not any(c != o and c in o for o in cited)]
            if cited:
                problems.append(f"{path}:{number}: cites {', '.join(cited)}, outside the "
                                f"repository (a clone does not have it): write the fact into docs/measurements/ "
                                f"(or cite the public upstream document) and cite that")
    return problems


def find_cycle(allowed):
    state = {}

    def visit(node, stack):
        state[node] = 1
        for dep in sorted(allowed.get(node, ())):
            if state.get(dep) == 1:
                return stack + [node, dep]
            if dep not in state:
                cycle = visit(dep, stack + [node])
                if cycle:
                    return cycle
        state[node] = 2
        return None

    for node in sorted(allowed):
        if node not in state:
            cycle = visit(node, [])
            if cycle:
                return cycle
    return None


def main():
    allowed = layer_table()
    folders = set(allowed)
    problems = []
    for f in sorted(code_folders() - folders):
        problems.append(f"{f}: not in the layer table of {DOC}; add a row saying what it may include")
    for f in sorted(folders):
        if f != "api" and not os.path.isdir(os.path.join(ROOT, f)):
            problems.append(f"{DOC}: the layer table names {f}, which does not exist")
        for dep in sorted(allowed[f] - folders):
            problems.append(f"{DOC}: {f} may include {dep}, which has no row")
    cycle = find_cycle(allowed)
    if cycle:
        problems.append(f"{DOC}: the layer table has a cycle: {' -> '.join(cycle)}")

    cited_in = {}  # cited path -> the first file citing it
    for folder in sorted(folders & code_folders()):
        for path in sources(folder):
            text = read(path)
            for cited in CITED.findall(text):
                cited_in.setdefault(cited, path)
            is_test = path.endswith("_test.cc")
            for inc in INCLUDE.findall(text):
                top = inc.split("/")[0]
                if top in GENERATED:
                    target = GENERATED[top]
                else:
                    target = folder_of(inc, folders | {"tests"})
                if target is None:
                    # Not a path from the repository root (a generated or sibling file).
                    continue
                if target == folder or target in allowed[folder]:
                    continue
                if is_test and target == "tests":
                    continue
                problems.append(f"{path}: includes {inc}, but {folder} may include only "
                                f"{', '.join(sorted(allowed[folder])) or 'itself'} ({DOC})")
    docs = ["README.md"]
    for dirpath, dirs, names in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        docs += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in sorted(names) if n.endswith(".md")]
    for doc in docs:
        for cited in CITED.findall(read(doc)):
            cited_in.setdefault(cited, doc)
    for where, cited in sorted(KNOWN_STALE):
        if os.path.exists(os.path.join(ROOT, cited)) or cited_in.get(cited) != where:
            problems.append(f"tools/check_layers.py: {where} no longer cites a missing {cited}: "
                            f"remove it from KNOWN_STALE")
    for cited, where in sorted(cited_in.items()):
        if os.path.exists(os.path.join(ROOT, cited)) or (where, cited) in KNOWN_STALE:
            continue
        problems.append(f"{where}: cites {cited}, which does not exist")
    problems += outside_citations()

    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s); the layers are in {DOC}")
        return 1
    print(f"layers ok: {len(folders)} folders, as {DOC} says; no citation outside the repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())
