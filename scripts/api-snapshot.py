#!/usr/bin/env python3
"""The public API of the published crates, one line per item, checked against api/<crate>.txt.

    scripts/api-snapshot.py            compare; fail with a diff when the API changed
    scripts/api-snapshot.py --update   write the snapshots anew (commit them with the change)

Every public item reachable from a crate's root is listed with its signature: modules, types
with their public fields and variants, functions and methods (async, generics, arguments,
result), trait items, constants, and the traits each type implements (auto traits included:
a type that stops being `Send` is a breaking change too). A change to the API then shows up in
review as a change to api/*.txt, so it is made on purpose, and the CHANGELOG can say what it
breaks.

The listing comes from rustdoc's JSON output, which stable rustdoc writes only with
RUSTC_BOOTSTRAP=1 (an unstable flag; given to rustdoc alone, see bootstrapped_rustdoc); its
format differs between Rust versions, so the snapshots are written by, and compared on, the
toolchain `scripts/lint.sh` runs with.
"""

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# crate name -> the features its API is documented with.
CRATES = {
    "zklock": ["scheduler", "metrics", "tls", "sasl", "testing"],
    "zklock-runtime": ["scheduler", "metrics", "tls", "sasl"],
    "zklock-testing": [],
}


def bootstrapped_rustdoc(target: Path) -> Path:
    """A rustdoc that runs with RUSTC_BOOTSTRAP=1, for cargo to use in rustdoc's place.

    Set for cargo as a whole, RUSTC_BOOTSTRAP would reach every rustc that checks a dependency
    and change its fingerprint: `cargo doc` and `cargo check` (lint.sh's other steps) would then
    check every dependency again after this script, and this script after them. Given to the one
    rustdoc that writes the JSON, it changes nothing else.
    """
    sysroot = subprocess.run(
        ["rustc", "--print", "sysroot"], check=True, capture_output=True, text=True
    ).stdout.strip()
    wrapper = target / "api-snapshot" / "rustdoc"
    text = f'#!/bin/sh\nRUSTC_BOOTSTRAP=1 exec "{sysroot}/bin/rustdoc" "$@"\n'
    if not wrapper.is_file() or wrapper.read_text() != text:
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        wrapper.write_text(text)
        wrapper.chmod(0o755)
    return wrapper


def rustdoc_json(crate: str, features: list[str]) -> dict:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    args = ["cargo", "rustdoc", "--quiet", "--locked", "-p", crate, "--lib"]
    if features:
        args += ["--features", ",".join(features)]
    args += ["--", "-Z", "unstable-options", "--output-format", "json"]
    env = dict(os.environ, RUSTDOC=str(bootstrapped_rustdoc(target)), RUSTDOCFLAGS="")
    env.pop("RUSTC_BOOTSTRAP", None)
    subprocess.run(args, cwd=ROOT, env=env, check=True)
    path = target / "doc" / (crate.replace("-", "_") + ".json")
    return json.loads(path.read_text())


