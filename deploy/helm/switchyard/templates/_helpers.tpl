{{/* Names follow ingress-nginx's chart rules, so release "switchyard" gives
deploy/base's names (switchyard-controller). */}}
{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.fullname" -}}
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

{{- define "switchyard.controller.fullname" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .) .Values.controller.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.defaultBackend.fullname" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .) .Values.defaultBackend.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.admission.fullname" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .) .Values.controller.admissionWebhooks.name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.defaultBackend.serviceAccountName" -}}
{{- if .Values.defaultBackend.serviceAccount.create -}}
{{- default (printf "%s-backend" (include "switchyard.fullname" .)) .Values.defaultBackend.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.defaultBackend.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.electionID" -}}
{{- default (printf "%s-leader" (include "switchyard.fullname" .)) .Values.controller.electionID -}}
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: {{ include "switchyard.name" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* An image reference from an image.* dict: repository wins over
registry/image; digest pins it. Call with (dict "image" ... "global" .Values.global). */}}
{{- define "switchyard.image" -}}
{{- $img := .image -}}
{{- $repo := $img.repository -}}
{{- if not $repo -}}
{{- $repo = printf "%s/%s" (default .global.image.registry $img.registry) (required "an image needs image.image or image.repository" $img.image) -}}
{{- end -}}
{{- $ref := $repo -}}
{{- if $img.tag }}{{ $ref = printf "%s:%s" $ref (toString $img.tag) }}{{ end -}}
{{- if $img.digest }}{{ $ref = printf "%s@%s" $ref $img.digest }}{{ end -}}
{{- $ref -}}
{{- end -}}

{{/* A container securityContext from image.* values. */}}
{{- define "switchyard.containerSecurityContext" -}}
runAsNonRoot: {{ .runAsNonRoot }}
runAsUser: {{ .runAsUser }}
runAsGroup: {{ .runAsGroup }}
allowPrivilegeEscalation: {{ .allowPrivilegeEscalation }}
{{- with .seccompProfile }}
seccompProfile:
  {{- toYaml . | nindent 2 }}
{{- end }}
readOnlyRootFilesystem: {{ .readOnlyRootFilesystem }}
capabilities:
  drop: ["ALL"]
  add: ["NET_BIND_SERVICE"]
{{- end -}}

{{/* The name of a TCP or UDP port: <port>-tcp, with portNamePrefix. */}}
{{- define "switchyard.l4PortName" -}}
{{- if .prefix }}{{ printf "%s-%s-%s" .prefix (toString .port) .proto }}{{ else }}{{ printf "%s-%s" (toString .port) .proto }}{{ end -}}
{{- end -}}

{{/* The controller's flags, ingress-nginx's names; every one exists in
`switchyard controller --help` (TestHelmArgsAreControllerFlags). */}}
{{- define "switchyard.args" -}}
{{- $c := .Values.controller -}}
- controller
- --data-plane={{ $c.dataPlane }}
{{- if eq $c.dataPlane "go" }}
- --go-workers={{ int $c.goWorkers }}
{{- end }}
{{- if .Values.defaultBackend.enabled }}
- --default-backend-service=$(POD_NAMESPACE)/{{ include "switchyard.defaultBackend.fullname" . }}
{{- end }}
{{- if and $c.publishService.enabled $c.service.enabled }}
{{- if $c.publishService.pathOverride }}
- --publish-service={{ $c.publishService.pathOverride }}
{{- else if $c.service.external.enabled }}
- --publish-service=$(POD_NAMESPACE)/{{ include "switchyard.controller.fullname" . }}
{{- else if $c.service.internal.enabled }}
- --publish-service=$(POD_NAMESPACE)/{{ include "switchyard.controller.fullname" . }}-internal
{{- end }}
{{- end }}
- --election-id={{ include "switchyard.electionID" . }}
{{- if $c.electionTTL }}
- --election-ttl={{ $c.electionTTL }}
{{- end }}
- --controller-class={{ $c.ingressClassResource.controllerValue }}
{{- if $c.ingressClass }}
- --ingress-class={{ $c.ingressClass }}
{{- end }}
- --configmap={{ default "$(POD_NAMESPACE)" $c.configMapNamespace }}/{{ include "switchyard.controller.fullname" . }}
{{- if .Values.tcp }}
- --tcp-services-configmap={{ default "$(POD_NAMESPACE)" $c.tcp.configMapNamespace }}/{{ include "switchyard.fullname" . }}-tcp
{{- end }}
{{- if .Values.udp }}
- --udp-services-configmap={{ default "$(POD_NAMESPACE)" $c.udp.configMapNamespace }}/{{ include "switchyard.fullname" . }}-udp
{{- end }}
{{- if $c.scope.enabled }}
- --watch-namespace={{ default "$(POD_NAMESPACE)" $c.scope.namespace }}
{{- end }}
{{- if $c.admissionWebhooks.enabled }}
- --validating-webhook=:{{ $c.admissionWebhooks.port }}
- --validating-webhook-certificate={{ $c.admissionWebhooks.certificate }}
- --validating-webhook-key={{ $c.admissionWebhooks.key }}
{{- end }}
- --http-port={{ $c.containerPort.http }}
- --https-port={{ $c.containerPort.https }}
- --status-port={{ $c.metrics.port }}
{{- if $c.healthCheckHost }}
- --healthz-host={{ $c.healthCheckHost }}
{{- else }}
{{- /* The kubelet probes the pod IP: the status port listens on all addresses. */}}
- --status-address=0.0.0.0
{{- end }}
{{- if $c.ingressClassByName }}
- --ingress-class-by-name=true
{{- end }}
{{- if $c.watchIngressWithoutClass }}
- --watch-ingress-without-class=true
{{- end }}
{{- range $key, $value := $c.extraArgs }}
{{- if not (regexMatch "^[a-zA-Z0-9][a-zA-Z0-9_-]*$" $key) }}
{{- fail (printf "controller.extraArgs: %q is not a flag name (write the name without the leading --)" $key) }}
{{- end }}
{{- if or (kindIs "invalid" $value) (eq (toString $value) "") }}
- {{ printf "--%s" $key | quote }}
{{- else }}
- {{ printf "--%s=%v" $key $value | quote }}
{{- end }}
{{- end }}
{{- end -}}
