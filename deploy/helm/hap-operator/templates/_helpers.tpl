{{/* Chart name. */}}
{{- define "hap-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: the release name when it already contains the chart name. */}}
{{- define "hap-operator.fullname" -}}
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

{{- define "hap-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hap-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hap-operator.labels" -}}
{{ include "hap-operator.selectorLabels" . }}
app.kubernetes.io/part-of: hap-operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image: by digest when image.digest is set (what a release pins), else by tag. */}}
{{- define "hap-operator.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{- define "hap-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hap-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "hap-operator.leaseName" -}}
{{- default (include "hap-operator.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{/* Whether a HapConfig is rendered: rules given somewhere and config.create. */}}
{{- define "hap-operator.renderConfig" -}}
{{- if and .Values.config.create (or .Values.hap.rule .Values.config.rules .Values.config.legacyRules) -}}true{{- end -}}
{{- end -}}

{{/* The ServiceAccount as an RBAC subject. */}}
{{- define "hap-operator.subject" -}}
- kind: ServiceAccount
  name: {{ include "hap-operator.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}

{{/* The garden ServiceAccount (garden.rbacOnly): the operator's identity in a separate garden,
in the Gardener project namespace. */}}
{{- define "hap-operator.gardenServiceAccountName" -}}
{{- default (include "hap-operator.fullname" .) .Values.garden.serviceAccount.name -}}
{{- end -}}

{{/* Who the garden-side rules are for: the operator's ServiceAccount when the garden is this
cluster, the garden ServiceAccount when rendering for a separate garden. */}}
{{- define "hap-operator.gardenSubject" -}}
{{- if .Values.garden.rbacOnly -}}
- kind: ServiceAccount
  name: {{ include "hap-operator.gardenServiceAccountName" . }}
  namespace: {{ .Values.bindingNamespace }}
{{- else -}}
{{ include "hap-operator.subject" . }}
{{- end -}}
{{- end -}}

{{/* Where the garden kubeconfig Secret is mounted (read-only). */}}
{{- define "hap-operator.gardenKubeconfigDir" -}}/etc/hap-operator/garden{{- end -}}

{{/* Whether any request source is on (then the webhook runs). */}}
{{- define "hap-operator.webhookEnabled" -}}
{{- if or .Values.sources.runtimes.enabled .Values.sources.clusters.enabled .Values.sources.shoots.enabled -}}true{{- end -}}
{{- end -}}

{{/*
The ConfigMap with the CA of the API servers' client certificates (--webhook-client-ca): the one
named in webhook.clientCA.configMap, else <fullname>-webhook-client-ca; none only with
webhook.allowUnauthenticated and no name given. A forged review is refused at TLS with it.
*/}}
{{- define "hap-operator.webhookClientCA" -}}
{{- if .Values.webhook.clientCA.configMap -}}
{{- .Values.webhook.clientCA.configMap -}}
{{- else if not .Values.webhook.allowUnauthenticated -}}
{{- printf "%s-webhook-client-ca" (include "hap-operator.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Whether the NetworkPolicy is rendered: networkPolicy.enabled, or unset with a request source on. */}}
{{- define "hap-operator.networkPolicyEnabled" -}}
{{- $on := .Values.networkPolicy.enabled -}}
{{- if kindIs "invalid" $on -}}
{{- include "hap-operator.webhookEnabled" . -}}
{{- else if $on -}}true{{- end -}}
{{- end -}}

{{- define "hap-operator.webhookSecret" -}}
{{- default (printf "%s-webhook-tls" (include "hap-operator.fullname" .)) .Values.webhook.secretName -}}
{{- end -}}

{{/* (list alert text old new): text with old replaced by new; fails when old is not in text, so
a changed rule file cannot silently drop a configured threshold. */}}
{{- define "hap-operator.swap" -}}
{{- $alert := index . 0 }}{{- $text := index . 1 }}{{- $old := index . 2 }}{{- $new := index . 3 }}
{{- if not (contains $old $text) }}
{{- fail (printf "prometheusRule.thresholds: the rule %s no longer contains %q; update templates/prometheusrule.yaml" $alert $old) }}
{{- end }}
{{- replace $old $new $text }}
{{- end -}}
