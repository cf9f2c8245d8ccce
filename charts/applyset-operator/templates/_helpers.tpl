{{/* The chart name, truncated to 63 characters (a DNS label). */}}
{{- define "applyset-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's objects: the release name, or release-chart when the release
name does not contain the chart name.
*/}}
{{- define "applyset-operator.fullname" -}}
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

{{- define "applyset-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "applyset-operator.labels" -}}
helm.sh/chart: {{ include "applyset-operator.chart" . }}
{{ include "applyset-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: applyset-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the operator's pods. */}}
{{- define "applyset-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "applyset-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "applyset-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "applyset-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The container image. */}}
{{- define "applyset-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* "true" when the operator runs with --leader-elect. */}}
{{- define "applyset-operator.leaderElect" -}}
{{- if and (ne .Values.sharding "auto") (or .Values.leaderElection.enabled (gt (int .Values.replicaCount) 1)) }}true{{ end }}
{{- end }}

{{/* Refuses value combinations that the schema cannot express clearly. */}}
{{- define "applyset-operator.validate" -}}
{{- if and (eq .Values.rbac.members "rules") (empty .Values.rbac.memberRules) }}
{{- fail "rbac.members=rules needs rbac.memberRules: the PolicyRules for every kind your ApplySets declare (verbs get, list, watch, create, patch, update, delete)" }}
{{- end }}
{{- if and (eq .Values.rbac.members "namespaced") (empty .Values.watchNamespace) }}
{{- fail "rbac.members=namespaced needs watchNamespace: the namespace whose ApplySets the operator reconciles and where it may manage members" }}
{{- end }}
{{- end }}

{{/* The Lease of leader election: leaderElection.leaseName, else the release's full name. */}}
{{- define "applyset-operator.leaseName" -}}
{{- default (include "applyset-operator.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}
