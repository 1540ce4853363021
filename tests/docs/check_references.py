#!/usr/bin/env python3
"""Checks that comments and docs point at things that exist.

Fails (exit 1) and prints file:line, the offence and a hint for each of:

  note      a `Note [Title]` referenced in a comment or a doc that no comment
            defines. A definition is a comment line holding only
            `Note [Title]` (or `Note [Title]:`) with no code before it,
            banner dashes allowed (`// ---- Note [Title] ----`); every other
            mention is a reference. Titles may wrap over comment lines.
            Comments are `//` and `/* */` in C++/CUDA, `#` and docstrings in
            Python, `#` in CMake and shell; Markdown files count whole.
  note-in   a reference `Note [Title] in <file>` whose file does not exist or
            does not define the Note.
  file      a comment or doc that names a file (`foo.cpp`, `bar.h`, `x.md`...)
            of which no file in the repository has the name (other
            projects' files: FOREIGN_FILES below).
  path      a comment or doc that names a repository path (include/, src/,
            kernels/, tests/, examples/, benchmarks/, tools/, docs/, cmake/,
            or an include-style `ddp/....h`) that does not exist. Braces are
            expanded; paths with `*`, `...` or `<placeholder>` are skipped.
  outside   a comment or doc pointing to ARCHITECTURE.md, which is not in
            this repository (Notes must not point outside it).
  index     a Note listed in docs/design.md's Notes index that no comment
            defines, or that the file named in its row does not define.

Offences listed in the allow-list (tests/docs/reference_allowlist.txt, lines
`<kind> <file>:<what>`, no line numbers) are reported but do not fail; an
entry that matches no offence fails, so the list can only shrink. The files
of tests/docs/ (this checker and its list) are not scanned.

Usage: check_references.py [--root DIR] [--allowlist FILE] [--list-notes]
"""

import argparse
import bisect
import difflib
import os
import re
import sys

TOP_DIRS = ("include", "src", "kernels", "tests", "examples", "benchmarks", "tools", "docs", "cmake")
SCAN_DIRS = TOP_DIRS
SCAN_ROOT_FILES = ("README.md", "CMakeLists.txt")
C_EXT = (".h", ".hpp", ".hh", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".inc", ".ipp")
HASH_EXT = (".py", ".sh", ".cmake", ".txt", ".yml", ".yaml", ".toml", ".cfg")
MD_EXT = (".md",)
SELF_DIR = "tests/docs/"
SKIP_DIRS = {"build", ".git", "__pycache__", "third_party"}

# Titles that stand for any title where the docs describe the convention.
PLACEHOLDER_TITLES = {"Title", "X", "..."}
NOTE_RE = re.compile(r"Note\s+\[([^\]\[]+)\]")
# A path token: one of the top-level folders, then path characters.
PATH_RE = re.compile(
    r"(?<![\w./\-~$@])((?:%s)/[\w./{},*<>+\-]*)" % "|".join(TOP_DIRS))
# A bare file name of the kinds this repository holds (not a member access
# like `transformer.h.0`, not a suffix pattern like `_cuda.cpp`).
BARE_RE = re.compile(
    r"(?<![\w./\-~$@<*])([A-Za-z][\w\-]*\.(?:h|hpp|cpp|cc|cu|cuh|md|py|cmake|sh))(?![\w/]|\.\w)")
# Other projects' files that comments name on purpose, and files written at
# run time.
FOREIGN_FILES = {
    "nccl.h", "nvjpeg.h", "jpeglib.h", "cudnn_frontend.h", "dnnl-config.cmake",  # libraries
    "train_gpt2.cu",  # llm.c
    "PERFORMANCE.md",  # nccl-tests
    "report.md", "versions.md",  # written by tools/gpu_check.sh
}
INCLUDE_RE = re.compile(r"(?<![\w./\-~$@])(ddp/[\w./{},\-]*\.(?:h|cuh))\b")


class Line:
    """One line of comment (or doc) text: its file line and its text."""

    __slots__ = ("lineno", "text", "whole")

    def __init__(self, lineno, text, whole):
        self.lineno = lineno
        self.text = text
        self.whole = whole  # no code before the comment on its line


C_TOKEN_RE = re.compile(
    r"(?P<line>//[^\n]*)"
    r"|(?P<block>/\*.*?(?:\*/|\Z))"
    r"|(?P<raw>R\"(?P<delim>[^()\\ \n]{0,16})\(.*?\)(?P=delim)\")"
    r"|\"(?:\\.|[^\"\\\n])*\""
    r"|(?<![\w'])'(?:\\.|[^'\\\n])*'",  # not C++14 digit separators (1'000)
    re.S)


