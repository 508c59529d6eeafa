#!/usr/bin/env python3
"""Regenerates ../k8s-v1.36-pointer-fields.json: for each struct definition
kube-sim serves, the fields whose Go type is a pointer to a struct
(`ParentRef *ParentReference`). OpenAPI does not say which struct fields are
pointers, but structured-merge-diff sees the difference: a pointer struct can
be absent from the typed object, so an update that sets it owns the struct
itself (a "." member in managedFields), while a value struct is always there.
Also, as "nullFields", the pointer, slice and map fields without omitempty:
runtime.DefaultUnstructuredConverter writes them as null when nil, so they
too are never absent from a typed object whose parent is there
(`PodSpec.containers`). And, as "omitemptyFields", the fields tagged
omitempty: encoding/json leaves out such a slice or map when it is empty, so
a built-in object never stores `[]` or `{}` there (`tolerations: []`).

Source: the Go types of k8s.io/api v0.36.3 and k8s.io/apimachinery v0.36.3
(meta/v1) in the module cache; the definitions kept are those of the
vendored schema files next to this script.

Usage:
  python3 pointer_fields.py /root/go/pkg/mod > ../k8s-v1.36-pointer-fields.json
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = [
    "k8s-v1.33-definitions.json",
    "k8s-v1.36-admissionregistration.json",
    "k8s-v1.34-storage-vac.json",
    "k8s-v1.36-networking.json",
]

STRUCT = re.compile(r"^type (\w+) struct \{\n(.*?)^\}", re.M | re.S)
FIELD = re.compile(r'^\s+(\w+)\s+(\*?)([\w.\[\]]+)\s+`json:"([^,"]*)([^"]*)"')


def definitions():
    defs = {}
    for f in SCHEMAS:
        defs.update(json.load(open(os.path.join(HERE, "..", f)))["definitions"])
    return defs


def package_prefix(path, mod):
    """io.k8s.api.<group>.<version> for a file of k8s.io/api."""
    rel = os.path.relpath(os.path.dirname(path), mod)
    parts = rel.split(os.sep)
    if parts[0].startswith("api@"):
        return "io.k8s.api." + ".".join(parts[1:])
    return "io.k8s.apimachinery.pkg.apis.meta.v1"


def resolve(prefix, ty):
    if "." in ty:
        pkg, name = ty.split(".", 1)
        if pkg == "metav1":
            return "io.k8s.apimachinery.pkg.apis.meta.v1." + name
        return None
    return prefix + "." + ty


INLINE = re.compile(r'^\s+([\w.]+)\s+`json:",inline"')


def main():
    root = sys.argv[1]
    defs = definitions()
    files = glob.glob(os.path.join(root, "k8s.io/api@v0.36.3/**/types.go"), recursive=True)
    files.append(os.path.join(root, "k8s.io/apimachinery@v0.36.3/pkg/apis/meta/v1/types.go"))
    # Every struct's own pointer fields and the structs it embeds inline
    # (`PersistentVolumeSource `json:",inline"``: their fields are the
    # embedding struct's in JSON, and in OpenAPI).
    structs = {}
    for path in sorted(files):
        prefix = package_prefix(path, os.path.join(root, "k8s.io"))
        text = open(path).read()
        for m in STRUCT.finditer(text):
            fields, inline, nulls, omitempty = [], [], [], []
            for line in m.group(2).splitlines():
                i = INLINE.match(line)
                if i:
                    target = resolve(prefix, i.group(1))
                    if target:
                        inline.append(target)
                    continue
                f = FIELD.match(line)
                if not f or not f.group(4) or f.group(4) == "-":
                    continue
                opts = f.group(5).split(",")
                nilable = f.group(2) or f.group(3).startswith(("[]", "map["))
                if nilable and "omitempty" not in opts and "omitzero" not in opts:
                    nulls.append(f.group(4))
                if "omitempty" in opts:
                    omitempty.append(f.group(4))
                if not f.group(2):
                    continue
                target = resolve(prefix, f.group(3))
                if target and "properties" in defs.get(target, {}):
                    fields.append(f.group(4))
            structs[prefix + "." + m.group(1)] = (fields, inline, nulls, omitempty)

    def collect(name, which, seen=()):
        entry = structs.get(name, ([], [], [], []))
        out = list(entry[which])
        for e in entry[1]:
            if e not in seen:
                out += collect(e, which, seen + (name,))
        return out

    out, null_out, omit_out = {}, {}, {}
    for name in structs:
        if name not in defs:
            continue
        fields = collect(name, 0)
        if fields:
            out[name] = sorted(set(fields))
        nulls = collect(name, 2)
        if nulls:
            null_out[name] = sorted(set(nulls))
        omitempty = collect(name, 3)
        if omitempty:
            omit_out[name] = sorted(set(omitempty))
    json.dump(
        {
            "source": "Go types of k8s.io/api v0.36.3 and k8s.io/apimachinery v0.36.3 meta/v1, by vendor/pointer_fields.py",
            "pointerFields": dict(sorted(out.items())),
            "nullFields": dict(sorted(null_out.items())),
            "omitemptyFields": dict(sorted(omit_out.items())),
        },
        sys.stdout,
        indent=1,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
