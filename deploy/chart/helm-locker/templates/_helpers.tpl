{{/* The chart's name. */}}
{{- define "helm-locker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name of the release's objects. */}}
{{- define "helm-locker.fullname" -}}
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

{{- define "helm-locker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "helm-locker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "helm-locker.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "helm-locker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "helm-locker.serviceAccountName" -}}
{{- default (include "helm-locker.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* --default-service-account: helm-locker-writer unless set, or none with rbac.writeAll. */}}
{{- define "helm-locker.defaultServiceAccount" -}}
{{- if kindIs "invalid" .Values.defaultServiceAccount }}
{{- if not .Values.rbac.writeAll }}helm-locker-writer{{ end }}
{{- else }}
{{- .Values.defaultServiceAccount }}
{{- end }}
{{- end }}

{{/*
The ServiceAccounts the locker may impersonate, as a JSON list:
rbac.impersonate.serviceAccounts, the default writer
(--default-service-account) and, with selfLock, the self-lock's account;
["*"] for any name.
*/}}
{{- define "helm-locker.impersonated" -}}
{{- $names := .Values.rbac.impersonate.serviceAccounts | default list }}
{{- if has "*" $names }}["*"]
{{- else }}
{{- with include "helm-locker.defaultServiceAccount" . }}{{ $names = append $names . }}{{ end }}
{{- if .Values.selfLock.enabled }}{{ $names = append $names (printf "%s-self" (include "helm-locker.fullname" .)) }}{{ end }}
{{- $names | uniq | toJson }}
{{- end }}
{{- end }}

{{/* An address flag's value: :port, or 0 when off. */}}
{{- define "helm-locker.bind" -}}
{{- if .enabled }}:{{ .port }}{{ else }}0{{ end }}
{{- end }}

{{/*
The shards to run, as a JSON list: .Values.shards, or one unnamed shard
that serves every CR. Each name must do as a label value and a name suffix.
*/}}
{{- define "helm-locker.shards" -}}
{{- range .Values.shards }}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$" (toString .)) }}
{{- fail (printf "shards: %q is not a shard name: lower-case letters, digits and '-', at most 32" (toString .)) }}
{{- end }}
{{- end }}
{{- if and .Values.shards (ne (len .Values.shards) (len (uniq .Values.shards))) }}
{{- fail "shards: a name is listed twice" }}
{{- end }}
{{- if .Values.shards }}{{ toJson .Values.shards }}{{ else }}[""]{{ end }}
{{- end }}

{{/* The label that assigns a CR to a shard, and marks a shard's pods. */}}
{{- define "helm-locker.shardLabel" -}}
sharding.helm-locker.io/shard
{{- end }}

{{/* A shard's suffix on the names of its objects: -<shard>, or none. */}}
{{- define "helm-locker.shardSuffix" -}}
{{- with . }}-{{ . }}{{ end }}
{{- end }}

{{/* The Lease a shard's replicas compete for (--leader-elect-lease-name). */}}
{{- define "helm-locker.lease" -}}
{{- .root.Values.controllerName }}{{ include "helm-locker.shardSuffix" .shard }}
{{- end }}

{{/* The Service the API server calls a shard's webhook through (--webhook-service). */}}
{{- define "helm-locker.webhookService" -}}
helm-locker-webhook{{ include "helm-locker.shardSuffix" . }}
{{- end }}

{{/* The selector labels of a shard's pods. */}}
{{- define "helm-locker.shardSelectorLabels" -}}
{{ include "helm-locker.selectorLabels" .root }}
{{- with .shard }}
{{ include "helm-locker.shardLabel" $ }}: {{ . }}
{{- end }}
{{- end }}

{{/* The container image: by digest when one is given, else by tag (the chart's appVersion unless set). */}}
{{- define "helm-locker.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
