{{- define "webstack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "webstack.fullname" -}}
{{- if contains (include "webstack.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "webstack.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "webstack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "webstack.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "webstack.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{ include "webstack.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: webstack
{{- end }}

{{- define "webstack.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- include "webstack.fullname" . }}
{{- else }}
{{- "default" }}
{{- end }}
{{- end }}
