#!/usr/bin/env python3
"""Proves keeper's RBAC minimal and sufficient from an e2e run (issue 13).

    e2e/rbac-usage.py RENDERED_RBAC_YAML AUDIT_LOG [ALLOWLIST]

RENDERED_RBAC_YAML is what e2e/stack.sh applied (`helm template` of charts/keeper: the
ServiceAccount, ClusterRole, Role and their bindings); AUDIT_LOG is kube-apiserver's
--audit-log-path (audit.k8s.io/v1 Events, one JSON object per line, level Metadata: verb, user,
impersonatedUser, objectRef with apiGroup, resource, subresource, namespace and name,
responseStatus.code, and the authorizer's decision in annotations). Every (verb, group,
resource[/subresource]) a rule grants keeper's ServiceAccount must have been used by a request of
that ServiceAccount (in the Role's namespace for a Role), unless ALLOWLIST (default
e2e/rbac-allowlist.txt) names it with the code path that needs it: a grant checked only at
admission, such as `update` on `*/finalizers` for OwnerReferencesPermissionEnforcement, never shows
as a request. No request of keeper's may have been denied by the authorizer (a 403 whose
`authorization.k8s.io/decision` annotation is `forbid`; other 403s, such as creating in a
terminating namespace or an admission plugin's refusal, are answers kube gives whatever the rules).
Prints both lists; exits 1 when a grant is unused and not allowlisted, or keeper was denied
anything. A log kube-apiserver rotated (a backup `audit-<time>.log` beside it) holds only the
requests since the rotation, and judging from it would call grants unused that were used: the
check refuses it (exit 1) instead.
"""
import glob
import json
import os
import sys

import yaml


def load_rbac(path):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    user = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    roles = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    grants = []  # (verb, group, resource, namespace or "" for cluster-wide, resourceNames)
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ns = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
        bound = any(s["kind"] == "ServiceAccount" and s["name"] == sa["metadata"]["name"]
                    and s.get("namespace", ns) == sa["metadata"]["namespace"]
                    for s in b.get("subjects", []))
        if not bound:
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], ns if ref["kind"] == "Role" else "", ref["name"]))
        if role is None:
            sys.exit(f"{b['kind']} {b['metadata']['name']} refers to {ref['kind']} {ref['name']}, "
                     "which the rendered chart does not contain")
        for rule in role.get("rules", []):
            for verb in rule["verbs"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        if "*" in (verb, group, resource):
                            sys.exit(f"{role['kind']} {role['metadata']['name']} grants a wildcard "
                                     f"({verb} {group} {resource}): keeper's RBAC names what it uses")
                        grants.append((verb, group, resource, ns, tuple(rule.get("resourceNames", []))))
    return user, grants


def label(verb, group, resource, ns):
    scope = f" in {ns}" if ns else ""
    return f"{verb} {group or 'core'} {resource}{scope}"


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    allowlist_path = sys.argv[3] if len(sys.argv) == 4 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "rbac-allowlist.txt")
    user, grants = load_rbac(sys.argv[1])
    allowed = {}
    for line in open(allowlist_path):
        entry, _, why = line.partition("#")
        if entry.strip():
            allowed[" ".join(entry.split())] = why.strip()
    stem, ext = os.path.splitext(sys.argv[2])
    rotated = sorted(glob.glob(f"{glob.escape(stem)}-*{ext}"))
    if rotated:
        sys.exit(f"{sys.argv[2]} was rotated ({', '.join(rotated)}): it does not hold every request "
                 "of the run, so which grants were used cannot be told from it")
    used = set()
    denied = {}
    with open(sys.argv[2]) as log:
        for line in log:
            event = json.loads(line)
            served_as = event.get("impersonatedUser") or event.get("user") or {}
            ref = event.get("objectRef")
            if served_as.get("username") != user or not ref:
                continue
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            key = (event["verb"], ref.get("apiGroup", ""), resource, ref.get("namespace", ""), ref.get("name", ""))
            decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
            if decision == "forbid":
                denied[label(*key[:4])] = denied.get(label(*key[:4]), 0) + 1
            elif decision == "allow":
                used.add(key)
    unused, excused = [], []
    for verb, group, resource, ns, names in grants:
        hit = any(u[0] == verb and u[1] == group and u[2] == resource
                  and (not ns or u[3] == ns) and (not names or u[4] in names) for u in used)
        if hit:
            continue
        name = label(verb, group, resource, ns)
        bare = label(verb, group, resource, "")
        if bare in allowed:
            excused.append(f"{name}  ({allowed[bare]})")
        else:
            unused.append(name)
    print(f"keeper's RBAC ({user}): {len(grants)} grants, {len(used)} distinct requests seen")
    for e in excused:
        print(f"  never used in e2e, allowlisted: {e}")
    for u in unused:
        print(f"  UNUSED grant (remove it from charts/keeper or allowlist it with its code path): {u}")
    for d, n in sorted(denied.items()):
        print(f"  DENIED to keeper ({n}x; the chart lacks it): {d}")
    if unused or denied:
        sys.exit(1)
    print("every granted verb was used and nothing keeper asked for was denied")


if __name__ == "__main__":
    main()