def c_comments(src):
    """(lineno, text, whole) for the comment part of each line of C/C++/CUDA;
    whole: no code before the comment on its line. String literals skipped."""
    out = []
    newlines = [i for i, c in enumerate(src) if c == "\n"]

    def lineno_at(off):
        return bisect.bisect_right(newlines, off - 1) + 1

    for m in C_TOKEN_RE.finditer(src):
        if m.group("line") is not None:
            kind = "line"
        elif m.group("block") is not None:
            kind = "block"
        else:
            continue
        line = lineno_at(m.start())
        line_start = src.rfind("\n", 0, m.start()) + 1
        whole = not src[line_start:m.start()].strip()
        body = m.group(0)[2:]
        if kind == "block" and body.endswith("*/"):
            body = body[:-2]
        for k, text in enumerate(body.split("\n")):
            out.append((line + k, text, whole or k > 0))
    return out


def hash_comments(src, docstrings=False):
    """(lineno, text, whole) for `#` comments; with docstrings, the lines of
    Python's triple-quoted strings too."""
    out = []
    delim = None  # inside a triple-quoted string
    for lineno, text in enumerate(src.split("\n"), 1):
        if docstrings:
            if delim:
                end = text.find(delim)
                out.append((lineno, text if end < 0 else text[:end], True))
                if end < 0:
                    continue
                delim, text = None, text[end + 3:]
            m = re.search(r'"""|\'\'\'', text)
            if m:
                rest = text[m.end():]
                end = rest.find(m.group(0))
                out.append((lineno, rest if end < 0 else rest[:end], not text[:m.start()].strip()))
                if end < 0:
                    delim = m.group(0)
                continue
        quote = None
        for j, c in enumerate(text):
            if quote:
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "#":
                out.append((lineno, text[j + 1:], not text[:j].strip()))
                break
    return out


def strip_marker(text):
    """Comment text without leading decoration (/, *, !, <, #, spaces)."""
    return re.sub(r"^[\s/*!<#]*", "", text).rstrip()


def blocks_of(lines):
    """Groups (lineno, text) into runs of consecutive lines."""
    block = []
    for lineno, text, whole in lines:
        if block and lineno != block[-1].lineno + 1:
            yield block
            block = []
        block.append(Line(lineno, text, whole))
    if block:
        yield block


def join_block(block):
    """One string for a block, and the (start, end, line) span of each line in it."""
    parts, spans = [], []
    pos = 0
    for ln in block:
        t = strip_marker(ln.text)
        spans.append((pos, pos + len(t), ln.lineno, ln.whole))
        parts.append(t)
        pos += len(t) + 1
    return " ".join(parts), spans


def span_at(spans, off):
    for span in spans:
        if span[0] <= off <= span[1]:
            return span
    return spans[-1]


def norm_title(t):
    return re.sub(r"\s+", " ", t).strip()


DECORATION = re.compile(r"[-=~ ]*")


def is_definition(joined, spans, m):
    """A definition: a comment line with no code before it holding only
    `Note [T]` (or `Note [T]:`), perhaps between banner dashes; a wrapped
    title may go on to the next line. Everything else refers to a Note."""
    first, last = span_at(spans, m.start()), span_at(spans, m.end() - 1)
    return bool(first[3] and DECORATION.fullmatch(joined[first[0]:m.start()]) and
                re.fullmatch(r"[-=~ ]*:?[-=~ ]*", joined[m.end():last[1]]))


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(s[:m.start()] + alt + s[m.end():]))
    return out


