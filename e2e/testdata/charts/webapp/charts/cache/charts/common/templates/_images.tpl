{{/* vim: set filetype=mustache: */}}
{{/*
Return the proper image name: repository:tag, the tag defaulting to the
chart's appVersion.
{{ include "common.images.image" ( dict "imageRoot" .Values.path.to.the.image "context" $) }}
*/}}
{{- define "common.images.image" -}}
{{- $tag := .imageRoot.tag | default .context.Chart.AppVersion | toString -}}
{{- printf "%s:%s" .imageRoot.repository $tag -}}
{{- end -}}
