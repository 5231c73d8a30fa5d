{{/* The release's name, as every object is named. */}}
{{- define "prescient.name" -}}
{{- printf "%s-prescient" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels every object carries. */}}
{{- define "prescient.labels" -}}
app.kubernetes.io/name: prescient
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The pods' selector. */}}
{{- define "prescient.selector" -}}
app.kubernetes.io/name: prescient
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
