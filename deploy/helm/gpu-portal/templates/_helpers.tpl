{{/* Names, labels and the pieces every portal pod shares. */}}

{{- define "gpu-portal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-portal.fullname" -}}
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

{{- define "gpu-portal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-portal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-portal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-portal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuportal
{{- end -}}

{{/* Labels of one component's objects; call with (dict "root" $ "component" "web"). */}}
{{- define "gpu-portal.componentLabels" -}}
{{ include "gpu-portal.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-portal.componentSelector" -}}
{{ include "gpu-portal.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-portal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpu-portal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "gpu-portal.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret runtime pods read, and the one the migration hook reads. */}}
{{- define "gpu-portal.secretName" -}}
{{- default (include "gpu-portal.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{- define "gpu-portal.migrateSecretName" -}}
{{- if .Values.secrets.migrateExistingSecret -}}
{{- .Values.secrets.migrateExistingSecret -}}
{{- else if .Values.secrets.existingSecret -}}
{{- .Values.secrets.existingSecret -}}
{{- else -}}
{{- printf "%s-migrate" (include "gpu-portal.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The optional keys the runtime Secret holds. */}}
{{- define "gpu-portal.optionalKeys" -}}
{{- $keys := list -}}
{{- if .Values.secrets.existingSecret -}}
{{- $keys = .Values.secrets.optionalKeys -}}
{{- else -}}
{{- if .Values.secrets.kubeconfigKey }}{{ $keys = append $keys "kubeconfig-key" }}{{ end -}}
{{- if .Values.secrets.metricsToken }}{{ $keys = append $keys "metrics-token" }}{{ end -}}
{{- if .Values.secrets.auditTrustedKeys }}{{ $keys = append $keys "audit-trusted-keys" }}{{ end -}}
{{- if .Values.secrets.emailUrl }}{{ $keys = append $keys "email-url" }}{{ end -}}
{{- if .Values.secrets.webhookUrl }}{{ $keys = append $keys "webhook-url" }}{{ end -}}
{{- if .Values.secrets.webhookSecret }}{{ $keys = append $keys "webhook-secret" }}{{ end -}}
{{- if .Values.secrets.webhookKey }}{{ $keys = append $keys "webhook-key" }}{{ end -}}
{{- if .Values.secrets.oidcClientSecret }}{{ $keys = append $keys "oidc-client-secret" }}{{ end -}}
{{- if .Values.secrets.ldapBindPassword }}{{ $keys = append $keys "ldap-bind-password" }}{{ end -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{/* Each optional key of the runtime Secret and the setting it is the file of (<name>_FILE). */}}
{{- define "gpu-portal.optionalKeyVariables" -}}
{{- toJson (dict "kubeconfig-key" "GPUPORTAL_KUBECONFIG_KEY" "metrics-token" "GPUPORTAL_METRICS_TOKEN" "audit-trusted-keys" "GPUPORTAL_AUDIT_TRUSTED_KEYS" "email-url" "GPUPORTAL_EMAIL_URL" "webhook-url" "GPUPORTAL_WEBHOOK_URL" "webhook-secret" "GPUPORTAL_WEBHOOK_SECRET" "webhook-key" "GPUPORTAL_WEBHOOK_KEY" "oidc-client-secret" "GPUPORTAL_OIDC_CLIENT_SECRET" "ldap-bind-password" "GPUPORTAL_LDAP_BIND_PASSWORD") -}}
{{- end -}}

{{- define "gpu-portal.ingressHosts" -}}
{{- $hosts := list -}}
{{- if .Values.ingress.enabled -}}
{{- range .Values.ingress.hosts }}{{ $hosts = append $hosts .host }}{{ end -}}
{{- end -}}
{{- toJson $hosts -}}
{{- end -}}

{{- define "gpu-portal.allowedHosts" -}}
{{- $hosts := .Values.config.allowedHosts | default (include "gpu-portal.ingressHosts" . | fromJsonArray) -}}
{{- if not $hosts }}{{ $hosts = list "localhost" }}{{ end -}}
{{- toJson $hosts -}}
{{- end -}}

{{- define "gpu-portal.probeHost" -}}
{{- $first := first (include "gpu-portal.allowedHosts" . | fromJsonArray) -}}
{{- $host := default (trimPrefix "." $first) .Values.web.probeHost -}}
{{- if or (eq $host "*") (eq $host "") }}{{ $host = "localhost" }}{{ end -}}
{{- $host -}}
{{- end -}}

{{/* Pod- and container-level hardening: non-root (uid 10001, the Dockerfile's user), no privilege,
read-only root filesystem, every capability dropped, the runtime's default seccomp profile. */}}
{{- define "gpu-portal.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "gpu-portal.securityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The configuration every portal process reads (README.md's table), from values and the Secret. */}}
{{- define "gpu-portal.env" -}}
{{- $secret := include "gpu-portal.secretName" . -}}
{{- $optional := include "gpu-portal.optionalKeys" . | fromJsonArray -}}
{{- $origins := .Values.config.csrfTrustedOrigins -}}
{{- if not $origins -}}
{{- range (include "gpu-portal.ingressHosts" . | fromJsonArray) }}{{ $origins = append $origins (printf "https://%s" .) }}{{ end -}}
{{- end -}}
- name: GPUPORTAL_DEBUG
  value: "false"
- name: GPUPORTAL_ALLOWED_HOSTS
  value: {{ include "gpu-portal.allowedHosts" . | fromJsonArray | join "," | quote }}
- name: GPUPORTAL_CSRF_TRUSTED_ORIGINS
  value: {{ join "," $origins | quote }}
- name: GPUPORTAL_TRUSTED_PROXIES
  value: {{ .Values.config.trustedProxies | quote }}
- name: GPUPORTAL_BEHIND_TLS_PROXY
  value: {{ .Values.config.behindTlsProxy | quote }}
- name: GPUPORTAL_SECURE_COOKIES
  value: {{ .Values.config.secureCookies | quote }}
- name: GPUPORTAL_HSTS_SECONDS
  value: {{ .Values.config.hstsSeconds | quote }}
- name: GPUPORTAL_LOG_LEVEL
  value: {{ .Values.config.logLevel | quote }}
- name: GPUPORTAL_MANIFESTS_DIR
  value: /var/lib/gpuportal/manifests
- name: GPUPORTAL_AUDIT_CHECKPOINT_DIR
  value: /var/lib/gpuportal/audit-checkpoints
- name: GPUPORTAL_SECRET_KEY_FILE
  value: /etc/gpuportal/secrets/secret-key
- name: GPUPORTAL_AUDIT_SIGNING_KEY_FILE
  value: /etc/gpuportal/secrets/audit-signing-key
{{- range $key := $optional }}
- name: {{ get (include "gpu-portal.optionalKeyVariables" $ | fromJson) $key }}_FILE
  value: /etc/gpuportal/secrets/{{ $key }}
{{- end }}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: database-url}
- name: CELERY_BROKER_URL
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: broker-url}
- name: GPUPORTAL_CACHE_URL
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: cache-url}
{{- range $name, $value := .Values.config.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The Secret's files (only the keys a runtime pod needs: never the owner's database URL). */}}
{{- define "gpu-portal.secretVolume" -}}
- name: secrets
  secret:
    secretName: {{ include "gpu-portal.secretName" . }}
    defaultMode: 0400
    items:
      - {key: secret-key, path: secret-key}
      - {key: audit-signing-key, path: audit-signing-key}
      {{- range (include "gpu-portal.optionalKeys" . | fromJsonArray) }}
      - {key: {{ . }}, path: {{ . }}}
      {{- end }}
{{- end -}}

{{/* Writable places on a read-only root filesystem: /tmp (gunicorn's heartbeats, the metrics files,
beat's schedule) and the portal's two data folders. GPUPORTAL_VAR_DIR stays the image's read-only
/app/var, which holds the static files collected at build time (served by whitenoise). */}}
{{- define "gpu-portal.dataVolumes" -}}
- name: tmp
  emptyDir:
    medium: Memory
    sizeLimit: 256Mi
{{- $root := . -}}
{{- range $name, $folder := dict "audit-checkpoints" .Values.persistence.auditCheckpoints "manifests" .Values.persistence.manifests }}
- name: {{ $name }}
{{- if $folder.enabled }}
  persistentVolumeClaim:
    claimName: {{ default (printf "%s-%s" (include "gpu-portal.fullname" $root) $name) $folder.existingClaim }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end }}
{{- end -}}

{{- define "gpu-portal.dataMounts" -}}
- {name: tmp, mountPath: /tmp}
- {name: audit-checkpoints, mountPath: /var/lib/gpuportal/audit-checkpoints}
- {name: manifests, mountPath: /var/lib/gpuportal/manifests}
- {name: secrets, mountPath: /etc/gpuportal/secrets, readOnly: true}
{{- end -}}

{{/* The checksum annotations: a change of configuration or of the chart's Secret rolls the pods. */}}
{{- define "gpu-portal.checksums" -}}
checksum/config: {{ include "gpu-portal.env" . | sha256sum }}
{{- if not .Values.secrets.existingSecret }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end -}}

{{- define "gpu-portal.podCommon" -}}
{{- include "gpu-portal.podCommonAs" (dict "root" . "serviceAccount" (include "gpu-portal.serviceAccountName" .)) }}
{{- end -}}

{{/* podCommon with another ServiceAccount: the migration hook's, which exists before the release's. */}}
{{- define "gpu-portal.podCommonAs" -}}
serviceAccountName: {{ .serviceAccount }}
automountServiceAccountToken: false
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- include "gpu-portal.podSecurityContext" .root | nindent 2 }}
{{- end -}}

{{/*
The migration hook's ServiceAccount. Pre-install hooks run before the release's own objects exist,
and the ServiceAccount admission plugin refuses a pod whose ServiceAccount is missing, so the hook
brings its own (weight -10, gone once the Job succeeded) when the chart creates ServiceAccounts;
otherwise the operator's, which exists before the install.
*/}}
{{- define "gpu-portal.migrateServiceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- printf "%s-migrate" (include "gpu-portal.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- include "gpu-portal.serviceAccountName" . -}}
{{- end -}}
{{- end -}}

{{/* The node agent is not a portal pod: its own name, so the portal's NetworkPolicies leave it alone. */}}
{{- define "gpu-portal.agentSelector" -}}
app.kubernetes.io/name: {{ include "gpu-portal.name" . }}-agent
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-portal.agentLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-portal.agentSelector" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpuportal
app.kubernetes.io/component: agent
{{- end -}}
