{{- define "reward-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "reward-operator.fullname" -}}
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

{{- define "reward-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "reward-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "reward-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "reward-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: reward-operator
{{- end -}}

{{- define "reward-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "reward-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the operator runs through kopf's peering ("true" or ""): peering.enabled; several replicas need it. */}}
{{- define "reward-operator.peered" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.peering.enabled) }}
{{- fail (printf "replicas: %d needs peering.enabled: true (kopf's peering lets one pod act; --standalone pods would all act)" (int .Values.replicas)) }}
{{- end }}
{{- if .Values.peering.enabled }}true{{ end -}}
{{- end -}}

{{/* Whether several operator pods run at once (a PodDisruptionBudget then keeps one through drains). */}}
{{- define "reward-operator.replicated" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end -}}
{{- end -}}

{{/* The peering object of the replicas: one ClusterKopfPeering, or a KopfPeering per watched namespace. */}}
{{- define "reward-operator.peeringName" -}}
{{- include "reward-operator.fullname" . -}}
{{- end -}}

{{/*
An image reference, [registry/]repository:tag, or [registry/]repository@digest when a digest is pinned: the
one way the chart names an image of ours. The digest alone, not tag@digest: an upgrade whose image did not
change renders the same reference, so the pods that run it are not restarted (vLLM's, through the runtimes).
Argument: dict with "registry" (imageRegistry; empty: the bare name, as the test bed imports it into
its node), "repository", "tag" and "digest" (empty: pulled by tag).
*/}}
{{- define "reward-operator.imageReference" -}}
{{- $reference := ternary (printf "%s@%s" .repository .digest) (printf "%s:%s" .repository .tag) (not (empty .digest)) -}}
{{- with .registry }}{{ $reference = printf "%s/%s" . $reference }}{{ end -}}
{{- $reference -}}
{{- end -}}

{{/* The operator's image; it carries the gateway, the batch worker and the `helm test` script too. */}}
{{- define "reward-operator.image" -}}
{{- $image := .Values.image -}}
{{- include "reward-operator.imageReference" (dict "registry" .Values.imageRegistry "repository" $image.repository "tag" (default .Chart.AppVersion $image.tag) "digest" $image.digest) -}}
{{- end -}}

{{/* The CPU runtimes' image: runtimes.cpuImage as written, else built from runtimes.cpu. */}}
{{- define "reward-operator.cpuRuntimeImage" -}}
{{- $cpu := .Values.runtimes.cpu -}}
{{- .Values.runtimes.cpuImage | default (include "reward-operator.imageReference" (dict "registry" .Values.imageRegistry "repository" $cpu.repository "tag" $cpu.tag "digest" $cpu.digest)) -}}
{{- end -}}

{{/* The names of imagePullSecrets, comma-separated, as the operator reads them (REWARD_OPERATOR_IMAGE_PULL_SECRETS). */}}
{{- define "reward-operator.pullSecretNames" -}}
{{- $names := list -}}
{{- range .Values.imagePullSecrets }}{{ $names = append $names .name }}{{ end -}}
{{- join "," $names -}}
{{- end -}}

{{/* The text of files/rbac.yaml, the one list of permissions (callers parse it with fromYaml). */}}
{{- define "reward-operator.permissions" -}}
{{- .Files.Get "files/rbac.yaml" -}}
{{- end -}}

{{/*
RBAC rules from files/rbac.yaml. Argument: dict with "root" (the chart context)
and "cluster" (true: the cluster-scoped rules; false: the namespaced ones, the
operator's own kinds included).
*/}}
{{- define "reward-operator.rules" -}}
{{- $perms := include "reward-operator.permissions" .root | fromYaml -}}
{{- if not .cluster }}
{{- $own := $perms.own }}
- apiGroups: [{{ $own.group | quote }}]
  resources: {{ toJson $own.resources }}
  verbs: [get, list, watch, patch, update]
- apiGroups: [{{ $own.group | quote }}]
  resources:
  {{- range $own.resources }}
  - {{ . }}/status
  {{- end }}
  verbs: [get, patch, update]
- apiGroups: [{{ $own.group | quote }}]
  resources:
  {{- range $own.resources }}
  - {{ . }}/finalizers
  {{- end }}
  verbs: [update]
{{- end }}
{{- if include "reward-operator.peered" .root }}
{{- $clusterPeering := eq .root.Values.watch.mode "cluster" }}
{{- if eq $clusterPeering .cluster }}
# kopf's peering: each replica watches the peering object and patches its keep-alive record into it
- apiGroups: ["kopf.dev"]
  resources: [{{ ternary "clusterkopfpeerings" "kopfpeerings" $clusterPeering }}]
  verbs: [get, list, watch, patch]
{{- end }}
{{- end }}
{{- range $perms.rules }}
{{- if eq (default false .cluster) $.cluster }}
- apiGroups: [{{ .group | quote }}]
  resources: {{ toJson .resources }}
  verbs: {{ toJson .verbs }}
{{- end }}
{{- end }}
{{- end -}}
