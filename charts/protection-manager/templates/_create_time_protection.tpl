{{/*
Whether a feature gate is on at the emulated release, as the manager decides
it (protection_core::release): an explicit featureGates value wins unless the
gate is locked; otherwise AllAlpha / AllBeta for a gate at that stage (alpha:
off by default, beta: on by default and not locked); otherwise the default.
PreAlpha (before the gate's first spec): off. Call with
(dict "root" $ "gate" "StorageObjectInUseProtection"); prints true or false.
*/}}
{{- define "protection-manager.gateEnabled" -}}
{{- $root := .root }}
{{- $emulated := include "protection-manager.effectiveVersion" $root }}
{{- $table := include "protection-manager.gateTable" $root | fromYaml }}
{{- $spec := dict }}
{{- range (get $table .gate) }}
{{- if semverCompare (printf ">=%s" .since) $emulated }}
{{- $spec = . }}
{{- end }}
{{- end }}
{{- $on := false }}
{{- if $spec }}
{{- $on = $spec.default }}
{{- $gates := $root.Values.featureGates }}
{{- if not $spec.locked }}
{{- if hasKey $gates .gate }}
{{- $on = get $gates .gate }}
{{- else if and (not $spec.default) (hasKey $gates "AllAlpha") }}
{{- $on = get $gates "AllAlpha" }}
{{- else if and $spec.default (hasKey $gates "AllBeta") }}
{{- $on = get $gates "AllBeta" }}
{{- end }}
{{- end }}
{{- end }}
{{- if $on }}true{{ else }}false{{ end }}
{{- end }}

{{/*
The apiVersion of MutatingAdmissionPolicy the cluster serves
(admissionregistration.k8s.io/v1 from Kubernetes 1.36, v1beta1 on 1.34-1.35
with the API turned on), or "" when it serves neither. helm template and
install --dry-run=client see the versions given with --api-versions.
*/}}
{{- define "protection-manager.mapApiVersion" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}
{{- "admissionregistration.k8s.io/v1" }}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" }}
{{- "admissionregistration.k8s.io/v1beta1" }}
{{- end }}
{{- end }}

{{/*
The create-time policies to render, as a JSON list of
{controller, resource, finalizer}: one per storage controller that acts and
whose add gate (StorageObjectInUseProtection) is on at the emulated release,
in the project finalizer profile only, when createTimeProtection.enabled is
true, or auto and the cluster serves the API. Fails for enabled=true on a
cluster without the API, and for enabled=true with the upstream profile.
*/}}
{{- define "protection-manager.createTimePolicies" -}}
{{- $mode := .Values.createTimeProtection.enabled }}
{{- $api := include "protection-manager.mapApiVersion" . }}
{{- $out := list }}
{{- if eq (toString $mode) "true" }}
{{- if ne .Values.finalizerProfile "project" }}
{{- fail (printf "createTimeProtection.enabled=true needs finalizerProfile=project: with finalizerProfile=%s kube-apiserver's StorageObjectInUseProtection admission plugin already adds the finalizers on create; set createTimeProtection.enabled=auto or false" .Values.finalizerProfile) }}
{{- end }}
{{- if not $api }}
{{- fail "createTimeProtection.enabled=true: this cluster serves neither admissionregistration.k8s.io/v1 (Kubernetes 1.36+) nor v1beta1 (1.34-1.35 with the MutatingAdmissionPolicy feature gate and --runtime-config=admissionregistration.k8s.io/v1beta1=true) MutatingAdmissionPolicy; set createTimeProtection.enabled=auto (off where the API is missing) or false" }}
{{- end }}
{{- end }}
{{- if and (ne (toString $mode) "false") $api (eq .Values.finalizerProfile "project") }}
{{- if eq (include "protection-manager.gateEnabled" (dict "root" . "gate" "StorageObjectInUseProtection")) "true" }}
{{- $active := include "protection-manager.activeControllers" . | fromJsonArray }}
{{- if has "pvc-protection" $active }}
{{- $out = append $out (dict "controller" "pvc-protection" "resource" "persistentvolumeclaims" "finalizer" "protection-manager.io/pvc-protection") }}
{{- end }}
{{- if has "pv-protection" $active }}
{{- $out = append $out (dict "controller" "pv-protection" "resource" "persistentvolumes" "finalizer" "protection-manager.io/pv-protection") }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}
