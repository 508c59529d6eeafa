#!/usr/bin/env python3
"""Regenerates ../k8s-v1.36-field-order.json: for each struct definition
kube-sim serves, its JSON field names in the order Go's encoding/json writes
them (the Go struct's field order, an embedded `json:",inline"` struct's
fields in its place). The OpenAPI definitions list properties sorted, but the
apiserver's JSON encoding of a built-in object follows the struct, and
messages that quote that encoding (a patch that does not decode) show it.
Only definitions whose Go order is not the sorted order are written.

Source: the Go types of k8s.io/api v0.36.3 and k8s.io/apimachinery v0.36.3
(meta/v1) in the module cache; the definitions kept are those of the
vendored schema files next to this script.

Usage:
  python3 field_order.py /root/go/pkg/mod > ../k8s-v1.36-field-order.json
"""
import glob
import json
import os
import re
import sys

from pointer_fields import SCHEMAS, STRUCT, definitions, package_prefix, resolve

FIELD = re.compile(r'^\s+(\w+)\s+(\S+)\s+`json:"([^,"]*)')
INLINE = re.compile(r'^\s+(\*?[\w.]+)\s+`json:",inline"')
EMBEDDED = re.compile(r'^\s+\*?[\w.]+\s+`json:"([^,"]+)')
ALIAS = re.compile(r"^type (\w+) = (\w+)\.(\w+)$", re.M)
IMPORT = re.compile(r'^\s*(\w+)\s+"k8s.io/api/([\w/]+)"$', re.M)


def main():
    root = sys.argv[1]
    defs = definitions()
    files = [
        f
        for f in glob.glob(os.path.join(root, "k8s.io/api@v0.36.3/**/*.go"), recursive=True)
        if not re.search(r"(generated|_test)\.go$|zz_generated|/testdata/", f)
    ]
    files += [
        f
        for f in glob.glob(os.path.join(root, "k8s.io/apimachinery@v0.36.3/pkg/apis/meta/v1/*.go"))
        if not re.search(r"(generated|_test)\.go$|zz_generated", f)
    ]
    # Each struct's fields in order: a JSON name, or ("inline", target).
    structs = {}
    for path in sorted(files):
        prefix = package_prefix(path, os.path.join(root, "k8s.io"))
        text = open(path).read()
        for m in STRUCT.finditer(text):
            fields = []
            for line in m.group(2).splitlines():
                i = INLINE.match(line)
                if i:
                    target = resolve(prefix, i.group(1).lstrip("*"))
                    if target:
                        fields.append(("inline", target))
                    continue
                f = FIELD.match(line)
                e = EMBEDDED.match(line)
                if f and f.group(3) and f.group(3) != "-":
                    fields.append(f.group(3))
                elif e and e.group(1) != "-":
                    fields.append(e.group(1))
            structs[prefix + "." + m.group(1)] = fields
        # `type RuleWithOperations = v1.RuleWithOperations`: the fields of
        # the aliased struct of another k8s.io/api package.
        imports = {i.group(1): i.group(2) for i in IMPORT.finditer(text)}
        for a in ALIAS.finditer(text):
            if a.group(2) in imports:
                target = "io.k8s.api." + imports[a.group(2)].replace("/", ".") + "." + a.group(3)
                structs[prefix + "." + a.group(1)] = [("inline", target)]

    def order(name, seen=()):
        out = []
        for f in structs.get(name, []):
            if isinstance(f, tuple):
                if f[1] not in seen:
                    out += order(f[1], seen + (name,))
            else:
                out.append(f)
        return out

    out = {}
    missing = []
    for name, d in sorted(defs.items()):
        props = d.get("properties")
        if not props:
            continue
        if name not in structs:
            missing.append(name)
            continue
        fields = [f for f in order(name) if f in props]
        if set(fields) != set(props):
            missing.append(name)
        if fields != sorted(fields):
            out[name] = " ".join(fields)
    for name in missing:
        print("field_order.py: no Go order for all of " + name, file=sys.stderr)
    json.dump(
        {
            "source": "Go types of k8s.io/api v0.36.3 and k8s.io/apimachinery v0.36.3 meta/v1, by vendor/field_order.py",
            "fieldOrder": out,
        },
        sys.stdout,
        indent=0,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
