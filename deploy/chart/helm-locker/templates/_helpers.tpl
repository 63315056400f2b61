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

{{/* An address flag's value: :port, or 0 when off. */}}
{{- define "helm-locker.bind" -}}
{{- if .enabled }}:{{ .port }}{{ else }}0{{ end }}
{{- end }}