class Lister:
    def __init__(self, doc: dict):
        self.doc = doc
        self.index = doc["index"]
        self.lines: set[str] = set()
        self.seen: set[str] = set()

    def item(self, id_) -> dict | None:
        return self.index.get(str(id_))

    # ---- types -------------------------------------------------------------------------
    def ty(self, t) -> str:
        if t is None:
            return "()"
        if not isinstance(t, dict):
            return str(t)
        (kind, v), = t.items()
        if kind == "resolved_path":
            # The name alone: how the source spells the path (`crate::client::LockClient`,
            # `super::x`) is not part of the API.
            name = (v.get("path") or v.get("name") or self.path_of(v.get("id")) or "?").split("::")[-1]
            return name + self.args(v.get("args"))
        if kind == "generic":
            return v
        if kind == "primitive":
            return v
        if kind == "borrowed_ref":
            life = (v.get("lifetime") or "") + " " if v.get("lifetime") else ""
            mutable = "mut " if v.get("is_mutable", v.get("mutable")) else ""
            return f"&{life}{mutable}{self.ty(v['type'])}"
        if kind == "raw_pointer":
            mutable = "mut" if v.get("is_mutable", v.get("mutable")) else "const"
            return f"*{mutable} {self.ty(v['type'])}"
        if kind == "tuple":
            return "(" + ", ".join(self.ty(x) for x in v) + ")"
        if kind == "slice":
            return f"[{self.ty(v)}]"
        if kind == "array":
            return f"[{self.ty(v['type'])}; {v['len']}]"
        if kind == "impl_trait":
            return "impl " + " + ".join(self.bound(b) for b in v)
        if kind == "dyn_trait":
            traits = [self.poly(p) for p in v.get("traits", [])]
            if v.get("lifetime"):
                traits.append(v["lifetime"])
            return "dyn " + " + ".join(traits)
        if kind == "qualified_path":
            if not v.get("trait"):
                return f"{self.ty(v['self_type'])}::{v['name']}"
            return f"<{self.ty(v['self_type'])} as {self.ty({'resolved_path': v['trait']})}>::{v['name']}"
        if kind == "function_pointer":
            sig = v.get("sig") or v.get("decl")
            return "fn(" + ", ".join(self.ty(a[1]) for a in sig["inputs"]) + ") -> " + self.ty(sig.get("output"))
        return json.dumps(t, sort_keys=True)

    def path_of(self, id_) -> str:
        summary = self.doc.get("paths", {}).get(str(id_))
        return "::".join(summary["path"]) if summary else ""

    def args(self, a) -> str:
        if not a:
            return ""
        if "angle_bracketed" in a:
            ab = a["angle_bracketed"]
            parts = []
            for arg in ab.get("args", []):
                (k, v), = arg.items() if isinstance(arg, dict) else (("x", arg),)
                if k == "type":
                    parts.append(self.ty(v))
                elif k == "lifetime":
                    parts.append(v)
                elif k == "const":
                    parts.append(str(v.get("expr", v)))
                else:
                    parts.append(json.dumps(arg, sort_keys=True))
            for c in ab.get("constraints", ab.get("bindings", [])):
                binding = c.get("binding", {})
                if "equality" in binding:
                    eq = binding["equality"]
                    value = self.ty(eq.get("type")) if isinstance(eq, dict) and "type" in eq else json.dumps(eq)
                    parts.append(f"{c['name']} = {value}")
                else:
                    parts.append(f"{c['name']}: " + " + ".join(self.bound(b) for b in binding.get("constraint", [])))
            return "<" + ", ".join(parts) + ">" if parts else ""
        if "parenthesized" in a:
            p = a["parenthesized"]
            return "(" + ", ".join(self.ty(x) for x in p["inputs"]) + ") -> " + self.ty(p.get("output"))
        return ""

    def poly(self, p) -> str:
        return self.ty({"resolved_path": p["trait"]})

    def bound(self, b) -> str:
        if "trait_bound" in b:
            tb = b["trait_bound"]
            modifier = "?" if tb.get("modifier") == "maybe" else ""
            return modifier + self.ty({"resolved_path": tb["trait"]})
        if "outlives" in b:
            return b["outlives"]
        if "use" in b:
            return "use<..>"
        return json.dumps(b, sort_keys=True)

    def generics(self, g) -> str:
        """`<params>` followed by ` where …`, for a type or trait."""
        params, wheres = self.generic_parts(g)
        return params + wheres

    def generic_parts(self, g) -> tuple[str, str]:
        if not g:
            return "", ""
        params = []
        for p in g.get("params", []):
            kind = p["kind"]
            if "lifetime" in kind:
                params.append(p["name"])
            elif "type" in kind:
                if kind["type"].get("is_synthetic", kind["type"].get("synthetic")):
                    continue  # an `impl Trait` argument, shown at the argument
                bounds = kind["type"].get("bounds", [])
                params.append(p["name"] + (": " + " + ".join(self.bound(b) for b in bounds) if bounds else ""))
            elif "const" in kind:
                params.append(f"const {p['name']}: {self.ty(kind['const']['type'])}")
        out = "<" + ", ".join(params) + ">" if params else ""
        wheres = []
        for w in g.get("where_predicates", []):
            if "bound_predicate" in w:
                bp = w["bound_predicate"]
                wheres.append(self.ty(bp["type"]) + ": " + " + ".join(self.bound(b) for b in bp["bounds"]))
        return out, (" where " + ", ".join(sorted(wheres)) if wheres else "")

    def fn(self, name: str, f: dict) -> str:
        sig = f.get("sig") or f.get("decl")
        header = f.get("header", {})
        prefix = ""
        if header.get("is_const", header.get("const")):
            prefix += "const "
        if header.get("is_async", header.get("async")):
            prefix += "async "
        if header.get("is_unsafe", header.get("unsafe")):
            prefix += "unsafe "
        inputs = ", ".join(f"{a[0]}: {self.ty(a[1])}" for a in sig["inputs"])
        output = sig.get("output")
        ret = f" -> {self.ty(output)}" if output is not None else ""
        params, wheres = self.generic_parts(f.get("generics"))
        return f"{prefix}fn {name}{params}({inputs}){ret}{wheres}"

    # ---- items -------------------------------------------------------------------------
    def public(self, item: dict) -> bool:
        return item.get("visibility") == "public"

    def walk(self, id_, path: str, via_use: bool = False):
        item = self.item(id_)
        if item is None:
            self.lines.add(f"extern {path}")
            return
        key = f"{id_}@{path}"
        if key in self.seen:
            return
        self.seen.add(key)
        (kind, inner), = item["inner"].items()
        if not via_use and not self.public(item) and kind != "module":
            return
        if kind == "module":
            self.lines.add(f"mod {path}")
            for child in inner["items"]:
                c = self.item(child)
                if c is None:
                    continue
                if not self.public(c) and "use" not in c["inner"]:
                    continue
                (ck, cv), = c["inner"].items()
                if ck == "use":
                    if not self.public(c):
                        continue
                    target = cv.get("id")
                    if cv.get("is_glob", cv.get("glob")):
                        t = self.item(target) if target is not None else None
                        if t is not None and "module" in t["inner"]:
                            for gchild in t["inner"]["module"]["items"]:
                                g = self.item(gchild)
                                if g is not None and self.public(g) and g.get("name"):
                                    self.walk(gchild, f"{path}::{g['name']}")
                        else:
                            self.lines.add(f"use {path}::{cv.get('source', cv.get('name'))}::*")
                        continue
                    if target is None:
                        self.lines.add(f"use {path}::{cv['name']} = {cv.get('source')}")
                        continue
                    if self.item(target) is None:
                        self.lines.add(f"use {path}::{cv['name']} = {cv.get('source')}")
                        continue
                    self.walk(target, f"{path}::{cv['name']}", via_use=True)
                else:
                    self.walk(child, f"{path}::{c['name']}")
            return
        if kind == "struct":
            self.lines.add(f"struct {path}{self.generics(inner.get('generics'))}")
            skind = inner.get("kind", {})
            if isinstance(skind, dict):
                if "plain" in skind:
                    for fid in skind["plain"].get("fields", []):
                        self.field(fid, path)
                    if skind["plain"].get("has_stripped_fields", skind["plain"].get("fields_stripped")):
                        self.lines.add(f"struct {path} has private fields")
                elif "tuple" in skind:
                    for i, fid in enumerate(skind["tuple"]):
                        if fid is not None:
                            self.field(fid, path, str(i))
            self.impls(inner.get("impls", []), path)
        elif kind == "enum":
            attrs = " ".join(a for a in map(str, item.get("attrs", [])) if "non_exhaustive" in a)
            self.lines.add(f"enum {path}{self.generics(inner.get('generics'))}" + (" #[non_exhaustive]" if attrs else ""))
            for vid in inner.get("variants", []):
                v = self.item(vid)
                if v is None:
                    continue
                vk = v["inner"]["variant"]["kind"]
                if vk == "plain" or (isinstance(vk, dict) and "plain" in vk and vk["plain"] is None):
                    self.lines.add(f"variant {path}::{v['name']}")
                elif isinstance(vk, dict) and "tuple" in vk:
                    types = [self.ty(self.item(f)["inner"]["struct_field"]) if f is not None else "_" for f in vk["tuple"]]
                    self.lines.add(f"variant {path}::{v['name']}({', '.join(types)})")
                elif isinstance(vk, dict) and "struct" in vk:
                    fields = [
                        f"{self.item(f)['name']}: {self.ty(self.item(f)['inner']['struct_field'])}" for f in vk["struct"]["fields"]
                    ]
                    self.lines.add(f"variant {path}::{v['name']} {{ {', '.join(fields)} }}")
            self.impls(inner.get("impls", []), path)
        elif kind == "function":
            self.lines.add(f"{self.fn(path, inner)}")
        elif kind == "trait":
            self.lines.add(f"trait {path}{self.generics(inner.get('generics'))}")
            for tid in inner.get("items", []):
                t = self.item(tid)
                if t is None:
                    continue
                (tk, tv), = t["inner"].items()
                if tk == "function":
                    self.lines.add(f"trait-item {path}::{self.fn(t['name'], tv)}")
                else:
                    self.lines.add(f"trait-item {path}::{tk} {t['name']}")
        elif kind in ("constant", "static"):
            ty = inner.get("type") if kind == "constant" else inner.get("type")
            self.lines.add(f"{kind} {path}: {self.ty(ty)}")
        elif kind == "type_alias":
            self.lines.add(f"type {path}{self.generics(inner.get('generics'))} = {self.ty(inner.get('type'))}")
        elif kind in ("macro", "proc_macro"):
            self.lines.add(f"macro {path}")
        else:
            self.lines.add(f"{kind} {path}")

    def field(self, fid, owner: str, name: str | None = None):
        f = self.item(fid)
        if f is None or not self.public(f):
            return
        self.lines.add(f"field {owner}.{name or f['name']}: {self.ty(f['inner']['struct_field'])}")

    def impls(self, impl_ids, path: str):
        for iid in impl_ids:
            imp = self.item(iid)
            if imp is None:
                continue
            i = imp["inner"]["impl"]
            if i.get("blanket_impl") is not None:
                continue
            trait = i.get("trait")
            negative = "!" if i.get("is_negative", i.get("negative")) else ""
            if trait is not None:
                self.lines.add(f"impl {negative}{self.ty({'resolved_path': trait})} for {path}")
                continue
            for mid in i.get("items", []):
                m = self.item(mid)
                if m is None or not self.public(m):
                    continue
                (mk, mv), = m["inner"].items()
                if mk == "function":
                    self.lines.add(f"method {path}::{self.fn(m['name'], mv)}")
                elif mk in ("assoc_const", "constant"):
                    self.lines.add(f"assoc-const {path}::{m['name']}")


