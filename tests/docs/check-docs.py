#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Check the documentation: README.md stays a front page (under 15 KiB), every
relative link and #anchor in the project's Markdown resolves as GitHub resolves
it, every built man page renders with NAME and SYNOPSIS sections, and every
command that 'nbrun --help' lists has its page.

    check-docs.py SRCDIR [--nbrun BIN] [--man PAGE.1 ...]

Prints one line per problem and exits 1 when there is any, else 0."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import unicodedata

README_MAX = 15 * 1024

# The Markdown files whose links are checked, relative to the source tree.
MD_ROOTS = ["README.md", "CODING_STYLE.md", "docs", "bench/README.md", "fuzz/README.md",
            "environments"]

problems = []


def problem(msg):
    problems.append(msg)
    print("check-docs: " + msg)


def md_files(src):
    for root in MD_ROOTS:
        path = os.path.join(src, root)
        if os.path.isfile(path):
            yield path
        elif os.path.isdir(path):
            for d, dirs, files in os.walk(path):
                dirs[:] = sorted(x for x in dirs if x != "node_modules" and not x.startswith("."))
                for f in sorted(files):
                    if f.endswith(".md"):
                        yield os.path.join(d, f)


def strip_code(text, inline=True):
    """The text without fenced code blocks and (inline) code spans, whose
    brackets are not links; line count kept for messages."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line) if inline else line)
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation
    but '-' and '_' removed, each space a '-'."""
    h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    h = re.sub(r"<[^>]+>", "", h)                             # inline HTML
    h = h.replace("`", "").strip().lower()
    keep = []
    for ch in h:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN" or cat == "Mn":
            keep.append(ch)
    return "".join(keep).replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        found, seen = set(), {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line in strip_code(text, inline=False).split("\n"):
            m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
        for m in re.finditer(r"""<a\s+(?:name|id)=["']([^"']+)["']""", text):
            found.add(m.group(1))
        _anchors[path] = found
    return _anchors[path]


def check_links(src):
    count = 0
    for path in md_files(src):
        rel = os.path.relpath(path, src)
        with open(path, encoding="utf-8") as f:
            text = strip_code(f.read())
        for lineno, line in enumerate(text.split("\n"), 1):
            targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line)
            targets += re.findall(r"^\s*\[[^\]]+\]:\s*(\S+)", line)
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                    continue                          # http:, https:, mailto: ...
                count += 1
                where = "%s:%d: link '%s'" % (rel, lineno, target)
                file_part, _, anchor = target.partition("#")
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not os.path.realpath(dest).startswith(os.path.realpath(src) + os.sep):
                    problem(where + " leaves the source tree")
                    continue
                if not os.path.exists(dest):
                    problem(where + ": no such file")
                    continue
                if anchor:
                    if not dest.endswith(".md") or os.path.isdir(dest):
                        problem(where + ": an anchor into something that is not Markdown")
                    elif anchor not in anchors(dest):
                        problem(where + ": no heading with anchor #%s in %s"
                                % (anchor, os.path.relpath(dest, src)))
    return count


def check_readme(src):
    size = os.path.getsize(os.path.join(src, "README.md"))
    if size >= README_MAX:
        problem("README.md is %d bytes, not under %d: move the detail to docs/" % (size, README_MAX))


def render(page, width=80):
    """The page as man shows it (or groff when man is missing), and what it
    printed on stderr."""
    env = dict(os.environ, MANWIDTH=str(width), MAN_KEEP_FORMATTING="", LC_ALL="C.UTF-8")
    if shutil.which("man"):
        cmd = ["man", "-P", "cat", "-l", page]
    else:
        cmd = ["groff", "-man", "-Tutf8", "-rLL=%dn" % width, page]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    out = re.sub(r".\x08", "", p.stdout)              # overstrikes, if any
    return p.returncode, out, p.stderr


def check_man(pages, nbrun, src):
    built = {}
    for page in pages:
        name = os.path.basename(page)
        if not os.path.isfile(page):
            problem("man page %s was not built" % page)
            continue
        built[name] = page
        rc, out, err = render(page)
        if rc != 0:
            problem("%s: rendering exited %d: %s" % (name, rc, err.strip()[:300]))
            continue
        if err.strip():
            problem("%s: the formatter warned: %s" % (name, err.strip()[:300]))
        if shutil.which("groff"):                     # man-db hides troff's warnings
            p = subprocess.run(["groff", "-man", "-Tutf8", "-z", "-ww", "-rLL=80n", page],
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 0 or p.stderr.strip():
                problem("%s: groff -ww warned: %s" % (name, p.stderr.strip()[:300]))
        for section in ("NAME", "SYNOPSIS"):
            if not re.search(r"^%s\s*$" % section, out, re.M):
                problem("%s: no %s section in what man shows" % (name, section))
        title = name.rsplit(".", 1)[0]
        if not re.search(r"^\s+%s\s+-\s+\S" % re.escape(title), out, re.M):
            problem("%s: NAME does not read '%s - ...'" % (name, title))
    if not nbrun:
        return
    p = subprocess.run([nbrun, "--help"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        problem("'%s --help' exited %d" % (nbrun, p.returncode))
        return
    m = re.search(r"^Commands:\n((?:  \S.*\n)+)", p.stdout, re.M)
    if not m:
        problem("'nbrun --help' lists no commands under 'Commands:'")
        return
    commands = [line.split()[0] for line in m.group(1).splitlines()]
    # The exit codes: what --help lists is the table docs/cli.md and nbrun(1) keep.
    e = re.search(r"^Exit codes:\n((?: *\d+ +\S.*\n)+)", p.stdout, re.M)
    codes = [line.split()[0] for line in e.group(1).splitlines()] if e else []
    if not codes:
        problem("'nbrun --help' lists no exit codes")
    cli_md = open(os.path.join(src, "docs", "cli.md"), encoding="utf-8").read()
    table = set(re.findall(r"^\| `(\d+)` \|", cli_md, re.M))
    if codes and set(codes) != table:
        problem("exit codes of 'nbrun --help' (%s) and docs/cli.md's table (%s) differ"
                % (" ".join(codes), " ".join(sorted(table, key=int))))
    for want in ["nbrun.1"] + ["nbrun-%s.1" % c for c in commands]:
        if want not in built:
            problem("no man page %s (docs/man/%s.scd) for a command of 'nbrun --help'"
                    % (want, want))
    if "nbrun.1" in built:
        _, out, _ = render(built["nbrun.1"], width=1000)   # no line broken at a hyphen
        for c in commands:
            if not re.search(r"\bnbrun-%s\(1\)" % re.escape(c), out):
                problem("nbrun.1 does not name nbrun-%s(1)" % c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("--nbrun")
    ap.add_argument("--man", nargs="*", default=[])
    args = ap.parse_args()
    src = os.path.realpath(args.src)
    check_readme(src)
    links = check_links(src)
    check_man(args.man, args.nbrun, src)
    if problems:
        print("check-docs: %d problem(s)" % len(problems))
        return 1
    print("check-docs: README under %d bytes, %d relative links resolve, %d man pages render"
          % (README_MAX, links, len(args.man)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
