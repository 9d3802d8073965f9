{{- define "keeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "keeper.labels" -}}
app.kubernetes.io/name: keeper
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "keeper.selectorLabels" -}}
app.kubernetes.io/name: keeper
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "keeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "keeper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Non-empty when some provider in config.providers admits namespaces by label selector
(allowedNamespaces.selector, or adoption.allowedNamespaces.selector): keeper then needs to read
namespaces.
*/}}
{{- define "keeper.namespaceSelector" -}}
{{- range $name, $provider := (.Values.config.providers | default dict) }}
{{- range $kind, $settings := $provider }}
{{- if kindIs "map" $settings }}
{{- if and $settings.allowedNamespaces $settings.allowedNamespaces.selector }}true{{ end }}
{{- if and $settings.adoption $settings.adoption.allowedNamespaces $settings.adoption.allowedNamespaces.selector }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