class Checker:
    def __init__(self, root):
        self.root = root
        self.files = []  # relative paths scanned
        self.all_files = set()  # relative paths of every file in the tree
        self.basenames = {}
        self.defs = {}  # title -> [(file, line)]
        self.refs = []  # (file, line, title, in_file or None)
        self.paths = []  # (file, line, token)
        self.bare = []  # (file, line, name)
        self.outside = []  # (file, line)
        self.offences = []  # (kind, file, line, what, message)

    def walk(self):
        for d in SCAN_DIRS:
            top = os.path.join(self.root, d)
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(x for x in dirnames if x not in SKIP_DIRS and not x.startswith("."))
                for f in sorted(filenames):
                    rel = os.path.relpath(os.path.join(dirpath, f), self.root)
                    self.all_files.add(rel)
                    self.basenames.setdefault(f, []).append(rel)
                    if not rel.startswith(SELF_DIR):  # this checker's own examples
                        self.files.append(rel)
        for f in SCAN_ROOT_FILES:
            if os.path.isfile(os.path.join(self.root, f)):
                self.files.append(f)
                self.all_files.add(f)
                self.basenames.setdefault(f, []).append(f)

    def comment_lines(self, rel):
        name = os.path.basename(rel)
        path = os.path.join(self.root, rel)
        if name.endswith(C_EXT):
            kind = "c"
        elif name.endswith(HASH_EXT) or name == "CMakeLists.txt" or name.startswith("Dockerfile"):
            kind = "hash"
        elif name.endswith(MD_EXT):
            kind = "md"
        else:
            return None, None
        if name.endswith(".txt") and name != "CMakeLists.txt":
            return None, None
        try:
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
        except (UnicodeDecodeError, OSError):
            return None, None
        if kind == "c":
            return kind, c_comments(src)
        if kind == "hash":
            return kind, hash_comments(src, docstrings=name.endswith(".py"))
        return kind, [(i, t, True) for i, t in enumerate(src.split("\n"), 1) if t.strip()]

    def scan(self):
        for rel in self.files:
            kind, lines = self.comment_lines(rel)
            if not lines:
                continue
            for block in blocks_of(lines):
                joined, spans = join_block(block)

                def line_at(off):
                    return span_at(spans, off)[2]

                for m in NOTE_RE.finditer(joined):
                    title = norm_title(m.group(1))
                    if title in PLACEHOLDER_TITLES:
                        continue
                    lineno = line_at(m.start())
                    if kind != "md" and is_definition(joined, spans, m):
                        self.defs.setdefault(title, []).append((rel, lineno))
                        continue
                    in_file = None
                    mi = re.match(r"\s*(?:\(|,)?\s*in\s+`?([\w./\-]+\.(?:h|cuh|cpp|cu|md|cmake|txt|py))`?",
                                  joined[m.end():]) or \
                        re.match(r"\s*\(`?([\w./\-]+\.(?:h|cuh|cpp|cu|cmake|txt|py))`?\)", joined[m.end():])
                    if mi:
                        in_file = mi.group(1)
                    self.refs.append((rel, lineno, title, in_file))
                for m in PATH_RE.finditer(joined):
                    self.paths.append((rel, line_at(m.start()), m.group(1)))
                for m in BARE_RE.finditer(joined):
                    self.bare.append((rel, line_at(m.start()), m.group(1)))
                for m in INCLUDE_RE.finditer(joined):
                    self.paths.append((rel, line_at(m.start()), "include/" + m.group(1)))
                for m in re.finditer(r"ARCHITECTURE\.md", joined):
                    self.outside.append((rel, line_at(m.start())))

    def offend(self, kind, rel, line, what, message):
        self.offences.append((kind, rel, line, what, message))

    def close_titles(self, title):
        return difflib.get_close_matches(title, list(self.defs), n=2, cutoff=0.6)

    def defines(self, rel, title):
        return any(f == rel for f, _ in self.defs.get(title, []))

    def check(self):
        for rel, line, title, in_file in self.refs:
            if title not in self.defs:
                close = self.close_titles(title)
                hint = ("did you mean %s?" % " or ".join("Note [%s]" % c for c in close)) if close else \
                    "define it (a comment line `// Note [%s]`) or fix the title" % title
                self.offend("note", rel, line, title, "Note [%s] is referenced but not defined; %s" % (title, hint))
                continue
            if in_file:
                where = ", ".join("%s:%d" % d for d in self.defs[title])
                cands = [in_file] if in_file in self.all_files else self.basenames.get(os.path.basename(in_file), [])
                if "/" in in_file and in_file not in self.all_files:
                    cands = [c for c in cands if c.endswith("/" + in_file)]
                if not cands:
                    self.offend("note-in", rel, line, "%s|%s" % (title, in_file),
                                "Note [%s] in %s: no such file; the Note is defined at %s" % (title, in_file, where))
                elif not any(self.defines(c, title) for c in cands):
                    self.offend("note-in", rel, line, "%s|%s" % (title, in_file),
                                "Note [%s] in %s: that file does not define it; it is defined at %s"
                                % (title, in_file, where))
        for rel, line, token in self.paths:
            self.check_path(rel, line, token)
        for rel, line, name in self.bare:
            if name not in self.basenames and name not in FOREIGN_FILES and name != "ARCHITECTURE.md":
                close = difflib.get_close_matches(name, list(self.basenames), n=2, cutoff=0.7)
                hint = ("did you mean %s?" % " or ".join(close)) if close else "fix or drop the name"
                self.offend("file", rel, line, name,
                            "names %s, but no file of that name is in the repository; %s" % (name, hint))
        for rel, line in self.outside:
            self.offend("outside", rel, line, "ARCHITECTURE.md",
                        "points to ARCHITECTURE.md, which is not in this repository; "
                        "name the Note or file in the repository that says it, or say it here")
        self.check_index()

    def check_path(self, rel, line, token):
        tok = token.rstrip(".,;:)'`\"")
        if "*" in tok or "<" in tok or ">" in tok or "..." in tok:
            return
        if tok.count("{") != tok.count("}"):
            return
        for cand in expand_braces(tok):
            cand_clean = cand.rstrip("/")
            if cand_clean in TOP_DIRS:
                continue
            # A header configure_file() writes from cmake/<name>.in is fine.
            generated = os.path.join(self.root, "cmake", os.path.basename(cand_clean) + ".in")
            # A program named after its source (benchmarks/scaling/scaling_main)
            # or a module named by its stem (examples/common/monitoring) too.
            folder, stem = os.path.split(os.path.join(self.root, cand_clean))
            stems = "." not in stem and os.path.isdir(folder) and \
                any(f.startswith(stem + ".") for f in os.listdir(folder))
            if not os.path.exists(os.path.join(self.root, cand_clean)) and not os.path.isfile(generated) \
                    and not stems:
                base = os.path.basename(cand_clean)
                moved = [p for p in self.basenames.get(base, []) if p != cand_clean]
                hint = ("now at %s?" % ", ".join(moved[:3])) if moved else "fix or drop the path"
                self.offend("path", rel, line, cand_clean, "names %s, which does not exist; %s" % (cand_clean, hint))

    def index_rows(self):
        """(line, title, file) for each row of docs/design.md's Notes index."""
        path = os.path.join(self.root, "docs", "design.md")
        if not os.path.isfile(path):
            return []
        rows, in_notes, in_table = [], False, False
        with open(path, encoding="utf-8") as fh:
            for lineno, text in enumerate(fh, 1):
                if text.startswith("## "):
                    in_notes = text.strip() == "## Design notes"
                    continue
                if not in_notes:
                    continue
                if text.startswith("| note |"):
                    in_table = True
                    continue
                if not text.startswith("|"):
                    in_table = False
                    continue
                if in_table and not text.startswith("|---"):
                    cells = [c.strip() for c in text.strip().strip("|").split("|")]
                    if len(cells) >= 2:
                        files = re.findall(r"`([^`]+)`", cells[1])
                        rows.append((lineno, norm_title(cells[0]), files))
        return rows

    def check_index(self):
        rows = self.index_rows()
        for lineno, title, files in rows:
            if title not in self.defs:
                close = self.close_titles(title)
                hint = ("did you mean %s?" % " or ".join("Note [%s]" % c for c in close)) if close else \
                    "drop the row or define the Note"
                self.offend("index", "docs/design.md", lineno, title,
                            "the Notes index lists Note [%s], which is not defined; %s" % (title, hint))
                continue
            if not files:
                continue
            cands = []
            for f in files:
                if f in self.all_files:
                    cands.append(f)
                else:
                    cands.extend(p for p in self.basenames.get(os.path.basename(f), []) if p.endswith("/" + f) or p == f)
            if not any(self.defines(c, title) for c in cands):
                where = ", ".join("%s:%d" % d for d in self.defs[title])
                self.offend("index", "docs/design.md", lineno, title,
                            "the Notes index puts Note [%s] in %s, but it is defined at %s"
                            % (title, ", ".join(files), where))


