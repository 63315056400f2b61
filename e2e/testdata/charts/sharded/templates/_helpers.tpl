{{/*
Expand the name of the chart.
*/}}
{{- define "sharded.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name.
*/}}
{{- define "sharded.fullname" -}}
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

{{- define "sharded.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sharded.labels" -}}
helm.sh/chart: {{ include "sharded.chart" . }}
app.kubernetes.io/name: {{ include "sharded.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
A tuning value: data.<key> of the tuning ConfigMap when it sets it, the
value of the same name otherwise.
*/}}
{{- define "sharded.tuned" -}}
{{- $tuning := lookup "v1" "ConfigMap" .root.Release.Namespace .root.Values.tuning.name }}
{{- dig "data" .key (index .root.Values .key | toString) $tuning }}
{{- end }}

{{/*
The pairs of distinct shards, counted.
*/}}
{{- define "sharded.pairs" -}}
{{- $pairs := 0 }}
{{- range $i := until . }}
{{- range $j := until $ }}
{{- if ne $i $j }}
{{- $pairs = add1 $pairs }}
{{- end }}
{{- end }}
{{- end }}
{{- $pairs }}
{{- end }}

{{/*
Padding of 2^n characters.
*/}}
{{- define "sharded.padding" -}}
{{- $pad := "#" }}
{{- range until . }}
{{- $pad = print $pad $pad }}
{{- end }}
{{- $pad }}
{{- end }}
