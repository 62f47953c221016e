#!/usr/bin/env python3
"""Keeps the code readable in one sitting (docs/design.md, "Layout"): in every folder with C++ (ROOTS), every source
file opens with a comment saying what it is for, no source file is longer than 500 lines (tests and benchmarks
aside: *_test files and everything under tests/ and bench/), and no function, tests' included, is longer than 80
lines. Prints each offence with its place; exits 1 if there is any.

Functions are found by a brace-matching scan (comments, string literals and preprocessor lines removed first): a `{`
that opens at namespace or class level after a parenthesised signature starts a function, and its matching `}` ends
it. It is a heuristic, good enough for this code base's style (clang-format'd, no macros that open braces).

    scripts/check-code-shape.py            # from the repository root; ctest runs it as code_shape
"""
import pathlib
import re
import sys

ROOTS = ["base", "dataset", "wire", "auth", "storage", "datagen", "tools", "coordinator", "worker", "client", "tests",
         "bench"]
LONG_FILES_ALLOWED = ["tests", "bench"]  # folders whose files may pass MAX_FILE_LINES (tests, benchmarks)
SUFFIXES = {".cc", ".h", ".cu"}
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80
CONTROL = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch)\b")


def strip(text):
    """Removes comments, preprocessor lines and the contents of string and character literals, keeping line
    breaks."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "#" and text[text.rfind("\n", 0, i) + 1:i].strip() == "":
            j = i  # a directive runs to the end of its line, and on past escaped line breaks
            while True:
                j = text.find("\n", j)
                if j < 0 or text[j - 1] != "\\":
                    break
                j += 1
            j = n if j < 0 else j
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def is_function(signature):
    s = " ".join(signature.split())
    if "(" not in s or CONTROL.match(s) or re.search(r"\b(namespace|class|struct|union|enum)\b", s.split("(")[0]):
        return False
    if re.search(r"\boperator\b", s):
        return True
    return "=" not in s.split("(")[0]  # `auto x = [] {` and `= {` initialisers are not functions


def long_functions(path):
    text = strip(path.read_text())
    stack = []  # per open brace: (kind, line it opened on, signature)
    signature, line = "", 1
    found = []
    for c in text:
        if c == "\n":
            line += 1
            signature += " "
        elif c == "{":
            inside_function = any(kind == "function" for kind, _, _ in stack)
            if inside_function:
                kind = "block"
            elif is_function(signature):
                kind = "function"
            else:
                kind = "scope"
            stack.append((kind, line, signature.strip()))
            signature = ""
        elif c == "}":
            if stack:
                kind, start, sig = stack.pop()
                if kind == "function" and line - start + 1 > MAX_FUNCTION_LINES:
                    name = re.sub(r"\s+", " ", sig.split("(")[0]).split(" ")[-1]
                    found.append((start, line - start + 1, name))
            signature = ""
        elif c == ";":
            signature = ""
        else:
            signature += c
    return found


def main():
    top = pathlib.Path(__file__).resolve().parent.parent
    problems = []
    for root in ROOTS:
        for path in sorted((top / root).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(top)
            lines = path.read_text().splitlines()
            if not lines or not (lines[0].startswith("//") or lines[0].startswith("/*")):
                problems.append(f"{rel}:1: does not open with a comment saying what it is for")
            long_allowed = (path.stem.endswith("_test") or path.name == "test_kernels.cu" or
                            rel.parts[0] in LONG_FILES_ALLOWED)
            if len(lines) > MAX_FILE_LINES and not long_allowed:
                problems.append(f"{rel}: {len(lines)} lines (at most {MAX_FILE_LINES})")
            for start, length, name in long_functions(path):
                problems.append(f"{rel}:{start}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})")
    print("\n".join(problems + [f"code shape: {len(problems)} problem(s) in {', '.join(ROOTS)}"]))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