def load_allowlist(path):
    allowed = set()
    if not path or not os.path.isfile(path):
        return allowed
    with open(path, encoding="utf-8") as fh:
        for text in fh:
            text = text.split("#", 1)[0].strip()
            if text:
                allowed.add(text)
    return allowed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.normpath(os.path.join(here, "..", "..")))
    ap.add_argument("--allowlist", default=os.path.join(here, "reference_allowlist.txt"))
    ap.add_argument("--list-notes", action="store_true", help="print every definition and exit")
    args = ap.parse_args()

    ck = Checker(args.root)
    ck.walk()
    ck.scan()
    if args.list_notes:
        for title in sorted(ck.defs):
            print("%-50s %s" % (title, ", ".join("%s:%d" % d for d in ck.defs[title])))
        return 0
    ck.check()

    allowed = load_allowlist(args.allowlist)
    used = set()
    failing = 0
    for kind, rel, line, what, message in sorted(ck.offences, key=lambda o: (o[1], o[2], o[0])):
        key = "%s %s:%s" % (kind, rel, what)
        if key in allowed:
            used.add(key)
            print("%s:%d: allowed (%s): %s" % (rel, line, kind, message))
            continue
        failing += 1
        print("%s:%d: error (%s): %s" % (rel, line, kind, message))
        print("    allow-list key: %s" % key)
    for key in sorted(allowed - used):
        failing += 1
        print("%s: error (allow-list): this entry matches no offence any more; remove it"
              % os.path.relpath(args.allowlist, args.root) + "\n    " + key)
    print("checked %d files: %d Note definitions, %d Note references, %d paths; %d offences, %d failing"
          % (len(ck.files), sum(len(v) for v in ck.defs.values()), len(ck.refs), len(ck.paths),
             len(ck.offences), failing))
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
