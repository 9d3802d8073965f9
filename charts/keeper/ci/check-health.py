#!/usr/bin/env python3
"""Checks keeper's Argo CD health check (charts/keeper/health/).

  check-health.py                  run every check below; exit 1 on any failure
  check-health.py --write-snippet  rewrite health/argocd-cm.yaml from health/argocd-health.lua

1. health/argocd-cm.yaml is an argocd-cm ConfigMap whose data holds exactly one key
   `resource.customizations.health.<group>_<Kind>` per kind in crds/, each equal to
   health/argocd-health.lua (so the pasted snippet is the tested script).
2. The script, run as Argo CD runs it (Lua 5.1, as gopher-lua is; only the base, table and a
   reduced os library, so no string library and no methods on strings; a fresh state and a
   global `obj` per object), returns for every sample in ci/health-samples/<kind>.yaml a table
   whose `status` is the expected one and whose `message` contains the expected text. Each kind
   must have the samples named in REQUIRED.
3. Broken copies of the script (mutants: a wrong status, a skipped rule, a call Argo CD does not
   provide) each fail at least one sample, so the samples can catch a wrong script.

Lua comes from lupa's Lua 5.1 module (lupa.lua51; PyPI `lupa`, pinned in e2e/stack.sh and
installed by `make deps` into keeper's venv, with PyYAML).
"""
import pathlib
import sys

import yaml

try:
    from lupa import lua51
except ImportError as e:  # lupa missing, or built without its Lua 5.1 module
    sys.exit(f"check-health: lupa with Lua 5.1 (lupa.lua51) is required: {e} (run `make deps`)")

CHART = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = CHART / "health" / "argocd-health.lua"
SNIPPET = CHART / "health" / "argocd-cm.yaml"
SAMPLES = CHART / "ci" / "health-samples"
CRDS = CHART / "crds"

# What Argo CD accepts from a health script; anything else becomes Unknown.
VALID = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing"}
COMMON = {"ready", "no-status", "retrying", "stalled", "deletion-blocked", "generation-not-observed"}
REQUIRED = {"S3Tenant": COMMON, "S3Bucket": COMMON | {"draining"}, "CloudDatabase": COMMON}

# Argo CD (util/lua/lua.go) opens for argocd-cm scripts only package, base, table and its "safe"
# os (clock, date, difftime, time). Without gopher-lua's string library strings have no metatable.
SANDBOX = """
debug.setmetatable("", nil)
local safe_os = {clock = os.clock, date = os.date, difftime = os.difftime, time = os.time}
string, math, io, debug, coroutine = nil, nil, nil, nil, nil
os = safe_os
"""


# YAML timestamps stay strings, as they are in the JSON Argo CD reads.
class Loader(yaml.SafeLoader):
    pass


Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def kinds():
    """(group, kind) of every CRD the chart ships."""
    found = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=Loader)
        found.append((crd["spec"]["group"], crd["spec"]["names"]["kind"]))
    return found


def key(group, kind):
    return f"resource.customizations.health.{group}_{kind}"


def snippet_text(script):
    lines = [
        "# argocd-cm entries for keeper's health check, one per kind, each the whole of",
        "# charts/keeper/health/argocd-health.lua (generated: charts/keeper/ci/check-health.py",
        "# --write-snippet; `make chart` checks the copies are equal). Merge into Argo CD's argocd-cm:",
        "#   kubectl -n argocd patch configmap argocd-cm --type merge --patch-file charts/keeper/health/argocd-cm.yaml",
        "# or put the data entries in your own argocd-cm manifest (docs/gitops.md).",
        "apiVersion: v1",
        "kind: ConfigMap",
        "metadata:",
        "  name: argocd-cm",
        "  namespace: argocd",
        "  labels:",
        "    app.kubernetes.io/name: argocd-cm",
        "    app.kubernetes.io/part-of: argocd",
        "data:",
    ]
    for group, kind in kinds():
        lines.append(f"  {key(group, kind)}: |")
        lines.extend(f"    {line}" if line else "" for line in script.splitlines())
    return "\n".join(lines) + "\n"


def check_snippet(script):
    """Failures of check 1."""
    try:
        cm = yaml.load(SNIPPET.read_text(), Loader=Loader)
    except (OSError, yaml.YAMLError) as e:
        return [f"{SNIPPET.name}: cannot read: {e}"]
    failures = []
    if cm.get("kind") != "ConfigMap" or cm.get("metadata", {}).get("name") != "argocd-cm":
        failures.append(f"{SNIPPET.name}: not the ConfigMap argocd-cm")
    data = cm.get("data") or {}
    wanted = {key(group, kind) for group, kind in kinds()}
    for k in sorted(wanted - data.keys()):
        failures.append(f"{SNIPPET.name}: no entry {k}")
    for k in sorted(data.keys() - wanted):
        failures.append(f"{SNIPPET.name}: entry {k} names no kind in crds/")
    for k in sorted(wanted & data.keys()):
        if data[k] != script:
            failures.append(f"{SNIPPET.name}: {k} differs from {SCRIPT.name} (run check-health.py --write-snippet)")
    return failures


