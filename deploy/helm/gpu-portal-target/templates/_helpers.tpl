{{/* Names and labels shared by the chart's objects. */}}

{{- define "gpu-portal-target.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-portal-target.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal-target.serviceAccountName" -}}
{{- default (include "gpu-portal-target.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* The user name the API server gives the ServiceAccount's tokens. */}}
{{- define "gpu-portal-target.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "gpu-portal-target.serviceAccountName" .) -}}
{{- end -}}

{{- define "gpu-portal-target.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "gpu-portal-target.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuportal
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* A CEL list literal of strings: ['a', 'b']. */}}
{{- define "gpu-portal-target.celList" -}}
[{{- range $i, $item := . -}}{{- if $i -}}, {{ end -}}'{{ $item }}'{{- end -}}]
{{- end -}}
