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

While finalizers that older releases never remove may be on objects, the
record also names a minimum release (`minimumRelease`, with one line per
finalizer in `minimumReleaseFinalizers`), and `release` carries an
explanation after the version for guards that predate the minimum (they
reject it as an invalid version, quoting it). An emulatedVersion below the
minimum is refused with the safe path.
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
{{- $version := $raw }}
{{- if hasKey $data "minimumRelease" }}
{{- $version = first (splitList " " (trim $raw)) }}
{{- end }}
{{- $trimmed := trimPrefix "v" (trim $version) }}
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
{{- with get $data "minimumRelease" }}
{{- $min := splitList "." (trimPrefix "v" (trim .)) }}
{{- if or (ne (len $min) 2) (not (regexMatch "^[0-9]+\\.[0-9]+$" (trimPrefix "v" (trim .)))) }}
{{- fail (printf "release record ConfigMap %s is invalid: key \"minimumRelease\": invalid version %q: expected major.minor, e.g. 0.2" $location .) }}
{{- end }}
{{- $minMajor := index $min 0 | int64 }}
{{- $minMinor := index $min 1 | int64 }}
{{- if or (lt $runMajor $minMajor) (and (eq $runMajor $minMajor) (lt $runMinor $minMinor)) }}
{{- $finalizers := list }}
{{- $gates := list }}
{{- $strip := list }}
{{- range $line := splitList "\n" (default "" (get $data "minimumReleaseFinalizers")) }}
{{- $words := splitList " " (trim $line) }}
{{- if trim $line }}
{{- $finalizers = append $finalizers (first $words) }}
{{- range $w := rest $words }}
{{- if hasPrefix "controller=" $w }}{{ $strip = append $strip (printf "protection-manager strip-finalizers --controller %s --namespace %s --release-record-name %s" (trimPrefix "controller=" $w) $.Release.Namespace $name) }}{{ end }}
{{- end }}
{{- if has "adding=true" $words }}
{{- range $w := rest $words }}
{{- if hasPrefix "gate=" $w }}{{ $gates = append $gates (printf "featureGates.%s=false" (trimPrefix "gate=" $w)) }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $minimum := printf "%d.%d" $minMajor $minMinor }}
{{- $steps := list }}
{{- if $gates }}
{{- $steps = append $steps (printf "turn the gate off (helm upgrade --reset-then-reuse-values --set %s)" (join " --set " $gates)) }}
{{- end }}
{{- $steps = append $steps (printf "run `%s`" (join "` and `" $strip)) }}
{{- fail (printf "refusing to run as release %s: objects in this cluster may carry %s, which no release before %s removes (ConfigMap %s, minimumRelease=%s); under release %s, such an object once deleted stays Terminating. Safe path: on release %s, %s, then roll back (README, \"Rollback\"). Pass --skip-release-check to override (the finalizers stay). (Chart value: releaseGuard.skipCheck=true.)" $running (join ", " $finalizers) $minimum $location $minimum $running $minimum (join ", then " $steps)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
