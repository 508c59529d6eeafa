{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "protection-manager.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name used as the prefix of every object: fullnameOverride, else the
release name when it already contains the chart name, else
<release>-<chart>.
*/}}
{{- define "protection-manager.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "protection-manager.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "protection-manager.labels" -}}
helm.sh/chart: {{ include "protection-manager.chart" . }}
{{ include "protection-manager.selectorLabels" . }}
app.kubernetes.io/version: {{ include "protection-manager.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: controller-manager
app.kubernetes.io/part-of: protection-manager
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: stable for the life of a release (never add to these; a
Deployment's selector is immutable).
*/}}
{{- define "protection-manager.selectorLabels" -}}
app.kubernetes.io/name: {{ include "protection-manager.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "protection-manager.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "protection-manager.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "protection-manager.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/*
repository:tag, or repository:tag@digest when a digest is given.
*/}}
{{- define "protection-manager.image" -}}
{{- $ref := printf "%s:%s" .Values.image.repository (include "protection-manager.imageTag" .) }}
{{- if .Values.image.digest }}
{{- $ref = printf "%s@%s" $ref .Values.image.digest }}
{{- end }}
{{- $ref }}
{{- end }}

{{/*
The release the manager runs as: emulatedVersion, else the image's release
(appVersion's major.minor).
*/}}
{{- define "protection-manager.effectiveVersion" -}}
{{- if .Values.emulatedVersion }}
{{- .Values.emulatedVersion }}
{{- else }}
{{- $v := semver .Chart.AppVersion }}
{{- printf "%d.%d" $v.Major $v.Minor }}
{{- end }}
{{- end }}

{{/*
Every controller the binary has: name, aliases, on by default, the release it
appeared in, and the RBAC rules it needs (cluster-wide). Keep in step with the
controller crates' descriptors (crates/pv-protection, crates/lb-cleanup).
*/}}
{{- define "protection-manager.controllerTable" -}}
pv-protection:
  aliases: [persistentvolume-protection-controller]
  enabledByDefault: true
  since: "0.1"
  rules:
    - apiGroups: [""]
      resources: [persistentvolumes]
      verbs: [get, list, watch, patch]
pvc-protection:
  aliases: [persistentvolumeclaim-protection-controller]
  enabledByDefault: true
  since: "0.1"
  rules:
    - apiGroups: [""]
      resources: [persistentvolumeclaims]
      verbs: [get, list, watch, patch]
    - apiGroups: [""]
      resources: [pods]
      verbs: [list, watch]
service-lb-cleanup:
  aliases: [service-lb-controller]
  enabledByDefault: true
  since: "0.1"
  rules:
    - apiGroups: [""]
      resources: [services]
      verbs: [get, list, watch]
    - apiGroups: [""]
      resources: [services/status]
      verbs: [patch]
    - apiGroups: [""]
      resources: [nodes]
      verbs: [list, watch]
vac-protection:
  aliases: [volumeattributesclass-protection-controller]
  enabledByDefault: true
  since: "0.4"
  rules:
    - apiGroups: [storage.k8s.io]
      resources: [volumeattributesclasses]
      verbs: [get, list, watch, patch]
    - apiGroups: [""]
      resources: [persistentvolumeclaims, persistentvolumes]
      verbs: [list, watch]
service-cidr-protection:
  aliases: [service-cidr-controller]
  enabledByDefault: true
  since: "0.5"
  rules:
    - apiGroups: [networking.k8s.io]
      resources: [servicecidrs]
      verbs: [get, list, watch, patch]
    - apiGroups: [networking.k8s.io]
      resources: [servicecidrs/status]
      verbs: [patch]
    - apiGroups: [networking.k8s.io]
      resources: [ipaddresses]
      verbs: [list, watch]
rules:
  aliases: []
  enabledByDefault: true
  since: "0.4"
  rules:
    - apiGroups: [protection-manager.io]
      resources: [protectionrules]
      verbs: [get, list, watch, patch]
    - apiGroups: [protection-manager.io]
      resources: [protectionrules/status]
      verbs: [patch]
    - apiGroups: [authorization.k8s.io]
      resources: [selfsubjectaccessreviews]
      verbs: [create]
{{- end }}

{{/*
The controllers that run, as a JSON list of canonical names, sorted. Mirrors
kube-controller-manager's IsControllerEnabled (the manager's
protection_core::controllers): the first entry naming a controller (or an
alias), with or without a leading "-", decides; "*" decides only for
controllers no entry names, and turns on those enabled by default. A
controller newer than the emulated version does not exist.
*/}}
{{- define "protection-manager.enabledControllers" -}}
{{- $table := include "protection-manager.controllerTable" . | fromYaml }}
{{- $version := include "protection-manager.effectiveVersion" . }}
{{- $enabled := list }}
{{- range $name, $c := $table }}
{{- $names := prepend $c.aliases $name }}
{{- $decided := false }}
{{- $on := false }}
{{- $star := false }}
{{- range $entry := $.Values.controllers }}
{{- if not $decided }}
{{- if has (trimPrefix "-" $entry) $names }}
{{- $decided = true }}
{{- $on = not (hasPrefix "-" $entry) }}
{{- else if eq $entry "*" }}
{{- $star = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $decided }}
{{- $on = and $star $c.enabledByDefault }}
{{- end }}
{{- if and $on (semverCompare (printf ">=%s" $c.since) $version) }}
{{- $enabled = append $enabled $name }}
{{- end }}
{{- end }}
{{- $enabled | sortAlpha | toJson }}
{{- end }}

{{/*
The controllers that act, as a JSON list: the enabled ones, minus
service-lb-cleanup without a provider endpoint (it then makes no API call,
as upstream's service controller does not run without a cloud provider).
RBAC is granted for these only.
*/}}
{{- define "protection-manager.activeControllers" -}}
{{- $active := list }}
{{- range $name := include "protection-manager.enabledControllers" . | fromJsonArray }}
{{- if or (ne $name "service-lb-cleanup") $.Values.loadBalancer.provider.endpoint }}
{{- $active = append $active $name }}
{{- end }}
{{- end }}
{{- toJson $active }}
{{- end }}

{{/*
leaderElection.enabled, or replicaCount > 1 when it is null.
*/}}
{{- define "protection-manager.leaderElect" -}}
{{- $le := .Values.leaderElection.enabled }}
{{- if kindIs "invalid" $le }}
{{- $le = gt (int .Values.replicaCount) 1 }}
{{- end }}
{{- if $le }}true{{ else }}false{{ end }}
{{- end }}

{{- define "protection-manager.releaseRecordName" -}}
{{- default (printf "%s-release" (include "protection-manager.fullname" . | trunc 55 | trimSuffix "-")) .Values.releaseGuard.recordName }}
{{- end }}

{{- define "protection-manager.leaseName" -}}
{{- default (include "protection-manager.fullname" .) .Values.leaderElection.resourceName }}
{{- end }}

{{/*
A Go duration ("1m30s", "500ms", "0") in seconds, as a float string.
*/}}
{{- define "protection-manager.durationSeconds" -}}
{{- $total := 0.0 }}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "μs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 }}
{{- range $part := regexFindAll "([0-9]*\\.?[0-9]+)(ns|us|µs|μs|ms|s|m|h)" (toString .) -1 }}
{{- $unit := regexReplaceAll "^[0-9.]+" $part "" }}
{{- $number := regexReplaceAll "[^0-9.]+$" $part "" | float64 }}
{{- $total = addf $total (mulf $number (get $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
A Go duration as the manager prints it (protection_core::duration::
format_duration: "15s", "1m30s", "500ms", "1h1m40s").
*/}}
{{- define "protection-manager.formatDuration" -}}
{{- $ms := round (mulf (include "protection-manager.durationSeconds" . | float64) 1000.0) 0 | int64 }}
{{- if eq $ms 0 }}0s
{{- else if lt $ms 1000 }}{{ $ms }}ms
{{- else }}
{{- $s := div $ms 1000 }}
{{- $frac := mod $ms 1000 }}
{{- $h := div $s 3600 }}
{{- $m := mod (div $s 60) 60 }}
{{- $secs := printf "%ds" (mod $s 60) }}
{{- if $frac }}
{{- $secs = printf "%d.%ss" (mod $s 60) (printf "%03d" $frac | trimSuffix "0" | trimSuffix "0") }}
{{- end }}
{{- if $h }}{{ printf "%dh%dm%s" $h $m $secs }}
{{- else if $m }}{{ printf "%dm%s" $m $secs }}
{{- else }}{{ $secs }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The leader-election durations, checked as the manager checks them
(protection_host::leader::LeaderElectionConfig::validate, client-go's
NewLeaderElector rules) with its messages; only when leader election is on.
*/}}
{{- define "protection-manager.validateLeaderElection" -}}
{{- if eq (include "protection-manager.leaderElect" .) "true" }}
{{- $le := .Values.leaderElection }}
{{- $ld := include "protection-manager.durationSeconds" $le.leaseDuration | float64 }}
{{- $rd := include "protection-manager.durationSeconds" $le.renewDeadline | float64 }}
{{- $rp := include "protection-manager.durationSeconds" $le.retryPeriod | float64 }}
{{- $ldText := include "protection-manager.formatDuration" $le.leaseDuration }}
{{- $rdText := include "protection-manager.formatDuration" $le.renewDeadline }}
{{- $rpText := include "protection-manager.formatDuration" $le.retryPeriod }}
{{- $ldMs := round (mulf $ld 1000.0) 0 | int64 }}
{{- $err := "" }}
{{- $int32 := 2147483647.0 }}
{{- $timing := "must be at least 1ms and at most 596523h14m7s: it must be shorter than the lease duration" }}
{{- if or (lt $ld 2.0) (gt $ld $int32) }}
{{- $err = printf "%q is out of range: must be at least 2s and at most 596523h14m7s: the Lease's spec.leaseDurationSeconds is an int32 of seconds" (toString $le.leaseDuration) }}
{{- else if or (lt $rd 0.001) (gt $rd $int32) }}
{{- $err = printf "%q is out of range: %s" (toString $le.renewDeadline) $timing }}
{{- else if or (lt $rp 0.001) (gt $rp $int32) }}
{{- $err = printf "%q is out of range: %s" (toString $le.retryPeriod) $timing }}
{{- else if le $ld 0.0 }}
{{- $err = "leaseDuration must be greater than zero" }}
{{- else if le $rd 0.0 }}
{{- $err = "renewDeadline must be greater than zero" }}
{{- else if le $rp 0.0 }}
{{- $err = "retryPeriod must be greater than zero" }}
{{- else if le $ld $rd }}
{{- $err = printf "leaseDuration must be greater than renewDeadline (lease duration %s, renew deadline %s)" $ldText $rdText }}
{{- else if le $rd (mulf 1.2 $rp) }}
{{- $err = printf "renewDeadline must be greater than retryPeriod*JitterFactor (renew deadline %s, retry period %s)" $rdText $rpText }}
{{- else if or (ne (mod $ldMs 1000) 0) (lt $ldMs 2000) }}
{{- $err = printf "lease duration must be a whole number of seconds, at least 2s (got %s)" $ldText }}
{{- end }}
{{- if $err }}
{{- fail (printf "leaderElection: invalid leader election settings: %s" $err) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
logging.level, checked as the manager checks --log-level
(crates/manager/src/logging.rs validate_level): comma-separated tracing
directives, where a directive without "=" must be a level and the level after
a directive's last "=" must be one too (tracing would read a bare word as a
target name and log nothing a user expects).
*/}}
{{- define "protection-manager.validateLogLevel" -}}
{{- $levels := list "off" "error" "warn" "info" "debug" "trace" "0" "1" "2" "3" "4" "5" }}
{{- $level := toString .Values.logging.level }}
{{- range $raw := splitList "," $level }}
{{- $d := trim $raw }}
{{- if $d }}
{{- if and (not (contains "=" $d)) (not (contains "[" $d)) }}
{{- if not (has (lower $d) $levels) }}
{{- fail (printf "logging.level: invalid --log-level %q: %q is neither a level (off, error, warn, info, debug, trace) nor a target=level directive" $level $d) }}
{{- end }}
{{- else if contains "=" $d }}
{{- $l := regexReplaceAll "^.*=" $d "" }}
{{- if not (has (lower $l) $levels) }}
{{- fail (printf "logging.level: invalid --log-level %q: %q: %q is not a level (off, error, warn, info, debug, trace)" $level $d $l) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Generated names must stay within Kubernetes' 63-character limit. The chart
refuses a full name that would need truncating instead of truncating it
(silently cut names can collide, and a name a user cannot predict is a name
they cannot find). The longest suffix is the metrics Service's "-metrics";
the release-check Job and the release record truncate their base
themselves, as before.
*/}}
{{- define "protection-manager.validateNames" -}}
{{- $full := include "protection-manager.fullname" . }}
{{- $source := "the release name and the chart name (<release>-<chart>)" }}
{{- if .Values.fullnameOverride }}
{{- $source = "fullnameOverride" }}
{{- end }}
{{- if and .Values.metrics.service.enabled (gt (len $full) 55) }}
{{- fail (printf "the full name %q (from %s) is %d characters: the metrics Service would be %q (%d characters), longer than the 63 Kubernetes allows; use a fullnameOverride (or release name) of at most 55 characters" $full $source (len $full) (printf "%s-metrics" $full) (add (len $full) 8)) }}
{{- end }}
{{- end }}

{{/*
terminationGracePeriodSeconds: the value given, which must exceed the
shutdown bound, or the shutdown bound rounded up plus 15 seconds.
*/}}
{{- define "protection-manager.terminationGracePeriodSeconds" -}}
{{- $shutdown := include "protection-manager.durationSeconds" .Values.shutdownGracePeriod | float64 | ceil | int }}
{{- $given := .Values.terminationGracePeriodSeconds }}
{{- if kindIs "invalid" $given }}
{{- add $shutdown 15 }}
{{- else if le (int $given) $shutdown }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than shutdownGracePeriod (%v, %d seconds rounded up): the kubelet would kill the manager before it finished its in-flight work" (int $given) .Values.shutdownGracePeriod $shutdown) }}
{{- else }}
{{- int $given }}
{{- end }}
{{- end }}

{{/*
--admin-address: host:port, with brackets around an IPv6 host.
*/}}
{{- define "protection-manager.adminAddress" -}}
{{- $host := .Values.admin.bindAddress }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host (int .Values.admin.port) }}
{{- else }}
{{- printf "%s:%d" $host (int .Values.admin.port) }}
{{- end }}
{{- end }}

{{/*
Where the provider token Secret is mounted: its key appears as the file
`token` in this directory (a directory mount, not subPath, so that a rotated
Secret reaches the pod).
*/}}
{{- define "protection-manager.tokenDir" -}}
/var/run/secrets/protection-manager/lb-provider
{{- end }}

{{/*
The arguments of the manager container as a JSON list. Every value maps onto
exactly one flag; `--flag=value` keeps each flag in one list item.
*/}}
{{- define "protection-manager.args" -}}
{{- $v := .Values }}
{{- $args := list "run" }}
{{- $args = append $args (printf "--controllers=%s" (join "," $v.controllers)) }}
{{- with $v.featureGates }}
{{- $gates := list }}
{{- range $name := keys . | sortAlpha }}
{{- $gates = append $gates (printf "%s=%t" $name (get $v.featureGates $name)) }}
{{- end }}
{{- $args = append $args (printf "--feature-gates=%s" (join "," $gates)) }}
{{- end }}
{{- with $v.emulatedVersion }}
{{- $args = append $args (printf "--emulated-version=%s" .) }}
{{- end }}
{{- $args = append $args (printf "--finalizer-profile=%s" $v.finalizerProfile) }}
{{- $args = append $args (printf "--kube-api-qps=%v" $v.kubeApi.qps) }}
{{- $args = append $args (printf "--kube-api-burst=%d" (int64 $v.kubeApi.burst)) }}
{{- $args = append $args (printf "--event-qps=%v" $v.kubeApi.eventQPS) }}
{{- $args = append $args (printf "--event-burst=%d" (int64 $v.kubeApi.eventBurst)) }}
{{- $args = append $args (printf "--request-timeout=%v" $v.kubeApi.requestTimeout) }}
{{- $args = append $args (printf "--concurrency=%d" (int64 $v.concurrency)) }}
{{- $args = append $args (printf "--log-format=%s" $v.logging.format) }}
{{- $args = append $args (printf "--log-level=%s" $v.logging.level) }}
{{- $args = append $args (printf "--admin-address=%s" (include "protection-manager.adminAddress" .)) }}
{{- $args = concat $args (include "protection-manager.metricsArgs" . | fromJsonArray) }}
{{- $le := include "protection-manager.leaderElect" . }}
{{- $args = append $args (printf "--leader-elect=%s" $le) }}
{{- if eq $le "true" }}
{{- $args = append $args (printf "--leader-elect-lease-duration=%v" $v.leaderElection.leaseDuration) }}
{{- $args = append $args (printf "--leader-elect-renew-deadline=%v" $v.leaderElection.renewDeadline) }}
{{- $args = append $args (printf "--leader-elect-retry-period=%v" $v.leaderElection.retryPeriod) }}
{{- $args = append $args (printf "--leader-elect-resource-name=%s" (include "protection-manager.leaseName" .)) }}
{{- end }}
{{- /* The Lease's and the release record's namespace, even without leader election. */}}
{{- $args = append $args (printf "--leader-elect-resource-namespace=%s" .Release.Namespace) }}
{{- $args = append $args (printf "--release-record-name=%s" (include "protection-manager.releaseRecordName" .)) }}
{{- if $v.releaseGuard.skipCheck }}
{{- $args = append $args "--skip-release-check" }}
{{- end }}
{{- $args = append $args (printf "--shutdown-grace-period=%v" $v.shutdownGracePeriod) }}
{{- $enabled := include "protection-manager.enabledControllers" . | fromJsonArray }}
{{- if or (has "pv-protection" $enabled) (has "pvc-protection" $enabled) }}
{{- $args = append $args (printf "--storage-protection-resync-period=%v" $v.storageProtection.resyncPeriod) }}
{{- end }}
{{- if has "vac-protection" $enabled }}
{{- $args = append $args (printf "--vac-protection-resync-period=%v" $v.vacProtection.resyncPeriod) }}
{{- end }}
{{- if has "service-cidr-protection" $enabled }}
{{- $args = append $args (printf "--service-cidr-resync-period=%v" $v.serviceCIDRProtection.resyncPeriod) }}
{{- end }}
{{- if has "service-lb-cleanup" $enabled }}
{{- $lb := $v.loadBalancer }}
{{- $args = append $args (printf "--lb-class=%s" $lb.class) }}
{{- $args = append $args (printf "--lb-include-unclassed=%t" $lb.includeUnclassed) }}
{{- $args = append $args (printf "--lb-resync-period=%v" $lb.resyncPeriod) }}
{{- with $lb.provider.endpoint }}
{{- $args = append $args (printf "--lb-provider-endpoint=%s" .) }}
{{- if $lb.provider.tokenSecret.name }}
{{- $args = append $args (printf "--lb-provider-token-file=%s/token" (include "protection-manager.tokenDir" $)) }}
{{- end }}
{{- end }}
{{- $args = append $args (printf "--lb-provider-connect-timeout=%v" $lb.provider.connectTimeout) }}
{{- $args = append $args (printf "--lb-provider-request-timeout=%v" $lb.provider.requestTimeout) }}
{{- end }}
{{- range $extra := $v.extraArgs }}
{{- $flag := regexReplaceAll "=.*$" $extra "" }}
{{- range $arg := $args }}
{{- if eq $flag (regexReplaceAll "=.*$" $arg "") }}
{{- fail (printf "extraArgs: %s is already set from the chart's values (%s); set the value instead (the manager refuses a flag given twice)" $flag $arg) }}
{{- end }}
{{- end }}
{{- end }}
{{- $args = concat $args $v.extraArgs }}
{{- toJson $args }}
{{- end }}

{{/*
The feature gates of the chart's release (appVersion), as the manager's
protection_core::release defines them: for each gate, the specs in release
order; before the first spec a gate is PreAlpha and cannot be set. A chart
test compares this table with `protection-manager feature-gates` at every
release the binary can emulate.
*/}}
{{- define "protection-manager.gateTable" -}}
StorageObjectInUseProtection:
  - {since: "0.1", default: false, locked: false}
  - {since: "0.2", default: true, locked: false}
  - {since: "0.3", default: true, locked: true}
ServiceLoadBalancerFinalizer:
  - {since: "0.1", default: false, locked: false}
  - {since: "0.2", default: true, locked: false}
  - {since: "0.3", default: true, locked: true}
VolumeAttributesClass:
  - {since: "0.4", default: false, locked: false}
  - {since: "0.5", default: true, locked: false}
  - {since: "0.6", default: true, locked: true}
MultiCIDRServiceAllocator:
  - {since: "0.5", default: false, locked: false}
  - {since: "0.6", default: true, locked: false}
  - {since: "0.7", default: true, locked: true}
InUseProtectionRules:
  - {since: "0.4", default: false, locked: false}
{{- end }}

{{/*
Refuses, at install time, the settings the manager would refuse at start-up
(with the manager's own messages), so that a bad upgrade fails in helm instead
of leaving a crash-looping pod. Only for the image of the chart's own release:
another tag carries other tables, and the manager checks itself.
*/}}
{{- define "protection-manager.validate" -}}
{{- $own := or (not .Values.image.tag) (eq .Values.image.tag .Chart.AppVersion) }}
{{- if $own }}
{{- $app := semver .Chart.AppVersion }}
{{- $binary := printf "%d.%d" $app.Major $app.Minor }}
{{- $emulated := include "protection-manager.effectiveVersion" . }}
{{- if not (semverCompare (printf "<=%s" $binary) $emulated) }}
{{- fail (printf "emulatedVersion: emulation version %s is not between [0.0, %s]" $emulated $binary) }}
{{- end }}
{{- $controllers := include "protection-manager.controllerTable" . | fromYaml }}
{{- $notYet := list }}
{{- range $entry := .Values.controllers }}
{{- $bare := trimPrefix "-" $entry }}
{{- range $name, $c := $controllers }}
{{- if and (has $bare (prepend $c.aliases $name)) (not (semverCompare (printf ">=%s" $c.since) $emulated)) }}
{{- $notYet = append $notYet (printf "%q is not in the list of known controllers at emulated version %s: it appeared in %s" $bare $emulated $c.since) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $notYet }}
{{- fail (printf "controllers: %s" (join ", " $notYet)) }}
{{- end }}
{{- $table := include "protection-manager.gateTable" . | fromYaml }}
{{- $errs := list }}
{{- range $key := keys .Values.featureGates | sortAlpha }}
{{- $value := get $.Values.featureGates $key }}
{{- $specs := get $table $key }}
{{- if $specs }}
{{- $spec := dict }}
{{- range $specs }}
{{- if semverCompare (printf ">=%s" .since) $emulated }}
{{- $spec = . }}
{{- end }}
{{- end }}
{{- if not $spec }}
{{- $errs = append $errs (printf "cannot set feature gate %s to %t, feature is PreAlpha at emulated version %s" $key $value $emulated) }}
{{- else if and $spec.locked (ne $spec.default $value) }}
{{- $errs = append $errs (printf "cannot set feature gate %s to %t, feature is locked to %t" $key $value $spec.default) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $errs }}
{{- fail (printf "featureGates: %s (see `protection-manager feature-gates --emulated-version=%s`)" (join ", " $errs) $emulated) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The kinds the rules controller may read and patch (rules.allowedResources
and the enabled examples' kinds), as a YAML list of RBAC rules.
*/}}
{{- define "protection-manager.rulesRbac" -}}
{{- $out := list }}
{{- range $r := .Values.rules.allowedResources }}
{{- if or (contains "*" (toString $r.resource)) (contains "*" (toString $r.apiGroup)) (has "*" (default (list) $r.verbs)) }}
{{- fail (printf "rules.allowedResources: %s: a wildcard would let every ProtectionRule hold any kind (pods, nodes, namespaces, leases, the cluster's own objects) and read every Secret; list each kind the rules may protect instead" (toJson $r)) }}
{{- end }}
{{- $out = append $out (dict "apiGroups" (list (default "" $r.apiGroup)) "resources" (list $r.resource) "verbs" (default (list "get" "list" "watch" "patch") $r.verbs)) }}
{{- end }}
{{- $ex := .Values.rules.examples }}
{{- $protected := list }}
{{- /* An example turned off keeps its kind's rights while its rule still
exists in the cluster (`lookup`, so only against one): helm deletes the
rule in the same upgrade that would drop the rights, and the manager needs
them to clear the rule's finalizer from every object it protects before the
rule can go. The next upgrade drops them. */}}
{{- $served := .Capabilities.APIVersions.Has "protection-manager.io/v1alpha1/ProtectionRule" }}
{{- range $e := list (list "secretsUsedByPods" "secrets-used-by-pods" "secrets") (list "configMapsUsedByPods" "configmaps-used-by-pods" "configmaps") (list "pvcsUsedByPods" "pvcs-used-by-pods" "persistentvolumeclaims") }}
{{- if or (get $ex (index $e 0)) (and $served (lookup "protection-manager.io/v1alpha1" "ProtectionRule" "" (index $e 1))) }}
{{- $protected = append $protected (index $e 2) }}
{{- end }}
{{- end }}
{{- if $protected }}
{{- $out = append $out (dict "apiGroups" (list "") "resources" $protected "verbs" (list "get" "list" "watch" "patch")) }}
{{- $out = append $out (dict "apiGroups" (list "") "resources" (list "pods") "verbs" (list "list" "watch")) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
The durations and the admin address, checked as the manager's flag parsers
check them (protection_core::duration, crates/manager/src/cli.rs), with
their messages: every duration within what a Go duration holds, resync
periods 0 (off) or at least 1s, the provider's timeouts above 0, the admin
address an IP address. `every_value_the_chart_renders_the_binary_starts_with`
(tests/chart_render.rs) runs the binary's `validate-config` on the edges.
*/}}
{{- define "protection-manager.validateFlags" -}}
{{- $v := .Values }}
{{- $goMax := 9223372036.854775807 }}
{{- $checks := list
  (list "storageProtection.resyncPeriod" "storage-protection-resync-period" $v.storageProtection.resyncPeriod "resync")
  (list "loadBalancer.resyncPeriod" "lb-resync-period" $v.loadBalancer.resyncPeriod "resync")
  (list "vacProtection.resyncPeriod" "vac-protection-resync-period" $v.vacProtection.resyncPeriod "resync")
  (list "serviceCIDRProtection.resyncPeriod" "service-cidr-resync-period" $v.serviceCIDRProtection.resyncPeriod "resync")
  (list "loadBalancer.provider.connectTimeout" "lb-provider-connect-timeout" $v.loadBalancer.provider.connectTimeout "positive")
  (list "loadBalancer.provider.requestTimeout" "lb-provider-request-timeout" $v.loadBalancer.provider.requestTimeout "positive")
  (list "kubeApi.requestTimeout" "request-timeout" $v.kubeApi.requestTimeout "timeout")
  (list "leaderElection.leaseDuration" "leader-elect-lease-duration" $v.leaderElection.leaseDuration "any")
  (list "leaderElection.renewDeadline" "leader-elect-renew-deadline" $v.leaderElection.renewDeadline "any")
  (list "leaderElection.retryPeriod" "leader-elect-retry-period" $v.leaderElection.retryPeriod "any")
  (list "shutdownGracePeriod" "shutdown-grace-period" $v.shutdownGracePeriod "any") }}
{{- range $c := $checks }}
{{- $name := index $c 0 }}
{{- $flag := index $c 1 }}
{{- $text := toString (index $c 2) }}
{{- $rule := index $c 3 }}
{{- $secs := 0.0 }}
{{- if regexMatch "^[0-9]+$" $text }}
{{- $secs = float64 $text }}
{{- else }}
{{- $secs = include "protection-manager.durationSeconds" $text | float64 }}
{{- end }}
{{- $msg := "" }}
{{- if gt $secs $goMax }}
{{- if eq $rule "timeout" }}
{{- $msg = printf "invalid timeout value %q. Timeout must be a single integer in seconds, or an integer followed by a corresponding time unit (e.g. 1s | 2m | 3h)" $text }}
{{- else }}
{{- $msg = printf "invalid duration %q: out of range (examples: 15s, 1m30s, 500ms)" $text }}
{{- end }}
{{- else if and (eq $rule "resync") (gt $secs 0.0) (lt $secs 1.0) }}
{{- $msg = printf "%q is out of range: must be 0 (off) or at least 1s: client-go's minimum resync period" $text }}
{{- else if and (eq $rule "positive") (le $secs 0.0) }}
{{- $msg = printf "--%s must be more than 0" $flag }}
{{- end }}
{{- if $msg }}
{{- fail (printf "%s: invalid value %q for --%s: %s" $name $text $flag $msg) }}
{{- end }}
{{- end }}
{{- $host := toString .Values.admin.bindAddress }}
{{- $v4 := "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])" }}
{{- $h := "[0-9a-fA-F]{1,4}" }}
{{- $v6 := printf "(%s:){7}%s|(%s:){1,7}:|(%s:){1,6}:%s|(%s:){1,5}(:%s){1,2}|(%s:){1,4}(:%s){1,3}|(%s:){1,3}(:%s){1,4}|(%s:){1,2}(:%s){1,5}|%s:(:%s){1,6}|:((:%s){1,7}|:)|(%s:){6}%s|::((%s:){0,5})%s|(%s:){1,5}:%s|(%s:){1,4}:(%s:){0,3}%s" $h $h $h $h $h $h $h $h $h $h $h $h $h $h $h $h $h $v4 $h $v4 $h $v4 $h $h $v4 }}
{{- if not (regexMatch (printf "^(%s|%s)$" $v4 $v6) $host) }}
{{- fail (printf "admin.bindAddress: %q is not an IP address: a listen address is an IP address and a port (e.g. 0.0.0.0:8080, 127.0.0.1:8080 or [::]:8080), not a host name" $host) }}
{{- end }}
{{- end }}
