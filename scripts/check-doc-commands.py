#!/usr/bin/env python3
"""Every `./scripts/...` and `cargo ...` command line the documentation shows still works as
written: the script exists, is executable and knows each `--flag` the line passes it; the
package, example, test target, binary and features a cargo line names exist. A renamed flag,
script or target then fails `scripts/lint.sh` instead of a reader who copies the line.

Read from README.md and docs/*.md: lines of fenced shell blocks, and inline code spans, that
start with one of those commands (`$ ` and `&&`-chained commands included). The `zklock`
command's own lines are checked by zklock-cli's test `doc_commands`.
"""

import re
import shlex
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def packages() -> dict[str, dict]:
    """Workspace packages by name: their directory and what targets and features they have."""
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    found = {}
    for member in ["."] + workspace["workspace"]["members"]:
        directory = ROOT / member
        manifest = tomllib.loads((directory / "Cargo.toml").read_text())
        name = manifest["package"]["name"]
        examples = {e["name"] for e in manifest.get("example", [])}
        examples |= {p.stem for p in (directory / "examples").glob("*.rs")} if manifest["package"].get("autoexamples", True) else set()
        # Cargo's own discovery: tests/NAME.rs and tests/NAME/main.rs.
        tests = (
            {t["name"] for t in manifest.get("test", [])}
            | {p.stem for p in (directory / "tests").glob("*.rs")}
            | {p.parent.name for p in (directory / "tests").glob("*/main.rs")}
        )
        bins = {b["name"] for b in manifest.get("bin", [])} | {p.stem for p in (directory / "src" / "bin").glob("*.rs")}
        if (directory / "src" / "main.rs").exists():
            bins.add(name)
        found[name] = {
            "dir": directory,
            "examples": examples,
            "tests": tests,
            "bins": bins,
            "features": set(manifest.get("features", {})),
        }
    return found


def commands(text: str):
    """(line number, command) for each command line of `text`."""
    fenced = shell = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            shell = fenced and line[3:].strip() in ("", "sh", "bash", "shell", "console", "text")
            continue
        candidates = []
        if fenced and shell:
            candidates.append(line.removeprefix("$ "))
        elif not fenced:
            candidates.extend(re.findall(r"`([^`]+)`", line))
        for candidate in candidates:
            candidate = candidate.split("  #")[0].split(" # ")[0].strip()
            for part in candidate.split("&&"):
                part = part.strip()
                if part.startswith("./scripts/") or part.startswith("cargo "):
                    yield number, part


def words(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


def check_script(argv: list[str]) -> list[str]:
    path = ROOT / argv[0]
    if not path.is_file():
        return [f"{argv[0]} does not exist"]
    problems = []
    if not path.stat().st_mode & 0o111:
        problems.append(f"{argv[0]} is not executable")
    source = path.read_text()
    forwards = '"$@"' in source
    for word in argv[1:]:
        if word.startswith("--"):
            flag = word.split("=")[0]
            if re.search(re.escape(flag) + r"(?![\w-])", source):
                continue
            # A script that hands its arguments on (to a Rust program's clap options): the
            # flag is that program's, a field named after it.
            if forwards and flag_in_rust(flag):
                continue
            problems.append(f"{argv[0]} does not take {flag}")
    return problems


def flag_in_rust(flag: str) -> bool:
    field = re.compile(r"\b" + re.escape(flag[2:].replace("-", "_")) + r"\s*:|" + re.escape(flag) + r"(?![\w-])")
    for source in ROOT.glob("*/src/**/*.rs"):
        if field.search(source.read_text()):
            return True
    return False


def check_cargo(argv: list[str], known: dict[str, dict]) -> list[str]:
    if "--" in argv:
        argv = argv[: argv.index("--")]
    package = None
    wanted = {"--example": "examples", "--test": "tests", "--bin": "bins"}
    asked: list[tuple[str, str]] = []
    features: list[str] = []
    i = 1
    while i < len(argv):
        word = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else ""
        if word in ("-p", "--package"):
            package = value
            i += 2
            continue
        if word in wanted:
            asked.append((wanted[word], value))
            i += 2
            continue
        if word in ("--features", "-F"):
            features.extend(f for f in re.split(r"[ ,]+", value) if f)
            i += 2
            continue
        i += 1
    if package is None:
        package = "zklock"  # the root package, as cargo picks it in the workspace's root
    if package not in known:
        return [f"no package {package} in the workspace"]
    problems = []
    for kind, name in asked:
        if not any(c in name for c in "*?{}<>") and name not in known[package][kind]:
            problems.append(f"package {package} has no {kind[:-1]} {name}")
    for feature in features:
        if "/" not in feature and feature not in known[package]["features"]:
            problems.append(f"package {package} has no feature {feature}")
    return problems


def main() -> int:
    known = packages()
    failures = []
    checked = 0
    for doc in DOCS:
        for number, command in commands(doc.read_text()):
            argv = words(command)
            if not argv:
                continue
            # Placeholders (`HOST:PORT`, `DIR`) stand for the reader's values; names are checked.
            problems = check_script(argv) if argv[0].startswith("./scripts/") else check_cargo(argv, known)
            checked += 1
            failures += [f"{doc.relative_to(ROOT)}:{number}: `{command}`: {p}" for p in problems]
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(f"check-doc-commands: {len(failures)} documented command(s) would not work as written", file=sys.stderr)
        return 1
    print(f"check-doc-commands: {checked} documented ./scripts and cargo command lines match the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