def health(script, obj):
    """Runs the script on obj as Argo CD does; returns (status, message) or raises."""
    lua = lua51.LuaRuntime(unpack_returned_tuples=True, register_eval=False, register_builtins=False)
    lua.execute(SANDBOX)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    hs = lua.execute(script)
    if lua_type(lua, hs) != "table":
        raise ValueError(f"the script returned {lua_type(lua, hs)}, not a table")
    status, message = hs["status"], hs["message"]
    if status not in VALID:
        raise ValueError(f"status {status!r} is not one Argo CD accepts (it would show Unknown)")
    if not isinstance(message, str):
        raise ValueError(f"message {message!r} is not a string")
    return status, message


def lua_type(lua, value):
    if value is None:
        return "nil"
    return lua.globals().type(value)


def load_samples():
    samples, failures = [], []
    files = {p.stem: p for p in SAMPLES.glob("*.yaml")}
    for group, kind in kinds():
        path = files.pop(kind.lower(), None)
        if path is None:
            failures.append(f"health-samples: no {kind.lower()}.yaml")
            continue
        cases = yaml.load(path.read_text(), Loader=Loader) or []
        names = [c.get("case") for c in cases]
        for name in sorted(REQUIRED[kind] - set(names)):
            failures.append(f"{path.name}: no sample named {name!r}")
        for name in sorted({n for n in names if names.count(n) > 1}):
            failures.append(f"{path.name}: two samples named {name!r}")
        for case in cases:
            obj, expect = case.get("object") or {}, case.get("expect") or {}
            label = f"{kind}/{case.get('case')}"
            if obj.get("kind") != kind or obj.get("apiVersion") != f"{group}/v1alpha1":
                failures.append(f"{label}: object is not a {group}/v1alpha1 {kind}")
            elif expect.get("status") not in VALID or not isinstance(expect.get("message"), str):
                failures.append(f"{label}: expect needs a status ({'|'.join(sorted(VALID))}) and a message")
            else:
                samples.append((label, obj, expect))
    for stem in sorted(files):
        failures.append(f"health-samples: {stem}.yaml names no kind in crds/")
    return samples, failures


def verdict(script, obj, expect):
    """None when the script answers as expected, else what went wrong."""
    try:
        status, message = health(script, obj)
    except Exception as e:  # a Lua error is a failure of this sample, not of the checker
        return f"error: {e}"
    if status != expect["status"] or expect["message"] not in message:
        return f"got {status}: {message!r}; want {expect['status']} with {expect['message']!r}"
    return None


# (what the mutant breaks, text replaced, replacement); each must change the script.
MUTANTS = [
    ("Ready=True reported Progressing", 'hs.status = "Healthy"', 'hs.status = "Progressing"'),
    ("failures reported Progressing", 'hs.status = "Degraded"', 'hs.status = "Progressing"'),
    ("a stale status trusted", "observed ~= generation", "false"),
    ("Synced=False ignored", "isFalse(synced) and", "false and"),
    ("a string method Argo CD lacks", 'hs.message = "waiting for keeper: no status yet"',
     'hs.message = ("waiting for keeper: %s"):format("no status yet")'),
]


def main():
    script = SCRIPT.read_text()
    if sys.argv[1:] == ["--write-snippet"]:
        SNIPPET.write_text(snippet_text(script))
        print(f"wrote {SNIPPET}")
        return 0
    if sys.argv[1:]:
        sys.exit(__doc__)

    version = lua51.LuaRuntime().execute("return _VERSION")
    print(f"check-health: {SCRIPT.relative_to(CHART)} on {version} (lupa.lua51), Argo CD's libraries only")
    failures = check_snippet(script)
    samples, sample_failures = load_samples()
    failures += sample_failures

    passed = 0
    for label, obj, expect in samples:
        wrong = verdict(script, obj, expect)
        if wrong:
            failures.append(f"{label}: {wrong}")
            print(f"  FAIL {label}: {wrong}")
        else:
            passed += 1
            print(f"  ok   {label}: {expect['status']}")

    for what, old, new in MUTANTS:
        if old not in script:
            failures.append(f"mutant {what!r}: {old!r} is no longer in the script; update MUTANTS")
            continue
        mutant = script.replace(old, new)
        caught = [label for label, obj, expect in samples if verdict(mutant, obj, expect)]
        if caught:
            print(f"  ok   mutant ({what}) fails {len(caught)} sample(s), e.g. {caught[0]}")
        else:
            failures.append(f"mutant {what!r}: no sample fails; the samples miss that mistake")

    for failure in failures:
        print(f"check-health: {failure}", file=sys.stderr)
    print(f"health: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
