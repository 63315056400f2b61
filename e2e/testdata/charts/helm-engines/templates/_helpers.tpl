{{- define "helm-engines.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "helm-engines.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "helm-engines.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "helm-engines.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "helm-engines.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "helm-engines.jobservice" -}}
{{- printf "%s-jobservice" (include "helm-engines.fullname" .) -}}
{{- end }}

{{- define "helm-engines.portal" -}}
{{- printf "%s-portal" (include "helm-engines.fullname" .) -}}
{{- end }}
