#!/usr/bin/env python3
"""Checks that the declared minimum supported Rust version (the workspace's `rust-version`) is
true of the locked dependency graph: every package a published crate needs to build on this
platform, with every feature on (normal and build dependencies, not dev-dependencies), declares
a `rust-version` no newer than ours. Prints the packages that need a newer one and fails, or
prints which package sets the floor.

Run by scripts/lint.sh; needs cargo and python3 only (reads `cargo metadata`)."""

import json
import subprocess
import sys


def version(text):
    parts = [int(p) for p in text.split(".")[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def host_triple():
    out = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    return next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("host: "))


def main():
    meta = json.loads(
        subprocess.run(
            [
                "cargo", "metadata", "--format-version", "1", "--locked", "--all-features",
                "--filter-platform", host_triple(),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    members = set(meta["workspace_members"])
    # `publish = false` shows as an empty list; absent (null) means publishable.
    published = [i for i in members if packages[i].get("publish") != []]
    declared = {packages[i].get("rust_version") for i in published}
    if len(declared) != 1 or None in declared:
        sys.exit(f"check-msrv: the published crates must share one rust-version, found {sorted(map(str, declared))}")
    msrv = declared.pop()

    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    needed, stack = set(), list(published)
    while stack:
        current = stack.pop()
        if current in needed:
            continue
        needed.add(current)
        for dep in nodes[current]["deps"]:
            kinds = {k["kind"] for k in dep["dep_kinds"]}
            if kinds & {None, "build"}:
                stack.append(dep["pkg"])

    floor, newer = None, []
    for pid in needed:
        p = packages[pid]
        wanted = p.get("rust_version")
        if not wanted or pid in members:
            continue
        if floor is None or version(wanted) > version(floor[0]):
            floor = (wanted, f"{p['name']} {p['version']}")
        if version(wanted) > version(msrv):
            newer.append(f"  {p['name']} {p['version']} needs Rust {wanted}")
    if newer:
        print(
            f"check-msrv: rust-version = \"{msrv}\" is not true of Cargo.lock; these need newer:\n"
            + "\n".join(sorted(newer))
            + "\nRaise rust-version (and README's statement of it), or pin older versions"
            " (`cargo update -p NAME --precise VERSION`).",
            file=sys.stderr,
        )
        sys.exit(1)
    print(
        f"check-msrv: rust-version {msrv} holds for the {len(needed) - len(published)} packages the published"
        f" crates build with; the newest floor among them is {floor[0]} ({floor[1]})"
    )


if __name__ == "__main__":
    main()
