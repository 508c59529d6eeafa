{{/*
The release guard, as the chart applies it (the manager applies it again at
start-up, and the pre-upgrade / pre-rollback hook Job in
release-check-job.yaml runs `protection-manager release-check`, which covers
`helm rollback`: a rollback re-applies a stored manifest without rendering
templates).

At install and upgrade time: read the release record ConfigMap the manager
writes (`lookup`, so only against a cluster: `helm template` and a client-side
`--dry-run` see no record) and refuse a release more than one step away from
the recorded one, with the manager's own message. Skipped with
releaseGuard.skipCheck, and when the chart cannot know the release the image
runs as (another image tag and no emulatedVersion: the hook and the manager
check it).
*/}}
{{- define "protection-manager.releaseGuard" -}}
{{- if not .Values.releaseGuard.skipCheck }}
{{- $own := or (not .Values.image.tag) (eq .Values.image.tag .Chart.AppVersion) }}
{{- if or .Values.emulatedVersion $own }}
{{- $name := include "protection-manager.releaseRecordName" . }}
{{- $location := printf "%s/%s" .Release.Namespace $name }}
{{- $record := lookup "v1" "ConfigMap" .Release.Namespace $name }}
{{- if $record }}
{{- $data := default (dict) $record.data }}
{{- if not (hasKey $data "release") }}
{{- fail (printf "release record ConfigMap %s is invalid: missing key \"release\"" $location) }}
{{- end }}
{{- $raw := get $data "release" }}
{{- $trimmed := trimPrefix "v" (trim $raw) }}
{{- if not (regexMatch "^[0-9]+\\.[0-9]+$" $trimmed) }}
{{- $reason := "expected major.minor, e.g. 0.2" }}
{{- if eq (len (splitList "." $trimmed)) 2 }}
{{- $reason = "major and minor must be non-negative integers" }}
{{- end }}
{{- fail (printf "release record ConfigMap %s is invalid: invalid version %q: %s" $location $raw $reason) }}
{{- end }}
{{- $rec := splitList "." $trimmed }}
{{- $recMajor := index $rec 0 | int64 }}
{{- $recMinor := index $rec 1 | int64 }}
{{- $run := splitList "." (include "protection-manager.effectiveVersion" .) }}
{{- $runMajor := index $run 0 | int64 }}
{{- $runMinor := index $run 1 | int64 }}
{{- $recorded := printf "%d.%d" $recMajor $recMinor }}
{{- $running := printf "%d.%d" $runMajor $runMinor }}
{{- $distance := 4294967295 }}
{{- $path := printf "%s → %s" $recorded $running }}
{{- if eq $recMajor $runMajor }}
{{- $distance = sub (max $recMinor $runMinor) (min $recMinor $runMinor) }}
{{- $steps := list }}
{{- if le $recMinor $runMinor }}
{{- range $m := untilStep (int $recMinor) (int (add $runMinor 1)) 1 }}
{{- $steps = append $steps (printf "%d.%d" $recMajor $m) }}
{{- end }}
{{- else }}
{{- range $m := untilStep (int $recMinor) (int (sub $runMinor 1)) -1 }}
{{- $steps = append $steps (printf "%d.%d" $recMajor $m) }}
{{- end }}
{{- end }}
{{- $path = join " → " $steps }}
{{- end }}
{{- if gt (int64 $distance) 1 }}
{{- fail (printf "refusing to run as release %s: this cluster last ran protection-manager as release %s (ConfigMap %s), %d releases away. Move one release at a time (%s): a skip can leave finalizers that no running release removes (objects stuck Terminating) or skip the remove-only release a rollback relies on. Pass --skip-release-check to override. (Chart value: releaseGuard.skipCheck=true.)" $running $recorded $location (int64 $distance) $path) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
