#!/usr/bin/env python3
"""Regenerates ../k8s-v1.36-networking.json: ServiceCIDR and IPAddress of
networking.k8s.io/v1 (GA in Kubernetes 1.33, MultiCIDRServiceAllocator), and
the review kinds of authentication.k8s.io/v1 and authorization.k8s.io/v1
(TokenReview, SelfSubjectReview, SubjectAccessReview,
LocalSubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview;
the answers of the first, third, fourth and fifth carry managedFields), which the trimmed v1.33 schema of
../k8s-v1.33-definitions.json does not have.

Source: upstream's own OpenAPI v2 document of Kubernetes v1.36.3
(api/openapi-spec/swagger.json of the k8s.io/kubernetes module, already in
upstream's swagger form). Only the definitions of those groups reachable
from the roots are kept; the meta types they reference (ObjectMeta, ListMeta,
Condition) come from the v1.33 file.

Usage:
  python3 trim_networking_definitions.py \
      /root/go/pkg/mod/k8s.io/kubernetes@v1.36.3/api/openapi-spec/swagger.json \
      > ../k8s-v1.36-networking.json
"""
import json
import sys

from trim_definitions import refs

ROOTS = [
    f"io.k8s.api.networking.v1.{k}"
    for k in ("ServiceCIDR", "ServiceCIDRList", "IPAddress", "IPAddressList")
] + [
    "io.k8s.api.authentication.v1.TokenReview",
    "io.k8s.api.authentication.v1.SelfSubjectReview",
    "io.k8s.api.authorization.v1.SubjectAccessReview",
    "io.k8s.api.authorization.v1.LocalSubjectAccessReview",
    "io.k8s.api.authorization.v1.SelfSubjectAccessReview",
    "io.k8s.api.authorization.v1.SelfSubjectRulesReview",
]
PREFIXES = (
    "io.k8s.api.networking.v1.",
    "io.k8s.api.authentication.v1.",
    "io.k8s.api.authorization.v1.",
)


def main():
    src = json.load(open(sys.argv[1]))["definitions"]
    keep, todo = set(), list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep or not name.startswith(PREFIXES):
            continue
        keep.add(name)
        acc = set()
        refs(src[name], acc)
        todo.extend(acc - keep)
    json.dump(
        {
            "source": "k8s.io/kubernetes v1.36.3 api/openapi-spec/swagger.json (upstream's OpenAPI v2 document), networking.k8s.io/v1 ServiceCIDR and IPAddress and the authentication/authorization v1 review types only, trimmed by vendor/trim_networking_definitions.py",
            "kubernetesVersion": "v1.36.3",
            "definitions": {name: src[name] for name in sorted(keep)},
        },
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
