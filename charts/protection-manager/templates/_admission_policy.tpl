{{/*
Whether the cluster serves ValidatingAdmissionPolicy at
admissionregistration.k8s.io/v1 (GA in Kubernetes 1.30; detected as the
create-time MutatingAdmissionPolicy is, from .Capabilities). Prints true or
false. helm template and install --dry-run=client see the API versions helm
knows, and those given with --api-versions.
*/}}
{{- define "protection-manager.vapServed" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" }}true{{ else }}false{{ end }}
{{- end }}

{{/*
Whether the lien policy is rendered: liens.enabled true (the install fails
where the API is missing), or auto and the API is served; and at least one
kind in liens.resources. Prints true or false.
*/}}
{{- define "protection-manager.liensOn" -}}
{{- $mode := toString .Values.liens.enabled }}
{{- $served := eq (include "protection-manager.vapServed" .) "true" }}
{{- if and (eq $mode "true") (not $served) }}
{{- fail "liens.enabled=true: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30+); set liens.enabled=auto (off where the API is missing) or false" }}
{{- end }}
{{- if and (ne $mode "false") $served .Values.liens.resources }}true{{ else }}false{{ end }}
{{- end }}

{{/*
Whether the Deny-mode policy is rendered: the rules controller runs with
its gate (InUseProtectionRules) on, and
rules.deny.enabled is true (the install fails where the API is missing) or
auto and the API is served. Prints true or false.
*/}}
{{- define "protection-manager.denyOn" -}}
{{- $mode := toString .Values.rules.deny.enabled }}
{{- $served := eq (include "protection-manager.vapServed" .) "true" }}
{{- $active := include "protection-manager.activeControllers" . | fromJsonArray }}
{{- if and (eq $mode "true") (not $served) }}
{{- fail "rules.deny.enabled=true: this cluster does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30+); set rules.deny.enabled=auto (Deny-mode rules then hold with their finalizer only) or false" }}
{{- end }}
{{- $gate := eq (include "protection-manager.gateEnabled" (dict "root" . "gate" "InUseProtectionRules")) "true" }}
{{- if and (ne $mode "false") $served (has "rules" $active) $gate }}true{{ else }}false{{ end }}
{{- end }}
