{{/*
Expand the name of the chart.
*/}}
{{- define "two-way.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
*/}}
{{- define "two-way.fullname" -}}
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

{{- define "two-way.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "two-way.labels" -}}
helm.sh/chart: {{ include "two-way.chart" . }}
{{ include "two-way.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- if .Values.kubeVersionLabel }}
two-way.example.com/kube-minor: {{ .Capabilities.KubeVersion.Minor | quote }}
{{- end }}
{{- end }}

{{- define "two-way.selectorLabels" -}}
app.kubernetes.io/name: {{ include "two-way.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The greeting: data.greeting of the settings object when it exists, the
default otherwise (`helm template` looks up nothing).
*/}}
{{- define "two-way.greeting" -}}
{{- $ns := default .Release.Namespace .Values.settings.namespace }}
{{- $settings := lookup "v1" .Values.settings.kind $ns .Values.settings.name }}
{{- $greeting := dig "data" "greeting" "" $settings }}
{{- if and $greeting (eq .Values.settings.kind "Secret") }}
{{- $greeting = b64dec $greeting }}
{{- end }}
{{- default .Values.settings.defaultGreeting $greeting }}
{{- end }}

{{/*
The admin password: kept from the Secret when it exists, as grafana keeps
its own, generated otherwise.
*/}}
{{- define "two-way.password" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (printf "%s-admin" (include "two-way.fullname" .)) }}
{{- if $secret }}
{{- index $secret.data "admin-password" }}
{{- else }}
{{- randAlphaNum 24 | b64enc }}
{{- end }}
{{- end }}
