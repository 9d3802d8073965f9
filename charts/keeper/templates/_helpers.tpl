{{/*
The chart's name (nameOverride), for the app.kubernetes.io/name label and inside the fullname.
*/}}
{{- define "keeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name: fullnameOverride, else RELEASE-NAME (just RELEASE when it already contains the
name); at most 63 characters (a Service name is a DNS label), without a trailing "-".
*/}}
{{- define "keeper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "keeper.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Every object's labels, commonLabels included (the schema keeps commonLabels off these keys).
*/}}
{{- define "keeper.labels" -}}
{{ include "keeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "keeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "keeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/*
The image: repository@digest when image.digest is set (the tag is then ignored), else
repository:tag (the tag defaults to the chart's appVersion).
*/}}
{{- define "keeper.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/*
A Prometheus duration of one unit (5m, 24h) in words: "5 minutes", "24 hours", "1 hour".
*/}}
{{- define "keeper.durationWords" -}}
{{- $n := regexFind "^[0-9]+" . | int -}}
{{- $unit := get (dict "s" "second" "m" "minute" "h" "hour" "d" "day" "w" "week") (regexFind "[a-z]+$" .) -}}
{{- printf "%d %s%s" $n $unit (ternary "" "s" (eq $n 1)) -}}
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

{{/*
The webhook's certificate mode (webhook.tls.mode), after refusing values that contradict it:
values of another mode are an error, not silently ignored (before webhook.tls.mode, certSecret
and caBundle chose the mode by being set).
*/}}
{{- define "keeper.webhookMode" -}}
{{- $w := .Values.webhook -}}
{{- $mode := $w.tls.mode -}}
{{- if eq $mode "secret" -}}
{{- if and (not $w.certSecret) (not $w.url) -}}
{{- fail "webhook.tls.mode=secret needs webhook.certSecret: the kubernetes.io/tls Secret keeper serves" -}}
{{- end -}}
{{- if and $w.caBundle $w.caInjectFrom -}}
{{- fail "webhook.caBundle and webhook.caInjectFrom both set: the CA comes from one of them" -}}
{{- end -}}
{{- if not (or $w.caBundle $w.caInjectFrom) -}}
{{- fail "webhook.tls.mode=secret needs webhook.caBundle (the CA that signed the certificate, base64 PEM) or webhook.caInjectFrom (<namespace>/<Certificate> for cert-manager's CA injector)" -}}
{{- end -}}
{{- else -}}
{{- range $key := list "certSecret" "caBundle" "caInjectFrom" -}}
{{- if index $w $key -}}
{{- fail (printf "webhook.%s is set but webhook.tls.mode is %s: set webhook.tls.mode=secret to serve a certificate of your own" $key $mode) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The Secret the webhook's certificate is in (keeper's own with selfManaged). */}}
{{- define "keeper.webhookSecret" -}}
{{- $mode := include "keeper.webhookMode" . -}}
{{- if eq $mode "selfManaged" -}}{{ include "keeper.fullname" . }}-webhook-tls
{{- else if eq $mode "certManager" -}}{{ include "keeper.fullname" . }}-webhook-cert-manager
{{- else -}}{{ .Values.webhook.certSecret }}
{{- end -}}
{{- end -}}

{{/*
The rules of what keeper does in the namespaces it watches: in the ClusterRole by default, in a
Role per namespace with config.watchNamespaces.
*/}}
{{- define "keeper.namespacedRules" }}
  # Every rule below is used by keeper (e2e/rbac-usage.py checks it after the e2e suite).
  # Controllers list and watch their kinds; finalizers and request annotations are JSON patches;
  # the bucket controller reads a bucket's tenant with get until its tenant cache has synced.
  - apiGroups: [keeper.dev]
    resources: [s3tenants]
    verbs: [get, list, watch, patch]
  - apiGroups: [keeper.dev]
    resources: [s3buckets, clouddatabases]
    verbs: [list, watch, patch]
  # Status is written with merge patches only.
  - apiGroups: [keeper.dev]
    resources: [s3tenants/status, s3buckets/status, clouddatabases/status]
    verbs: [patch]
  # The Secrets keeper writes name their resource as owner with blockOwnerDeletion (a foreground
  # delete of the resource, as Argo CD's prune does, then ends only once its Secrets are gone).
  # Under the OwnerReferencesPermissionEnforcement admission plugin (OpenShift and many hardened
  # clusters) setting blockOwnerDeletion needs update on the owner's finalizers subresource. No API
  # path serves that subresource: the grant is checked at admission only and allows nothing else.
  - apiGroups: [keeper.dev]
    resources: [s3tenants/finalizers, s3buckets/finalizers, clouddatabases/finalizers]
    verbs: [update]
  # Credentials Secrets are written next to the resources, in any namespace that uses keeper;
  # the database controller watches the Secrets it labels (app.kubernetes.io/managed-by=keeper)
  # so that a deleted connection Secret comes back at once. delete: a tenant on an IAM provider
  # deletes the tenant-wide keys Secret an older keeper wrote (only one keeper created).
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, list, watch, create, update, patch, delete]
  # Events are only created: keeper publishes an event when something changes, never a repeat
  # that kube's recorder would fold into an existing event's series with a patch.
  - apiGroups: [events.k8s.io]
    resources: [events]
    verbs: [create]
{{- end }}

{{/*
With config.watchNamespaces: the provider credentials Secrets (as a JSON list of {namespace,
name}) in namespaces that are neither watched nor keeper's own, which keeper reads by name.
*/}}
{{- define "keeper.providerSecretsElsewhere" -}}
{{- $covered := concat (.Values.config.watchNamespaces | default list) (list .Release.Namespace) -}}
{{- $secrets := list -}}
{{- range $name, $provider := (.Values.config.providers | default dict) }}
{{- range $kind, $settings := $provider }}
{{- if kindIs "map" $settings }}
{{- range $key := list "adminCredentialsSecret" "credentialsSecret" }}
{{- $secret := index $settings $key }}
{{- if and $secret $secret.namespace (not (has $secret.namespace $covered)) }}
{{- $secrets = append $secrets (dict "namespace" $secret.namespace "name" $secret.name) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $secrets | uniq | toJson -}}
{{- end -}}