HEADER = "# rustdoc JSON format "


def listing(crate: str, features: list[str]) -> str:
    doc = rustdoc_json(crate, features)
    lister = Lister(doc)
    lister.walk(doc["root"], crate.replace("-", "_"))
    # The format the listing was read from: another Rust release may spell the same API
    # another way, and is then told apart from a change of the API.
    header = f"{HEADER}{doc.get('format_version')}\n"
    return header + "".join(line + "\n" for line in sorted(lister.lines))


def format_of(text: str) -> str:
    first = text.split("\n", 1)[0]
    return first[len(HEADER):] if first.startswith(HEADER) else "?"


def main() -> int:
    update = "--update" in sys.argv[1:]
    out_dir = ROOT / "api"
    failed = False
    skipped = []
    for crate, features in CRATES.items():
        now = listing(crate, features)
        snapshot = out_dir / f"{crate}.txt"
        if update:
            out_dir.mkdir(exist_ok=True)
            snapshot.write_text(now)
            print(f"api-snapshot: wrote {snapshot.relative_to(ROOT)} ({now.count(chr(10))} items)")
            continue
        before = snapshot.read_text() if snapshot.exists() else ""
        if before and format_of(before) != format_of(now):
            # Read by another Rust release than the one that wrote it: the spelling may differ
            # where the API does not. Say so instead of failing on a false difference.
            print(
                f"api-snapshot: api/{crate}.txt was written from rustdoc JSON format {format_of(before)}, "
                f"this toolchain writes {format_of(now)}: not compared; run scripts/api-snapshot.py --update "
                "with the toolchain CI uses",
                file=sys.stderr,
            )
            skipped.append(crate)
            continue
        if before != now:
            failed = True
            diff = difflib.unified_diff(
                before.splitlines(keepends=True), now.splitlines(keepends=True), f"api/{crate}.txt", f"{crate} now"
            )
            sys.stderr.write("".join(diff))
    if failed:
        sys.stderr.write(
            "api-snapshot: the public API differs from api/*.txt (above). If the change is meant,\n"
            "run scripts/api-snapshot.py --update, commit the snapshots, and say in CHANGELOG.md what changed.\n"
        )
        return 1
    if not update:
        compared = [c for c in CRATES if c not in skipped]
        print(f"api-snapshot: the public API of {', '.join(compared) or 'no crate'} matches api/*.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
