{{/*
Metrics serving and monitoring: the secure metrics server's flags, the
selector the alerts use, and the install-time checks of the metrics values.
*/}}

{{/*
--metrics-bind-address: the admin server's host with metrics.port, with
brackets around an IPv6 host.
*/}}
{{- define "protection-manager.metricsAddress" -}}
{{- $host := .Values.admin.bindAddress }}
{{- if contains ":" $host }}
{{- printf "[%s]:%d" $host (int .Values.metrics.port) }}
{{- else }}
{{- printf "%s:%d" $host (int .Values.metrics.port) }}
{{- end }}
{{- end }}

{{/*
Where a mounted metrics certificate (metrics.tlsSecret) appears.
*/}}
{{- define "protection-manager.metricsCertDir" -}}
/var/run/secrets/protection-manager/metrics-tls
{{- end }}

{{/*
The metrics flags of `protection-manager run`, as a JSON list.
*/}}
{{- define "protection-manager.metricsArgs" -}}
{{- $m := .Values.metrics }}
{{- $args := list (printf "--metrics-bind-address=%s" (include "protection-manager.metricsAddress" .)) }}
{{- $args = append $args (printf "--metrics-secure=%t" $m.secure) }}
{{- if and $m.secure $m.tlsSecret }}
{{- $dir := include "protection-manager.metricsCertDir" . }}
{{- $args = append $args (printf "--metrics-tls-cert-file=%s/tls.crt" $dir) }}
{{- $args = append $args (printf "--metrics-tls-private-key-file=%s/tls.key" $dir) }}
{{- end }}
{{- toJson $args }}
{{- end }}

{{/*
The PromQL label matchers every alert is scoped by.
*/}}
{{- define "protection-manager.alertSelector" -}}
{{- default (printf "job=%q, namespace=%q" (printf "%s-metrics" (include "protection-manager.fullname" .)) .Release.Namespace) .Values.metrics.prometheusRule.selector }}
{{- end }}

{{/*
Refuses metrics settings that cannot work, naming the value.
*/}}
{{- define "protection-manager.validateObservability" -}}
{{- $m := .Values.metrics }}
{{- if eq (int $m.port) (int .Values.admin.port) }}
{{- fail (printf "metrics.port (%d) must differ from admin.port: the metrics server and the admin server listen on separate ports" (int $m.port)) }}
{{- end }}
{{- if and $m.tlsSecret (not $m.secure) }}
{{- fail "metrics.tlsSecret is set but metrics.secure is false: the certificate would be unused; turn metrics.secure on or drop the Secret" }}
{{- end }}
{{- if and $m.serviceMonitor.enabled (not $m.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: the ServiceMonitor scrapes the metrics Service" }}
{{- end }}
{{- if and $m.reader.subjects (not $m.reader.create) }}
{{- fail "metrics.reader.subjects needs metrics.reader.create: the subjects are bound to the metrics-reader ClusterRole" }}
{{- end }}
{{- end }}
